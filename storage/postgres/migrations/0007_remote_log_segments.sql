-- Tiered storage of classic topics: one row per remote log segment (storage/tiered/metadata.py).
CREATE TABLE remote_log_segments (
    segment_id uuid PRIMARY KEY,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    start_offset bigint NOT NULL,
    end_offset bigint NOT NULL,
    max_timestamp bigint NOT NULL,
    leader_epoch integer NOT NULL,
    -- The epoch vector as "epoch:start,...", the same text on both backends.
    epochs text NOT NULL,
    size bigint NOT NULL,
    broker_id integer NOT NULL,
    state text NOT NULL CHECK (state IN ('COPY_SEGMENT_STARTED', 'COPY_SEGMENT_FINISHED',
        'DELETE_SEGMENT_STARTED', 'DELETE_SEGMENT_FINISHED')),
    event_ms bigint NOT NULL
);
-- Every read is one partition's segments in offset order.
CREATE INDEX remote_log_segments_partition ON remote_log_segments (topic_id, partition, start_offset);
-- The remote log start per partition, shared by every leader (retention moves it up only).
CREATE TABLE remote_log_starts (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    log_start bigint NOT NULL,
    PRIMARY KEY (topic_id, partition)
);
