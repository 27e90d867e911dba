-- Diskless logs sealed by a migration to classic (controller/migration.py): once a
-- partition's leader sealed it at its high watermark (the boundary), no produced batch is
-- stored at or after the boundary, whichever broker's commit tries (a broker that had not
-- yet seen the migration): the commit fails whole and writes nothing, its producers retry.
-- Transaction markers still are: a transaction's outcome is recorded for each of its
-- partitions, classic ones too (never read there: the classic log has its own marker).
-- The trigger: sluice_refuse_sealed_batch (storage/postgres/functions/).

CREATE TABLE sealed_logs (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    boundary bigint NOT NULL,
    PRIMARY KEY (topic_id, partition)
);
