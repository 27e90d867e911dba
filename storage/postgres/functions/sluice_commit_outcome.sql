-- What became of a commit whose answer was lost (the connection died after sending it):
-- no rows if the object was never committed, else one row per batch, in input order, with
-- the answer it got. The logs' locks are taken first, so a commit still running on the
-- server for these logs ends (committed or rolled back) before the object is looked up.
CREATE OR REPLACE FUNCTION sluice_commit_outcome(
    p_object_key text,
    p_topic_ids uuid[],
    p_partitions integer[],
    p_byte_offsets bigint[],
    p_record_counts integer[],
    p_producer_ids bigint[],
    p_producer_epochs integer[],
    p_base_sequences integer[]
) RETURNS TABLE (
    r_i integer,
    r_error smallint,
    r_base_offset bigint,
    r_log_append_time bigint,
    r_log_start_offset bigint
)
LANGUAGE plpgsql AS $$
DECLARE
    v_file bigint;
BEGIN
    PERFORM sluice_lock_logs(p_topic_ids, p_partitions);
    SELECT f.file_id INTO v_file FROM files f WHERE f.object_key = p_object_key;
    IF v_file IS NULL THEN
        RETURN;
    END IF;
    -- A batch appended by that commit is in batches under its file; one answered there as
    -- a duplicate has its original in producer_state; any other was refused then (its
    -- error is not kept): REQUEST_TIMED_OUT (7), which its producer retries.
    RETURN QUERY
    SELECT u.i::integer,
           CASE WHEN b.base_offset IS NOT NULL OR ps.base_offset IS NOT NULL THEN 0
                ELSE 7 END::smallint,
           COALESCE(b.base_offset, ps.base_offset, -1),
           CASE WHEN b.base_offset IS NOT NULL THEN b.log_append_time
                ELSE COALESCE(ps.log_append_time, -1) END,
           COALESCE(l.log_start_offset, -1)
    FROM unnest(p_topic_ids, p_partitions, p_byte_offsets, p_record_counts, p_producer_ids,
                p_producer_epochs, p_base_sequences)
         WITH ORDINALITY AS u(topic_id, part, byte_offset, cnt, pid, epoch, seq, i)
    LEFT JOIN batches b
      ON b.file_id = v_file AND b.topic_id = u.topic_id AND b.partition = u.part
         AND b.byte_offset = u.byte_offset
    LEFT JOIN producer_state ps
      ON b.base_offset IS NULL AND u.pid >= 0 AND ps.topic_id = u.topic_id
         AND ps.partition = u.part AND ps.producer_id = u.pid AND ps.producer_epoch = u.epoch
         AND ps.base_sequence = u.seq
         AND ps.last_sequence = sluice_increment_sequence(u.seq, u.cnt - 1)
    LEFT JOIN logs l ON l.topic_id = u.topic_id AND l.partition = u.part
    ORDER BY u.i;
END $$;
