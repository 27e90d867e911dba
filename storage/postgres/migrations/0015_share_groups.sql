-- Share groups (KIP-932): one row per share-partition (group, topic, partition) with its
-- state as JSON (broker/groups/share/partition_state.py) and a version every write
-- compares and sets, so two brokers never acquire the same record.

CREATE TABLE share_partitions (
    group_id text NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    version bigint NOT NULL,
    state text NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition)
);

-- Deleting a topic removes its share-partitions from every group.
CREATE INDEX share_partitions_topic ON share_partitions (topic_id);

-- Configs set on groups (IncrementalAlterConfigs on a GROUP resource: share.auto.offset.reset,
-- share.isolation.level, ...).
CREATE TABLE group_configs (
    group_id text NOT NULL,
    name text NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (group_id, name)
);
