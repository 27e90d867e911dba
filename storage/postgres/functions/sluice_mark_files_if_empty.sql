-- Mark the given files deleting when no batch points into them any more.
CREATE OR REPLACE FUNCTION sluice_mark_files_if_empty(p_file_ids bigint[], p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_file_ids), 0) = 0 THEN
        RETURN;
    END IF;
    -- Two transactions emptying the same file from different partitions must not
    -- both see the other's (uncommitted) batches and leave it unmarked forever: the
    -- lock makes the second wait, and its next statement sees the first's deletions.
    PERFORM 1 FROM files WHERE file_id = ANY (p_file_ids) ORDER BY file_id FOR UPDATE;
    UPDATE files f
    SET state = 'deleting', marked_at = p_now
    WHERE f.file_id = ANY (p_file_ids)
      AND f.state = 'uploaded'
      AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.file_id = f.file_id);
END $$;
