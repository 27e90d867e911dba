-- InitProducerId with a transactional id. One row: r_error, the producer id and epoch
-- (-1 on error) and, with 51 (CONCURRENT_TRANSACTIONS), the ongoing transaction that
-- must be aborted first (r_pending_*). While the id has pending markers (after the fencing
-- check): 51 without r_pending_*.
CREATE OR REPLACE FUNCTION sluice_txn_init(
    p_id text, p_timeout_ms bigint, p_expected_pid bigint, p_expected_epoch integer,
    p_now bigint
) RETURNS TABLE (
    r_error integer,
    r_producer_id bigint,
    r_producer_epoch integer,
    r_pending_producer_id bigint,
    r_pending_epoch integer,
    r_pending_state text,
    r_pending_timeout_ms bigint,
    r_pending_started_ms bigint,
    r_pending_updated_ms bigint,
    r_pending_topic_ids uuid[],
    r_pending_partitions integer[],
    r_pending_groups text[]
) LANGUAGE plpgsql AS $$
DECLARE
    t transactions%ROWTYPE;
    v_pid bigint;
    v_epoch integer;
BEGIN
    SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        -- The row first (it is this id's lock), then the producer id: every path locks
        -- the transactions row before producer_id_blocks.
        INSERT INTO transactions (transactional_id, producer_id, producer_epoch, state,
                                  timeout_ms, started_ms, updated_ms)
        VALUES (p_id, -1, 0, 'Empty', p_timeout_ms, -1, p_now)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            UPDATE producer_id_blocks SET next_id = next_id + 1 WHERE id = 1
            RETURNING next_id - 1 INTO v_pid;
            UPDATE transactions SET producer_id = v_pid WHERE transactional_id = p_id;
            RETURN QUERY SELECT 0, v_pid, 0, NULL::bigint, NULL::integer, NULL::text,
                NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[],
                NULL::text[];
            RETURN;
        END IF;
        -- Another broker created it meanwhile (the insert waited for it): as for a known id.
        SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    END IF;

    -- KIP-360: a producer re-initialising names the id and epoch it has; the epoch before
    -- our last bump is a retry of that call (the client never got the answer): answered
    -- again below, not bumped again. Anything else is fenced.
    IF p_expected_pid >= 0 AND (
        p_expected_pid <> t.producer_id
        OR (p_expected_epoch <> t.producer_epoch
            AND (t.last_producer_epoch < 0 OR p_expected_epoch <> t.last_producer_epoch))
    ) THEN
        RETURN QUERY SELECT 90, -1::bigint, -1, NULL::bigint, NULL::integer, NULL::text,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[],
            NULL::text[];
        RETURN;
    END IF;
    IF sluice_txn_markers_pending(p_id) THEN
        -- The previous transaction's classic markers are not all written yet (Kafka's
        -- PrepareCommit/PrepareAbort): the client retries. (A row just created has none.)
        RETURN QUERY SELECT 51, -1::bigint, -1, NULL::bigint, NULL::integer, NULL::text,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[],
            NULL::text[];
        RETURN;
    END IF;
    IF p_expected_pid >= 0 AND p_expected_epoch <> t.producer_epoch
       AND t.state <> 'Ongoing' THEN
        -- Not bumped again; the id starts afresh (Empty, the new timeout), as Kafka's.
        UPDATE transactions
        SET state = 'Empty', timeout_ms = p_timeout_ms, started_ms = -1, updated_ms = p_now
        WHERE transactional_id = p_id;
        RETURN QUERY SELECT 0, t.producer_id, t.producer_epoch, NULL::bigint, NULL::integer,
            NULL::text, NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[],
            NULL::integer[], NULL::text[];
        RETURN;
    END IF;
    IF t.state = 'Ongoing' THEN
        IF EXISTS (SELECT 1 FROM txn_partitions p WHERE p.transactional_id = p_id) THEN
            RETURN QUERY SELECT 51, -1::bigint, -1, t.producer_id, t.producer_epoch, t.state,
                t.timeout_ms, t.started_ms, t.updated_ms, sluice_txn_partition_topics(p_id),
                sluice_txn_partition_numbers(p_id), sluice_txn_group_ids(p_id);
            RETURN;
        END IF;
        -- Only offsets were added: nothing reached a partition, nothing needs a marker.
        DELETE FROM txn_offsets o WHERE o.transactional_id = p_id;
        DELETE FROM txn_groups g WHERE g.transactional_id = p_id;
    END IF;
    v_pid := t.producer_id;
    v_epoch := t.producer_epoch + 1;
    IF v_epoch >= 32767 THEN
        -- Epochs never wrap: a new producer id at epoch 0 (MAX_PRODUCER_EPOCH).
        UPDATE producer_id_blocks SET next_id = next_id + 1 WHERE id = 1
        RETURNING next_id - 1 INTO v_pid;
        v_epoch := 0;
    END IF;
    UPDATE transactions
    SET producer_id = v_pid, producer_epoch = v_epoch, state = 'Empty',
        timeout_ms = p_timeout_ms, started_ms = -1, updated_ms = p_now,
        -- The epoch bumped from, for a retry of this call; none across a new producer id.
        last_producer_epoch = CASE
            WHEN p_expected_pid >= 0 AND v_pid = t.producer_id THEN p_expected_epoch
            ELSE -1 END
    WHERE transactional_id = p_id;
    RETURN QUERY SELECT 0, v_pid, v_epoch, NULL::bigint, NULL::integer, NULL::text,
        NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[], NULL::text[];
END $$;
