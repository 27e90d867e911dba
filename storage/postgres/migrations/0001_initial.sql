-- Sluice batch coordinator and topic catalog on PostgreSQL (DESIGN §4).
--
-- Same tables and semantics as the SQLite backend (storage/coordinator/sqlite.py), which
-- the shared contract suite holds both to. Every public operation is ONE statement or
-- ONE call of a function (storage/postgres/functions/), so it costs one round trip
-- whatever the number of partitions: the loops over batches and partitions run in the
-- database, next to the data.
--
-- Locking discipline (why concurrent brokers never deadlock): a writer first locks the
-- `logs` rows it touches, all at once, ORDER BY topic_id, partition; only then, if at
-- all, the `files` rows it may mark deleting, ORDER BY file_id. `batches` and
-- `producer_state` rows of a partition are only ever written under that partition's
-- `logs` row lock. Functions run at READ COMMITTED (the pool pins it), so a statement
-- that follows a lock wait sees what the other transaction committed.
--
-- Error codes returned are Kafka's: 0 NONE, 1 OFFSET_OUT_OF_RANGE,
-- 3 UNKNOWN_TOPIC_OR_PARTITION, 45 OUT_OF_ORDER_SEQUENCE_NUMBER, 47 INVALID_PRODUCER_EPOCH.

-- ------------------------------------------------------------------------ tables

CREATE TABLE logs (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    log_start_offset bigint NOT NULL DEFAULT 0,
    high_watermark bigint NOT NULL DEFAULT 0,
    byte_size bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
);

CREATE TABLE files (
    file_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    object_key text NOT NULL UNIQUE,
    size bigint NOT NULL,
    uploader_broker_id integer NOT NULL,
    committed_at bigint NOT NULL,
    state text NOT NULL CHECK (state IN ('uploaded', 'deleting')),
    reason text NOT NULL CHECK (reason IN ('produce', 'merge')),
    marked_at bigint
);
-- Only deleting files are ever listed by time; a partial index stays tiny.
CREATE INDEX files_deleting ON files (marked_at, file_id) WHERE state = 'deleting';

-- Keyed by (partition, last_offset): a fetch asks "last_offset >= x" and reads one
-- contiguous index range.
CREATE TABLE batches (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    base_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    file_id bigint NOT NULL REFERENCES files (file_id),
    byte_offset bigint NOT NULL,
    byte_size bigint NOT NULL,
    timestamp_type smallint NOT NULL,
    max_timestamp bigint NOT NULL,
    log_append_time bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
);
-- To find files left without batches after deletions (and for the foreign key).
CREATE INDEX batches_by_file ON batches (file_id);

-- One row per retained batch (at most 5) of a producer in a partition. Sequences are
-- bigint: a producer may send any int32 and a batch's range is computed past 2^31-1
-- before it wraps.
CREATE TABLE producer_state (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    producer_id bigint NOT NULL,
    base_offset bigint NOT NULL,
    producer_epoch integer NOT NULL,
    base_sequence bigint NOT NULL,
    last_sequence bigint NOT NULL,
    last_offset bigint NOT NULL,
    log_append_time bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id, base_offset)
);

-- Producer ids handed out to brokers (InitProducerId), one row.
CREATE TABLE producer_id_blocks (
    id integer PRIMARY KEY CHECK (id = 1),
    next_id bigint NOT NULL
);
INSERT INTO producer_id_blocks (id, next_id) VALUES (1, 0);

-- The topic catalog (storage/catalog/postgres.py). COLLATE "C": names sort by bytes,
-- as in SQLite, whatever the database's locale.
CREATE TABLE topics (
    name text COLLATE "C" PRIMARY KEY,
    topic_id uuid NOT NULL UNIQUE,
    partitions integer NOT NULL CHECK (partitions > 0),
    configs jsonb NOT NULL DEFAULT '{}'
);
