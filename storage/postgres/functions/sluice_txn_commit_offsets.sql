-- TxnOffsetCommit: pending offsets of one group (one row per partition: the caller
-- keeps the last of duplicates; ON CONFLICT cannot update a row twice).
CREATE OR REPLACE FUNCTION sluice_txn_commit_offsets(
    p_id text, p_pid bigint, p_epoch integer, p_group_id text, p_topic_ids uuid[],
    p_partitions integer[], p_offsets bigint[], p_leader_epochs integer[], p_metadata text[],
    p_timestamps bigint[]
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    t transactions%ROWTYPE;
    v_error integer;
BEGIN
    SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    v_error := sluice_txn_check_producer(t, FOUND, p_pid, p_epoch);
    IF v_error <> 0 THEN
        RETURN v_error;
    END IF;
    IF t.state <> 'Ongoing' OR NOT EXISTS (
        SELECT 1 FROM txn_groups g WHERE g.transactional_id = p_id AND g.group_id = p_group_id
    ) THEN
        RETURN 48;
    END IF;
    INSERT INTO txn_offsets AS o (transactional_id, group_id, topic_id, partition,
                                  committed_offset, leader_epoch, metadata, commit_timestamp)
    SELECT p_id, p_group_id, k.topic_id, k.part, k.off, k.leader_epoch, k.metadata, k.ts
    FROM unnest(p_topic_ids, p_partitions, p_offsets, p_leader_epochs, p_metadata, p_timestamps)
         AS k(topic_id, part, off, leader_epoch, metadata, ts)
    ORDER BY k.topic_id, k.part
    ON CONFLICT (transactional_id, group_id, topic_id, partition) DO UPDATE SET
        committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,
        metadata = excluded.metadata, commit_timestamp = excluded.commit_timestamp;
    RETURN 0;
END $$;
