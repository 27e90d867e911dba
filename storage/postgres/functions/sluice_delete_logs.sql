-- A deleted topic's logs go with their open and aborted transactions.
CREATE OR REPLACE FUNCTION sluice_delete_logs(p_topic_ids uuid[], p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_file_ids bigint[];
BEGIN
    PERFORM 1 FROM logs WHERE topic_id = ANY (p_topic_ids)
    ORDER BY topic_id, partition FOR UPDATE;
    WITH dropped AS (
        DELETE FROM batches WHERE topic_id = ANY (p_topic_ids) RETURNING file_id
    )
    SELECT array_agg(DISTINCT file_id) INTO v_file_ids FROM dropped;
    DELETE FROM logs WHERE topic_id = ANY (p_topic_ids);
    DELETE FROM producer_state WHERE topic_id = ANY (p_topic_ids);
    DELETE FROM open_txns WHERE topic_id = ANY (p_topic_ids);
    DELETE FROM aborted_txns WHERE topic_id = ANY (p_topic_ids);
    PERFORM sluice_mark_files_if_empty(v_file_ids, p_now);
END $$;
