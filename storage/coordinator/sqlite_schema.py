"""The SQLite batch coordinator's schema: versioned migrations, applied in order by
storage.sqlite.migrate (component "coordinator"). The transactions' tables live here
too: the coordinator and its TransactionStore half share one database file."""

from __future__ import annotations

MIGRATIONS: list[list[str]] = [
    # 1: initial schema (the shape of Inkless's control plane).
    [
        """CREATE TABLE logs (
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            log_start_offset INTEGER NOT NULL DEFAULT 0,
            high_watermark INTEGER NOT NULL DEFAULT 0,
            byte_size INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (topic_id, partition)
        ) WITHOUT ROWID""",
        """CREATE TABLE files (
            file_id INTEGER PRIMARY KEY,
            object_key TEXT NOT NULL UNIQUE,
            size INTEGER NOT NULL,
            uploader_broker_id INTEGER NOT NULL,
            committed_at INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('uploaded', 'deleting')),
            reason TEXT NOT NULL CHECK (reason IN ('produce', 'merge')),
            marked_at INTEGER
        )""",
        # Only deleting files are ever listed by time; a partial index stays tiny.
        "CREATE INDEX files_deleting ON files (marked_at) WHERE state = 'deleting'",
        # Clustered by (partition, last_offset): a fetch is one contiguous range scan.
        # last_offset rather than base_offset because fetches ask "last_offset >= x".
        """CREATE TABLE batches (
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            base_offset INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            file_id INTEGER NOT NULL REFERENCES files (file_id),
            byte_offset INTEGER NOT NULL,
            byte_size INTEGER NOT NULL,
            timestamp_type INTEGER NOT NULL,
            max_timestamp INTEGER NOT NULL,
            log_append_time INTEGER NOT NULL,
            PRIMARY KEY (topic_id, partition, last_offset)
        ) WITHOUT ROWID""",
        # To find files left without batches after deletions.
        "CREATE INDEX batches_by_file ON batches (file_id)",
        # One row per retained batch (at most 5) of a producer in a partition.
        """CREATE TABLE producer_state (
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            base_offset INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            base_sequence INTEGER NOT NULL,
            last_sequence INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            log_append_time INTEGER NOT NULL,
            PRIMARY KEY (topic_id, partition, producer_id, base_offset)
        ) WITHOUT ROWID""",
    ],
    # 2: producer id blocks handed to brokers (InitProducerId).
    [
        "CREATE TABLE producer_id_blocks (id INTEGER PRIMARY KEY CHECK (id = 1), next_id INTEGER)",
        "INSERT INTO producer_id_blocks (id, next_id) VALUES (1, 0)",
    ],
    # 3: cluster id and broker liveness (as storage/postgres/migrations/0002_cluster.sql).
    [
        "CREATE TABLE cluster_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE broker_heartbeats (
            node_id INTEGER PRIMARY KEY,
            host TEXT NOT NULL,
            port INTEGER NOT NULL,
            rack TEXT,
            incarnation BLOB NOT NULL,
            last_seen INTEGER NOT NULL
        )""",
    ],
    # 4: transactions (storage/transactions/; as storage/postgres/migrations/0005).
    [
        # The transaction coordinator's state, one row per transactional id.
        """CREATE TABLE transactions (
            transactional_id TEXT PRIMARY KEY,
            producer_id INTEGER NOT NULL,
            producer_epoch INTEGER NOT NULL,
            state TEXT NOT NULL,
            timeout_ms INTEGER NOT NULL,
            started_ms INTEGER NOT NULL,
            updated_ms INTEGER NOT NULL
        ) WITHOUT ROWID""",
        # commit_file verifies a transactional batch by its producer id. An id belongs to
        # one transactional id only (ids come from one counter); not UNIQUE because
        # PostgreSQL's txn_init inserts a new id's row before drawing its producer id.
        "CREATE INDEX transactions_producer ON transactions (producer_id)",
        # txn_expired reads only the ongoing ones, oldest first.
        "CREATE INDEX transactions_ongoing ON transactions (started_ms) WHERE state = 'Ongoing'",
        """CREATE TABLE txn_partitions (
            transactional_id TEXT NOT NULL,
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            PRIMARY KEY (transactional_id, topic_id, partition)
        ) WITHOUT ROWID""",
        """CREATE TABLE txn_groups (
            transactional_id TEXT NOT NULL,
            group_id TEXT NOT NULL,
            PRIMARY KEY (transactional_id, group_id)
        ) WITHOUT ROWID""",
        # TxnOffsetCommit's offsets until the transaction ends (then group_offsets or gone).
        """CREATE TABLE txn_offsets (
            transactional_id TEXT NOT NULL,
            group_id TEXT NOT NULL,
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset INTEGER NOT NULL,
            leader_epoch INTEGER NOT NULL,
            metadata TEXT NOT NULL,
            commit_timestamp INTEGER NOT NULL,
            PRIMARY KEY (transactional_id, group_id, topic_id, partition)
        ) WITHOUT ROWID""",
        # Per partition, the producers with an open transaction and where it began.
        """CREATE TABLE open_txns (
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            first_offset INTEGER NOT NULL,
            PRIMARY KEY (topic_id, partition, producer_id)
        ) WITHOUT ROWID""",
        # The last stable offset is min(first_offset) of a partition: one index probe.
        "CREATE INDEX open_txns_first ON open_txns (topic_id, partition, first_offset)",
        # Keyed by the abort marker's offset (unique in its partition): fetches ask
        # "last_offset >= x". last_stable_offset is the partition's LSO just after the
        # marker (Kafka's AbortedTxn keeps it too): it bounds that scan, see
        # storage.transactions.sqlite.aborted_overlapping.
        """CREATE TABLE aborted_txns (
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            last_offset INTEGER NOT NULL,
            producer_id INTEGER NOT NULL,
            first_offset INTEGER NOT NULL,
            last_stable_offset INTEGER NOT NULL,
            PRIMARY KEY (topic_id, partition, last_offset)
        ) WITHOUT ROWID""",
    ],
    # 5: OffsetFetch's require_stable looks pending offsets up by group (as postgres 0006).
    ["CREATE INDEX txn_offsets_group ON txn_offsets (group_id)"],
    # 6: classic partitions whose markers are still to be sent (as postgres 0008).
    [
        """CREATE TABLE txn_pending_markers (
            transactional_id TEXT NOT NULL,
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            PRIMARY KEY (transactional_id, topic_id, partition)
        ) WITHOUT ROWID"""
    ],
    # 7: diskless logs sealed by a migration to classic (as postgres 0010): commit_file
    # stores no produced batch in them any more, whichever broker commits it.
    [
        """CREATE TABLE sealed_logs (
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            boundary INTEGER NOT NULL,
            PRIMARY KEY (topic_id, partition)
        ) WITHOUT ROWID""",
    ],
    # 8: markers only in diskless logs (as postgres 0011). Before it every partition of a
    # transaction took one, so a log sealed for classic may hold markers of the classic
    # partition's transactions past its boundary, which readers were kept from: they
    # go, the log ends at its boundary again, and from now on nothing is stored past it.
    [
        """CREATE TEMP TABLE past_seal AS
        SELECT b.topic_id, b.partition, b.file_id, b.byte_size FROM batches b
        JOIN sealed_logs s ON s.topic_id = b.topic_id AND s.partition = b.partition
        WHERE b.base_offset >= s.boundary""",
        """DELETE FROM batches WHERE EXISTS (
            SELECT 1 FROM sealed_logs s WHERE s.topic_id = batches.topic_id
            AND s.partition = batches.partition AND batches.base_offset >= s.boundary)""",
        """DELETE FROM aborted_txns WHERE EXISTS (
            SELECT 1 FROM sealed_logs s WHERE s.topic_id = aborted_txns.topic_id
            AND s.partition = aborted_txns.partition AND aborted_txns.last_offset >= s.boundary)""",
        """UPDATE logs SET
            high_watermark = max(log_start_offset, (SELECT s.boundary FROM sealed_logs s
                WHERE s.topic_id = logs.topic_id AND s.partition = logs.partition)),
            byte_size = byte_size - (SELECT coalesce(sum(p.byte_size), 0) FROM past_seal p
                WHERE p.topic_id = logs.topic_id AND p.partition = logs.partition)
        WHERE EXISTS (SELECT 1 FROM sealed_logs s WHERE s.topic_id = logs.topic_id
            AND s.partition = logs.partition AND logs.high_watermark > s.boundary)""",
        """UPDATE files SET state = 'deleting',
            marked_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
        WHERE file_id IN (SELECT file_id FROM past_seal) AND state = 'uploaded'
        AND NOT EXISTS (SELECT 1 FROM batches WHERE batches.file_id = files.file_id)""",
        "DROP TABLE past_seal",
    ],
    # 9: the epoch a producer had before its last InitProducerId bump (as postgres 0013):
    # that call's retry (KIP-360: the client never got the answer) gets the same epoch
    # back instead of PRODUCER_FENCED. -1: none (a new producer, or fenced by an abort).
    ["ALTER TABLE transactions ADD COLUMN last_producer_epoch INTEGER NOT NULL DEFAULT -1"],
    # 10: how many transactions the id has completed (as postgres 0014): each completion's
    # number goes in its classic markers so that a leader can refuse a late copy of an
    # earlier one (see TransactionState.completions).
    ["ALTER TABLE transactions ADD COLUMN completions INTEGER NOT NULL DEFAULT 0"],
    # 11: the lowest sequence a transaction's batches showed in a partition before one was
    # written there (KIP-890's verification; as postgres 0017, see TxnVerifier.guard).
    ["ALTER TABLE txn_partitions ADD COLUMN lowest_sequence INTEGER"],
]
