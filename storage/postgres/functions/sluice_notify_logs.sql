-- Commits (and log start moves) notify 'sluice_logs' with "topic_id:partition" entries, one
-- per line; an empty payload means "maybe any partition" when the list would not fit
-- NOTIFY's 8000-byte limit. Notifications are sent at commit, never for a rollback.
CREATE OR REPLACE FUNCTION sluice_notify_logs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_payload text;
BEGIN
    SELECT string_agg(n.topic_id::text || ':' || n.partition, E'\n') INTO v_payload
    FROM (SELECT DISTINCT topic_id, partition FROM new_logs) n;
    IF v_payload IS NULL THEN
        RETURN NULL;
    END IF;
    IF octet_length(v_payload) > 7900 THEN
        v_payload := '';
    END IF;
    PERFORM pg_notify('sluice_logs', v_payload);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS logs_notify ON logs;
CREATE TRIGGER logs_notify AFTER UPDATE ON logs
    REFERENCING NEW TABLE AS new_logs
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_logs();
