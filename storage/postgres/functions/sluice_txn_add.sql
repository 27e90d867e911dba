-- AddPartitionsToTxn / AddOffsetsToTxn: add to the ongoing transaction, starting one
-- from Empty or Complete*. 51 (CONCURRENT_TRANSACTIONS) while the id has pending markers
-- (after the producer check).
CREATE OR REPLACE FUNCTION sluice_txn_add(
    p_id text, p_pid bigint, p_epoch integer, p_topic_ids uuid[], p_partitions integer[],
    p_groups text[], p_now bigint
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    t transactions%ROWTYPE;
    v_error integer;
BEGIN
    SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    v_error := sluice_txn_check_producer(t, FOUND, p_pid, p_epoch);
    IF v_error <> 0 THEN
        RETURN v_error;
    END IF;
    IF sluice_txn_markers_pending(p_id) THEN
        -- The previous transaction's classic markers are not all written yet.
        RETURN 51;
    END IF;
    IF coalesce(cardinality(p_topic_ids), 0) = 0 AND coalesce(cardinality(p_groups), 0) = 0 THEN
        RETURN 0;
    END IF;
    IF t.state <> 'Ongoing' THEN
        UPDATE transactions SET state = 'Ongoing', started_ms = p_now, updated_ms = p_now
        WHERE transactional_id = p_id;
    END IF;
    INSERT INTO txn_partitions (transactional_id, topic_id, partition)
    SELECT DISTINCT p_id, k.topic_id, k.part
    FROM unnest(p_topic_ids, p_partitions) AS k(topic_id, part)
    ORDER BY 2, 3
    ON CONFLICT DO NOTHING;
    INSERT INTO txn_groups (transactional_id, group_id)
    SELECT DISTINCT p_id, g.group_id FROM unnest(p_groups) AS g(group_id)
    ORDER BY 2
    ON CONFLICT DO NOTHING;
    RETURN 0;
END $$;
