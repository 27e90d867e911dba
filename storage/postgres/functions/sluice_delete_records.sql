-- Move log start offsets forward (offset -1: the high watermark), in request order.
CREATE OR REPLACE FUNCTION sluice_delete_records(
    p_topic_ids uuid[], p_partitions integer[], p_offsets bigint[], p_now bigint
) RETURNS TABLE (r_i integer, r_error integer, r_low_watermark bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_file_ids bigint[] := '{}';
    v_start bigint;
    v_hwm bigint;
    v_target bigint;
    v_moved record;
    q record;
BEGIN
    PERFORM sluice_lock_logs(p_topic_ids, p_partitions);
    FOR q IN
        SELECT u.i::integer AS i, u.topic_id, u.part, u.target
        FROM unnest(p_topic_ids, p_partitions, p_offsets) WITH ORDINALITY AS u(topic_id, part, target, i)
        ORDER BY u.i
    LOOP
        r_i := q.i;
        SELECT l.log_start_offset, l.high_watermark INTO v_start, v_hwm
        FROM logs l WHERE l.topic_id = q.topic_id AND l.partition = q.part;
        IF NOT FOUND THEN
            r_error := 3; r_low_watermark := -1;
        ELSE
            v_target := CASE WHEN q.target = -1 THEN v_hwm ELSE q.target END;
            IF v_target < 0 OR v_target > v_hwm THEN
                r_error := 1; r_low_watermark := -1;  -- Kafka: low watermark -1
            ELSIF v_target <= v_start THEN
                r_error := 0; r_low_watermark := v_start;
            ELSE
                SELECT * INTO v_moved FROM sluice_move_log_start(q.topic_id, q.part, v_target);
                v_file_ids := v_file_ids || v_moved.file_ids;
                r_error := 0; r_low_watermark := v_target;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
    PERFORM sluice_mark_files_if_empty(v_file_ids, p_now);
END $$;
