-- Consumer-group membership snapshots (storage/groups/: GroupSnapshot, Kafka's
-- GroupMetadata record): written when a generation's assignment is set, deleted when the
-- group becomes empty or is deleted. A broker that becomes a group's coordinator loads the
-- snapshot, so members keep their ids, generation and assignment across the change.

CREATE TABLE group_snapshots (
    group_id text PRIMARY KEY,
    generation_id integer NOT NULL,
    protocol_type text NOT NULL,
    protocol_name text NOT NULL,
    leader_id text NOT NULL,
    state_since_ms bigint NOT NULL,
    written_ms bigint NOT NULL
);

-- Members in join order (position 0 first): the next leader is the first.
CREATE TABLE group_snapshot_members (
    group_id text NOT NULL,
    position integer NOT NULL,
    member_id text NOT NULL,
    group_instance_id text,
    client_id text NOT NULL,
    client_host text NOT NULL,
    rebalance_timeout_ms integer NOT NULL,
    session_timeout_ms integer NOT NULL,
    subscription bytea NOT NULL,
    assignment bytea NOT NULL,
    PRIMARY KEY (group_id, position)
);
