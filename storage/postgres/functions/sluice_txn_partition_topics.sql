-- The state of one transactional id as the Python side builds it (TransactionState):
-- its partitions sorted by (topic, partition) and its groups sorted.
CREATE OR REPLACE FUNCTION sluice_txn_partition_topics(p_id text) RETURNS uuid[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(p.topic_id ORDER BY p.topic_id, p.partition), '{}')
    FROM txn_partitions p WHERE p.transactional_id = p_id
$$;
