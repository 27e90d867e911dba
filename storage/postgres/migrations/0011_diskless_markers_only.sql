-- Transaction markers only in diskless logs. Until now sluice_txn_complete appended a
-- marker for every partition of a transaction, classic ones too, so a classic partition
-- had a diskless log holding only markers, and a diskless log sealed by a migration to
-- classic (0010) took markers past its boundary: the seal trigger let them through by
-- recognising produce commits by their statement text, and readers were kept from them.
-- Now the broker writes markers for the diskless partitions only, and names the classic
-- ones as pending (their leaders write theirs); together they must be the transaction's
-- partitions. A marker for a partition also named pending (a broker still running the
-- earlier code names every partition as a marker) is not written. A sealed log takes
-- nothing at or past its boundary, whatever the statement: a broker whose image lags the
-- seal gets SQLSTATE SL001 and retries (sluice_refuse_sealed_batch, sluice_txn_complete).

-- The markers 0010 let past the boundaries of sealed logs (classic partitions'
-- transactions): gone, each log ending at its boundary again. A merge rewriting them
-- would be refused by the trigger (sluice_refuse_sealed_batch) from now on.
DO $$
DECLARE
    v_file_ids bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM batches b USING sealed_logs s
        WHERE b.topic_id = s.topic_id AND b.partition = s.partition
          AND b.base_offset >= s.boundary
        RETURNING b.topic_id, b.partition, b.file_id, b.byte_size
    ), freed AS (
        SELECT g.topic_id, g.partition, sum(g.byte_size) AS size
        FROM gone g GROUP BY g.topic_id, g.partition
    ), shrunk AS (
        UPDATE logs l
        SET high_watermark = greatest(l.log_start_offset, s.boundary),
            byte_size = l.byte_size - coalesce(f.size, 0)
        FROM sealed_logs s LEFT JOIN freed f
          ON f.topic_id = s.topic_id AND f.partition = s.partition
        WHERE l.topic_id = s.topic_id AND l.partition = s.partition
          AND l.high_watermark > s.boundary
    )
    SELECT coalesce(array_agg(DISTINCT g.file_id), '{}') INTO v_file_ids FROM gone g;
    DELETE FROM aborted_txns a USING sealed_logs s
    WHERE a.topic_id = s.topic_id AND a.partition = s.partition
      AND a.last_offset >= s.boundary;
    -- A later statement: it sees the batches deleted above. sluice_mark_files_if_empty's
    -- statements, written out: the functions are applied after the table migrations.
    PERFORM 1 FROM files WHERE file_id = ANY (v_file_ids) ORDER BY file_id FOR UPDATE;
    UPDATE files f
    SET state = 'deleting', marked_at = (extract(epoch FROM clock_timestamp()) * 1000)::bigint
    WHERE f.file_id = ANY (v_file_ids)
      AND f.state = 'uploaded'
      AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.file_id = f.file_id);
END
$$;

-- 0008's wrapped sluice_txn_complete (renamed there).
DROP FUNCTION IF EXISTS sluice_txn_complete_0005(
    text, bigint, integer, boolean, boolean, text, bigint, integer, uuid[], integer[],
    bigint[], bigint[], bigint[], bigint
);
