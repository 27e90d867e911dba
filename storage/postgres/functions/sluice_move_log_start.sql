-- Drop the batches of a log wholly below new_start and move its start there. It also drops the aborted transactions wholly below it: no fetch can
-- overlap them any more. (Open transactions stay: the LSO is simply never below the
-- log start.)
CREATE OR REPLACE FUNCTION sluice_move_log_start(
    p_topic_id uuid, p_partition integer, p_new_start bigint,
    OUT freed bigint, OUT file_ids bigint[]
) LANGUAGE plpgsql AS $$
BEGIN
    WITH dropped AS (
        DELETE FROM batches
        WHERE topic_id = p_topic_id AND partition = p_partition AND last_offset < p_new_start
        RETURNING file_id, byte_size
    )
    SELECT coalesce(sum(byte_size), 0), coalesce(array_agg(DISTINCT file_id), '{}')
    INTO freed, file_ids
    FROM dropped;
    UPDATE logs
    SET log_start_offset = p_new_start, byte_size = byte_size - freed
    WHERE topic_id = p_topic_id AND partition = p_partition;
    DELETE FROM aborted_txns
    WHERE topic_id = p_topic_id AND partition = p_partition AND last_offset < p_new_start;
END $$;
