-- Classic partitions whose transaction markers are still to be sent (storage/transactions/:
-- Kafka's PrepareCommit/PrepareAbort). sluice_txn_complete records them in the transaction
-- that records the outcome; the coordinator deletes them once the leaders acknowledged, and
-- resends what is left after a failover. While an id has any, InitProducerId,
-- AddPartitionsToTxn and EndTxn answer 51 CONCURRENT_TRANSACTIONS.
--
-- The 0005 functions are kept (renamed) and wrapped, so their bodies stay in one place.
-- Locking as 0005: the init/add wrappers lock their transaction row first, as the wrapped
-- functions do; the complete wrapper reads it without a lock before the wrapped function
-- locks the logs and then the row (a row inserted here is only written under that lock).

CREATE TABLE txn_pending_markers (
    transactional_id text COLLATE "C" NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    PRIMARY KEY (transactional_id, topic_id, partition)
);

CREATE FUNCTION sluice_txn_markers_pending(p_id text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM txn_pending_markers WHERE transactional_id = p_id)
$$;

ALTER FUNCTION sluice_txn_init(text, bigint, bigint, integer, bigint)
    RENAME TO sluice_txn_init_0005;
ALTER FUNCTION sluice_txn_add(text, bigint, integer, uuid[], integer[], text[], bigint)
    RENAME TO sluice_txn_add_0005;
ALTER FUNCTION sluice_txn_complete(
    text, bigint, integer, boolean, boolean, text, bigint, integer, uuid[], integer[],
    bigint[], bigint[], bigint[], bigint
) RENAME TO sluice_txn_complete_0005;

CREATE FUNCTION sluice_txn_init(
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
BEGIN
    SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    IF FOUND AND sluice_txn_markers_pending(p_id) THEN
        -- The fencing check comes first, as in the wrapped function.
        IF p_expected_pid >= 0
            AND (p_expected_pid, p_expected_epoch) <> (t.producer_id, t.producer_epoch) THEN
            RETURN QUERY SELECT 90, -1::bigint, -1, NULL::bigint, NULL::integer, NULL::text,
                NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[],
                NULL::text[];
        ELSE
            RETURN QUERY SELECT 51, -1::bigint, -1, NULL::bigint, NULL::integer, NULL::text,
                NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[],
                NULL::text[];
        END IF;
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM sluice_txn_init_0005(
        p_id, p_timeout_ms, p_expected_pid, p_expected_epoch, p_now);
END
$$;

CREATE FUNCTION sluice_txn_add(
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
        RETURN 51;
    END IF;
    RETURN sluice_txn_add_0005(p_id, p_pid, p_epoch, p_topic_ids, p_partitions, p_groups, p_now);
END
$$;

CREATE FUNCTION sluice_txn_complete(
    p_id text,
    p_pid bigint,
    p_epoch integer,
    p_commit boolean,
    p_bump_epoch boolean,
    p_object_key text,
    p_object_size bigint,
    p_uploader_broker_id integer,
    p_topic_ids uuid[],
    p_partitions integer[],
    p_byte_offsets bigint[],
    p_byte_sizes bigint[],
    p_timestamps bigint[],
    p_now bigint,
    p_pending_topic_ids uuid[],
    p_pending_partitions integer[]
) RETURNS TABLE (r_error integer, r_registered boolean, r_offsets bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    v_pid bigint;
    v_error integer;
    v_registered boolean;
    v_offsets bigint[];
BEGIN
    SELECT producer_id INTO v_pid FROM transactions WHERE transactional_id = p_id;
    IF FOUND AND v_pid = p_pid AND sluice_txn_markers_pending(p_id) THEN
        RETURN QUERY SELECT 51, false,
            array_fill(-1::bigint, ARRAY[coalesce(cardinality(p_topic_ids), 0)]);
        RETURN;
    END IF;
    SELECT c.r_error, c.r_registered, c.r_offsets INTO v_error, v_registered, v_offsets
    FROM sluice_txn_complete_0005(
        p_id, p_pid, p_epoch, p_commit, p_bump_epoch, p_object_key, p_object_size,
        p_uploader_broker_id, p_topic_ids, p_partitions, p_byte_offsets, p_byte_sizes,
        p_timestamps, p_now) c;
    -- Completed by this call (not a retry answered NONE): the row was written by this
    -- database transaction, which holds its lock.
    IF v_error = 0 AND EXISTS (
        SELECT 1 FROM transactions
        WHERE transactional_id = p_id AND xmin = pg_current_xact_id()::xid
    ) THEN
        INSERT INTO txn_pending_markers (transactional_id, topic_id, partition)
        SELECT DISTINCT p_id, k.topic_id, k.part
        FROM unnest(p_pending_topic_ids, p_pending_partitions) AS k(topic_id, part)
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN QUERY SELECT v_error, v_registered, v_offsets;
END
$$;
