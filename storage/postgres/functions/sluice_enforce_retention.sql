-- Drop whole batches older than retention.ms / beyond retention.bytes (-1: unlimited).
-- Both rules drop a prefix of whole batches, so the result is the longer prefix: walk
-- from the oldest batch while either rule says drop; the first batch both keep becomes
-- the new start (the high watermark when every batch went). r_moved says whether this call
-- moved the log's start: the broker notifies those logs after the commit (storage/postgres/
-- notify.py), and only those, since every broker passes every diskless log every round.
CREATE OR REPLACE FUNCTION sluice_enforce_retention(
    p_topic_ids uuid[], p_partitions integer[], p_retention_ms bigint[],
    p_retention_bytes bigint[], p_now bigint
) RETURNS TABLE (
    r_i integer, r_error integer, r_log_start_offset bigint, r_high_watermark bigint,
    r_byte_size bigint, r_moved boolean
) LANGUAGE plpgsql AS $$
DECLARE
    v_file_ids bigint[] := '{}';
    v_start bigint;
    v_hwm bigint;
    v_size bigint;
    v_new_start bigint;
    v_by_time boolean;
    v_by_bytes boolean;
    v_remaining bigint;
    v_dropped boolean;
    v_decided boolean;
    v_moved record;
    q record;
    b record;
BEGIN
    PERFORM sluice_lock_logs(p_topic_ids, p_partitions);
    FOR q IN
        SELECT u.i::integer AS i, u.topic_id, u.part, u.ms, u.bytes
        FROM unnest(p_topic_ids, p_partitions, p_retention_ms, p_retention_bytes)
             WITH ORDINALITY AS u(topic_id, part, ms, bytes, i)
        ORDER BY u.i
    LOOP
        r_i := q.i;
        SELECT l.log_start_offset, l.high_watermark, l.byte_size INTO v_start, v_hwm, v_size
        FROM logs l WHERE l.topic_id = q.topic_id AND l.partition = q.part;
        IF NOT FOUND THEN
            r_error := 3; r_log_start_offset := -1; r_high_watermark := -1; r_byte_size := 0;
            r_moved := false;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_new_start := NULL;
        r_moved := false;
        v_by_bytes := q.bytes >= 0 AND v_size > q.bytes;
        v_by_time := q.ms >= 0;
        IF v_by_time OR v_by_bytes THEN
            v_remaining := v_size;
            v_dropped := false;
            v_decided := false;
            FOR b IN
                SELECT bt.base_offset, bt.byte_size,
                       CASE WHEN bt.timestamp_type = 1 THEN bt.log_append_time
                            ELSE bt.max_timestamp END AS ts
                FROM batches bt
                WHERE bt.topic_id = q.topic_id AND bt.partition = q.part
                ORDER BY bt.last_offset
            LOOP
                -- retention.ms only ever drops a prefix: it stops at the first recent batch.
                v_by_time := v_by_time AND b.ts < p_now - q.ms;
                -- Kafka: drop the oldest while size - segment size >= retention.bytes.
                v_by_bytes := v_by_bytes AND v_remaining - b.byte_size >= q.bytes;
                IF NOT (v_by_time OR v_by_bytes) THEN
                    IF v_dropped THEN
                        v_new_start := b.base_offset;
                    END IF;
                    v_decided := true;
                    EXIT;
                END IF;
                v_remaining := v_remaining - b.byte_size;
                v_dropped := true;
            END LOOP;
            IF NOT v_decided AND v_dropped THEN
                v_new_start := v_hwm;
            END IF;
        END IF;
        IF v_new_start IS NOT NULL AND v_new_start > v_start THEN
            SELECT * INTO v_moved FROM sluice_move_log_start(q.topic_id, q.part, v_new_start);
            v_file_ids := v_file_ids || v_moved.file_ids;
            v_size := v_size - v_moved.freed;
            v_start := v_new_start;
            r_moved := true;
        END IF;
        r_error := 0; r_log_start_offset := v_start; r_high_watermark := v_hwm;
        r_byte_size := v_size;
        RETURN NEXT;
    END LOOP;
    PERFORM sluice_mark_files_if_empty(v_file_ids, p_now);
END $$;
