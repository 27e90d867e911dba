-- Committed offsets of consumer groups (the group coordinator keeps membership in memory;
-- offsets must survive every broker). Keyed by topic id: a topic deleted and created again
-- under the same name starts without offsets.

CREATE TABLE group_offsets (
    group_id text NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    committed_offset bigint NOT NULL,
    leader_epoch integer NOT NULL,
    metadata text NOT NULL,
    commit_timestamp bigint NOT NULL,
    PRIMARY KEY (group_id, topic_id, partition)
);

-- Deleting a topic removes its offsets from every group.
CREATE INDEX group_offsets_topic ON group_offsets (topic_id);
