-- See sluice_txn_partition_topics.
CREATE OR REPLACE FUNCTION sluice_txn_group_ids(p_id text) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(g.group_id ORDER BY g.group_id), '{}')
    FROM txn_groups g WHERE g.transactional_id = p_id
$$;
