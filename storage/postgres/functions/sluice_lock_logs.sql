-- Lock logs rows in the one global order. Missing rows are simply not locked.
CREATE OR REPLACE FUNCTION sluice_lock_logs(p_topic_ids uuid[], p_partitions integer[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
    FROM logs l
    JOIN unnest(p_topic_ids, p_partitions) AS k(topic_id, part)
      ON l.topic_id = k.topic_id AND l.partition = k.part
    ORDER BY l.topic_id, l.partition
    FOR UPDATE OF l;
END $$;
