-- A diskless log sealed by a migration to classic (sealed_logs) takes nothing at or past
-- its boundary, whatever the statement (produce, markers, merge): a broker whose image
-- lags the seal gets SQLSTATE SL001 and retries. A produced batch never gets this far:
-- sluice_commit_file refuses it NOT_LEADER_OR_FOLLOWER first, alone, and commits the
-- object's other batches.
CREATE OR REPLACE FUNCTION sluice_refuse_sealed_batch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM sealed_logs s
        WHERE s.topic_id = NEW.topic_id AND s.partition = NEW.partition
          AND NEW.base_offset >= s.boundary
    ) THEN
        RAISE EXCEPTION 'log %-% is sealed for a migration to classic',
            NEW.topic_id, NEW.partition
            USING ERRCODE = 'SL001';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS batches_sealed ON batches;
CREATE TRIGGER batches_sealed BEFORE INSERT ON batches
FOR EACH ROW EXECUTE FUNCTION sluice_refuse_sealed_batch();
