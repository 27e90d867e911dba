-- Diskless logs sealed by a migration to classic (controller/migration.py): once a
-- partition's leader sealed it at its high watermark (the boundary), no produced batch is
-- stored at or after the boundary, whichever broker's commit tries (a broker that had not
-- yet seen the migration): the commit fails whole and writes nothing, its producers retry.
-- Transaction markers still are: a transaction's outcome is recorded for each of its
-- partitions, classic ones too (never read there: the classic log has its own marker).

CREATE TABLE sealed_logs (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    boundary bigint NOT NULL,
    PRIMARY KEY (topic_id, partition)
);

CREATE FUNCTION sluice_refuse_sealed_batch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Only produce commits: sluice_txn_complete's markers and merges pass.
    IF current_query() LIKE '%sluice_commit_file(%' AND EXISTS (
        SELECT 1 FROM sealed_logs s
        WHERE s.topic_id = NEW.topic_id AND s.partition = NEW.partition
          AND NEW.base_offset >= s.boundary
    ) THEN
        RAISE EXCEPTION 'log %-% is sealed for a migration to classic',
            NEW.topic_id, NEW.partition;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER batches_sealed BEFORE INSERT ON batches
FOR EACH ROW EXECUTE FUNCTION sluice_refuse_sealed_batch();
