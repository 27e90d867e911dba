-- Locking follows 0001: the logs rows of every replacement first, all at once, ORDER BY
-- topic_id, partition (sluice_lock_logs); then the files left empty, ORDER BY file_id
-- (sluice_mark_files_if_empty). Produce commits, retention, DeleteRecords and other jobs
-- take the same locks in the same order, so a swap and any of them serialise per log and
-- never deadlock; the check below then runs against what they committed (READ COMMITTED:
-- each statement after the lock wait sees it).
--
-- Register a rewritten object and apply replacements (one per log range), each only if
-- the batches now in its range are exactly the expected ones. Arrays: p_topic_ids,
-- p_partitions and p_valid have one element per replacement; p_old_* one per expected
-- old batch and p_new_* one per new batch, each tagged with its replacement's 1-based
-- index (p_old_rep / p_new_rep). Returns one row per replacement: r_i, r_error
-- (0 NONE, 3 UNKNOWN_TOPIC_OR_PARTITION, 42 INVALID_REQUEST, 51 conflict).
CREATE OR REPLACE FUNCTION sluice_replace_batches(
    p_object_key text,
    p_object_size bigint,
    p_now bigint,
    p_topic_ids uuid[],
    p_partitions integer[],
    p_valid boolean[],
    p_old_rep integer[],
    p_old_base bigint[],
    p_old_last bigint[],
    p_old_keys text[],
    p_new_rep integer[],
    p_new_byte_offsets bigint[],
    p_new_byte_sizes bigint[],
    p_new_base bigint[],
    p_new_last bigint[],
    p_new_timestamp_types smallint[],
    p_new_max_timestamps bigint[],
    p_new_log_append_times bigint[]
) RETURNS TABLE (r_i integer, r_error integer)
LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(p_topic_ids), 0);
    v_file_id bigint;
    v_emptied bigint[] := '{}';
    v_holds_batches boolean := false;
    v_lo bigint;
    v_hi bigint;
    v_old_ids bigint[];
    v_old_size bigint;
    v_new_size bigint;
    k integer;
BEGIN
    INSERT INTO files (object_key, size, uploader_broker_id, committed_at, state, reason)
    VALUES (p_object_key, p_object_size, -1, p_now, 'uploaded', 'merge')
    ON CONFLICT (object_key) DO NOTHING
    RETURNING file_id INTO v_file_id;
    IF v_file_id IS NULL THEN
        -- A retry of a call that may have committed: never register the key twice.
        RETURN QUERY SELECT g::integer, 51 FROM generate_series(1, n) AS g;
        RETURN;
    END IF;

    PERFORM sluice_lock_logs(p_topic_ids, p_partitions);

    FOR k IN 1..n LOOP
        r_i := k;
        IF NOT p_valid[k] THEN
            r_error := 42;
            RETURN NEXT;
            CONTINUE;
        END IF;
        PERFORM 1 FROM logs l WHERE l.topic_id = p_topic_ids[k] AND l.partition = p_partitions[k];
        IF NOT FOUND THEN
            r_error := 3;
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT min(o.o_base), max(o.o_last) INTO v_lo, v_hi
        FROM unnest(p_old_rep, p_old_base, p_old_last) AS o(o_rep, o_base, o_last)
        WHERE o.o_rep = k;
        -- The batches whose last offset lies in the range must be exactly the expected
        -- ones, and the batch after the range must not reach back into it.
        IF EXISTS (
            SELECT 1
            FROM (SELECT b.base_offset, b.last_offset, f.object_key
                  FROM batches b JOIN files f ON f.file_id = b.file_id
                  WHERE b.topic_id = p_topic_ids[k] AND b.partition = p_partitions[k]
                    AND b.last_offset BETWEEN v_lo AND v_hi) AS cur
            FULL JOIN (SELECT o.o_base, o.o_last, o.o_key
                       FROM unnest(p_old_rep, p_old_base, p_old_last, p_old_keys)
                            AS o(o_rep, o_base, o_last, o_key)
                       WHERE o.o_rep = k) AS exp
              ON cur.base_offset = exp.o_base AND cur.last_offset = exp.o_last
                 AND cur.object_key = exp.o_key
            WHERE cur.last_offset IS NULL OR exp.o_last IS NULL
        ) OR EXISTS (
            SELECT 1
            FROM (SELECT b.base_offset FROM batches b
                  WHERE b.topic_id = p_topic_ids[k] AND b.partition = p_partitions[k]
                    AND b.last_offset > v_hi
                  ORDER BY b.last_offset LIMIT 1) AS nxt
            WHERE nxt.base_offset <= v_hi
        ) THEN
            r_error := 51;
            RETURN NEXT;
            CONTINUE;
        END IF;

        WITH dropped AS (
            DELETE FROM batches b
            WHERE b.topic_id = p_topic_ids[k] AND b.partition = p_partitions[k]
              AND b.last_offset BETWEEN v_lo AND v_hi
            RETURNING b.file_id, b.byte_size
        )
        SELECT coalesce(array_agg(DISTINCT d.file_id), '{}'), coalesce(sum(d.byte_size), 0)
        INTO v_old_ids, v_old_size
        FROM dropped d;
        v_emptied := v_emptied || v_old_ids;

        INSERT INTO batches (topic_id, partition, base_offset, last_offset, file_id, byte_offset,
                             byte_size, timestamp_type, max_timestamp, log_append_time)
        SELECT p_topic_ids[k], p_partitions[k], x.x_base, x.x_last, v_file_id, x.x_off, x.x_size,
               x.x_tt, x.x_mt, x.x_at
        FROM unnest(p_new_rep, p_new_byte_offsets, p_new_byte_sizes, p_new_base, p_new_last,
                    p_new_timestamp_types, p_new_max_timestamps, p_new_log_append_times)
             AS x(x_rep, x_off, x_size, x_base, x_last, x_tt, x_mt, x_at)
        WHERE x.x_rep = k;

        SELECT coalesce(sum(x.x_size), 0) INTO v_new_size
        FROM unnest(p_new_rep, p_new_byte_sizes) AS x(x_rep, x_size)
        WHERE x.x_rep = k;
        IF v_new_size <> v_old_size THEN
            -- Only a changed size touches the row (a new row version otherwise for nothing).
            -- No broker is notified: no offset moved, no long poll has anything new to read.
            UPDATE logs l SET byte_size = l.byte_size + v_new_size - v_old_size
            WHERE l.topic_id = p_topic_ids[k] AND l.partition = p_partitions[k];
        END IF;
        v_holds_batches := v_holds_batches OR EXISTS (
            SELECT 1 FROM unnest(p_new_rep) AS x(x_rep) WHERE x.x_rep = k);
        r_error := 0;
        RETURN NEXT;
    END LOOP;

    PERFORM sluice_mark_files_if_empty(v_emptied, p_now);
    IF NOT v_holds_batches THEN
        -- Nothing points into the object: the cleaner may delete it after the grace period.
        UPDATE files SET state = 'deleting', marked_at = p_now WHERE file_id = v_file_id;
    END IF;
END $$;
