-- The batches that answer one fetch. One row per request without batches (r_object_key
-- NULL), else one row per batch; r_i is the request's 1-based position. STABLE: every
-- statement inside sees the snapshot of the calling query, so high watermarks and
-- batches agree even while commits land. The last stable offset on every row and, with
-- p_read_committed, only batches below it plus one row per aborted transaction
-- overlapping the batches returned (r_aborted_producer_id non-NULL, after the batches).
CREATE OR REPLACE FUNCTION sluice_find_batches(
    p_topic_ids uuid[],
    p_partitions integer[],
    p_offsets bigint[],
    p_max_bytes bigint[],
    p_max_total_bytes bigint,
    p_max_batches integer,
    p_read_committed boolean
) RETURNS TABLE (
    r_i integer,
    r_error integer,
    r_log_start_offset bigint,
    r_high_watermark bigint,
    r_last_stable_offset bigint,
    r_object_key text,
    r_byte_offset bigint,
    r_byte_size bigint,
    r_base_offset bigint,
    r_last_offset bigint,
    r_aborted_producer_id bigint,
    r_aborted_first_offset bigint
) LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_total bigint := 0;
    v_part bigint;
    v_empty boolean := true;  -- Kafka's minOneMessage: the answer's first batch always goes
    v_found boolean;
    v_end bigint;  -- batches end below it: the LSO (read_committed) or the high watermark
    v_last bigint;
    a record;
    q record;
    b record;
BEGIN
    FOR q IN
        SELECT u.i::integer AS i, u.topic_id, u.part, u.fetch_offset, u.max_bytes,
               l.log_start_offset, l.high_watermark, ot.first_open
        FROM unnest(p_topic_ids, p_partitions, p_offsets, p_max_bytes)
             WITH ORDINALITY AS u(topic_id, part, fetch_offset, max_bytes, i)
        LEFT JOIN logs l ON l.topic_id = u.topic_id AND l.partition = u.part
        -- The last stable offset: one probe of open_txns_first per partition.
        LEFT JOIN LATERAL (
            SELECT min(o.first_offset) AS first_open FROM open_txns o
            WHERE o.topic_id = u.topic_id AND o.partition = u.part) ot ON true
        ORDER BY u.i
    LOOP
        r_i := q.i;
        r_object_key := NULL; r_byte_offset := NULL; r_byte_size := NULL;
        r_base_offset := NULL; r_last_offset := NULL;
        r_aborted_producer_id := NULL; r_aborted_first_offset := NULL;
        IF q.high_watermark IS NULL THEN
            r_error := 3; r_log_start_offset := -1; r_high_watermark := -1;
            r_last_stable_offset := -1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        r_log_start_offset := q.log_start_offset;
        r_high_watermark := q.high_watermark;
        r_last_stable_offset := CASE WHEN q.first_open IS NULL THEN q.high_watermark
                                     ELSE greatest(q.first_open, q.log_start_offset) END;
        -- read_committed consumers see only what is below the last stable offset.
        v_end := CASE WHEN p_read_committed THEN r_last_stable_offset ELSE q.high_watermark END;
        IF q.fetch_offset < q.log_start_offset OR q.fetch_offset > q.high_watermark THEN
            r_error := 1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        r_error := 0;
        v_found := false;
        IF q.fetch_offset < v_end AND (v_empty OR v_total < p_max_total_bytes) THEN
            v_part := 0;
            -- Like Kafka's ReplicaManager, each partition may use what is left of the
            -- total budget, so a later partition can still take batches smaller than
            -- the one that did not fit.
            FOR b IN
                SELECT f.object_key, bt.byte_offset, bt.byte_size, bt.base_offset, bt.last_offset
                FROM batches bt
                JOIN files f ON f.file_id = bt.file_id
                WHERE bt.topic_id = q.topic_id AND bt.partition = q.part
                  AND bt.last_offset >= q.fetch_offset AND bt.last_offset < v_end
                ORDER BY bt.last_offset
                LIMIT p_max_batches
            LOOP
                EXIT WHEN NOT v_empty AND (v_part + b.byte_size > q.max_bytes
                                           OR v_total + b.byte_size > p_max_total_bytes);
                r_object_key := b.object_key; r_byte_offset := b.byte_offset;
                r_byte_size := b.byte_size; r_base_offset := b.base_offset;
                r_last_offset := b.last_offset;
                RETURN NEXT;
                v_part := v_part + b.byte_size;
                v_total := v_total + b.byte_size;
                v_empty := false;
                v_found := true;
                v_last := b.last_offset;
            END LOOP;
        END IF;
        IF p_read_committed AND v_found THEN
            -- Aborted transactions overlapping [fetch offset, v_last], in marker order.
            -- The scan stops after the first whose recorded LSO is past v_last: every
            -- later abort was of a transaction open then (so it began at or after that
            -- LSO) or begun later still (Kafka's transaction index search stops so too).
            r_object_key := NULL; r_byte_offset := NULL; r_byte_size := NULL;
            r_base_offset := NULL; r_last_offset := NULL;
            FOR a IN
                SELECT x.producer_id, x.first_offset, x.last_stable_offset
                FROM aborted_txns x
                WHERE x.topic_id = q.topic_id AND x.partition = q.part
                  AND x.last_offset >= q.fetch_offset
                ORDER BY x.last_offset
            LOOP
                IF a.first_offset <= v_last THEN
                    r_aborted_producer_id := a.producer_id;
                    r_aborted_first_offset := a.first_offset;
                    RETURN NEXT;
                END IF;
                EXIT WHEN a.last_stable_offset > v_last;
            END LOOP;
        END IF;
        IF NOT v_found THEN
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;
