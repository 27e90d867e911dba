-- EndTxn and the coordinator's aborts: register the markers' object, append each marker
-- at its (diskless) log's high watermark, close the producer's open transactions there
-- (recording the aborted ones), move or drop the pending offsets, record the classic
-- partitions (p_pending_*) as pending markers and the outcome, atomically. Arrays p_topic_ids
-- .. p_timestamps: one element per marker. One row: r_error, r_registered, r_offsets (per
-- marker, -1 when its log is gone or nothing was appended), r_completions (with r_error 0:
-- the id's completed-transaction count, the number its classic markers carry),
-- r_producer_id / r_producer_epoch (with r_error 0: the id's producer id and epoch after
-- the call). p_tv2: KIP-890 part 2, see storage.transactions.CompleteRequest.tv2.
CREATE OR REPLACE FUNCTION sluice_txn_complete(
    p_id text,
    p_pid bigint,
    p_epoch integer,
    p_commit boolean,
    p_bump_epoch boolean,
    p_object_key text,
    p_object_size bigint,
    p_uploader_broker_id integer,
    p_topic_ids uuid[],
    p_partitions integer[],
    p_byte_offsets bigint[],
    p_byte_sizes bigint[],
    p_timestamps bigint[],
    p_now bigint,
    p_pending_topic_ids uuid[],
    p_pending_partitions integer[],
    p_started_ms bigint,
    p_tv2 boolean
) RETURNS TABLE (r_error integer, r_registered boolean, r_offsets bigint[],
               r_completions integer, r_producer_id bigint, r_producer_epoch integer)
LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(p_topic_ids), 0);
    v_target text := CASE WHEN p_commit THEN 'CompleteCommit' ELSE 'CompleteAbort' END;
    v_bump integer := CASE WHEN p_bump_epoch THEN 1 ELSE 0 END;
    v_none bigint[] := array_fill(-1::bigint, ARRAY[n]);
    v_offsets bigint[];
    v_file_id bigint;
    v_hwm bigint;
    v_first bigint;
    v_min_open bigint;
    v_error integer;
    v_pid bigint;
    v_epoch integer;
    v_last_epoch integer;
    t transactions%ROWTYPE;
    i integer;
BEGIN
    -- The global order: the markers' logs, then the transaction. A commit_file of this
    -- transaction's batches holds the same logs, so it lands before the markers or,
    -- once they are in, finds the transaction ended.
    PERFORM sluice_lock_logs(p_topic_ids, p_partitions);
    SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    v_error := sluice_txn_check_producer(t, FOUND, p_pid, p_epoch);
    IF v_error = 49 THEN
        RETURN QUERY SELECT 49, false, v_none, 0, -1::bigint, -1;
        RETURN;
    END IF;
    IF sluice_txn_markers_pending(p_id) THEN
        -- The previous transaction's classic markers are not all written yet (Kafka's
        -- PrepareCommit/PrepareAbort): the client retries.
        RETURN QUERY SELECT 51, false, v_none, 0, -1::bigint, -1;
        RETURN;
    END IF;
    IF t.state = v_target AND t.producer_epoch = p_epoch + v_bump THEN
        -- A retry whose first attempt completed: the same answer, nothing changes.
        RETURN QUERY SELECT 0, false, v_none, t.completions, t.producer_id,
            t.producer_epoch;
        RETURN;
    END IF;
    IF v_error <> 0 THEN
        RETURN QUERY SELECT v_error, false, v_none, 0, -1::bigint, -1;
        RETURN;
    END IF;
    -- KIP-890 part 2: a TV2 producer's abort with nothing ongoing ends an empty one.
    IF t.state <> 'Ongoing' AND NOT (p_tv2 AND NOT p_commit) THEN
        RETURN QUERY SELECT 48, false, v_none, 0, -1::bigint, -1;
        RETURN;
    END IF;
    IF p_started_ms >= 0 AND t.started_ms <> p_started_ms THEN
        -- The timeout sweep read a transaction that has ended since; this is a new one of
        -- the same producer epoch (maybe the same partitions): not the one that timed out.
        RETURN QUERY SELECT 51, false, v_none, 0, -1::bigint, -1;
        RETURN;
    END IF;
    -- The markers (each once) and the pending classic partitions must name exactly the
    -- transaction's partitions: one added since the caller read the state would otherwise
    -- be left without a marker.
    IF (SELECT count(DISTINCT (k.topic_id, k.part))
        FROM unnest(p_topic_ids, p_partitions) AS k(topic_id, part)) <> n
       OR (SELECT count(DISTINCT (k.topic_id, k.part))
           FROM (SELECT * FROM unnest(p_topic_ids, p_partitions)
                 UNION ALL
                 SELECT * FROM unnest(p_pending_topic_ids, p_pending_partitions))
                AS k(topic_id, part))
          <> (SELECT count(*) FROM txn_partitions p WHERE p.transactional_id = p_id)
       OR EXISTS (
           SELECT 1
           FROM (SELECT * FROM unnest(p_topic_ids, p_partitions)
                 UNION ALL
                 SELECT * FROM unnest(p_pending_topic_ids, p_pending_partitions))
                AS k(topic_id, part)
           WHERE NOT EXISTS (
               SELECT 1 FROM txn_partitions p
               WHERE p.transactional_id = p_id AND p.topic_id = k.topic_id
                 AND p.partition = k.part)) THEN
        RETURN QUERY SELECT 51, false, v_none, 0, -1::bigint, -1;
        RETURN;
    END IF;
    -- A partition named classic holding the producer's open transaction in its diskless
    -- log migrated to diskless after the caller read which partitions are classic (its
    -- classic leader would refuse the marker): the caller reads again.
    IF EXISTS (
        SELECT 1 FROM unnest(p_pending_topic_ids, p_pending_partitions) AS k(topic_id, part)
        JOIN open_txns o ON o.topic_id = k.topic_id AND o.partition = k.part
        WHERE o.producer_id = p_pid
    ) THEN
        RETURN QUERY SELECT 51, false, v_none, 0, -1::bigint, -1;
        RETURN;
    END IF;

    v_offsets := v_none;
    FOR i IN 1..n LOOP
        -- A classic partition's marker is its leader's: not written here.
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM unnest(p_pending_topic_ids, p_pending_partitions) AS k(topic_id, part)
            WHERE k.topic_id = p_topic_ids[i] AND k.part = p_partitions[i]);
        SELECT l.high_watermark INTO v_hwm
        FROM logs l WHERE l.topic_id = p_topic_ids[i] AND l.partition = p_partitions[i];
        CONTINUE WHEN NOT FOUND;  -- the topic was deleted: no log to mark
        IF v_file_id IS NULL THEN
            INSERT INTO files (object_key, size, uploader_broker_id, committed_at, state, reason)
            VALUES (p_object_key, p_object_size, p_uploader_broker_id, p_now, 'uploaded',
                    'produce')
            RETURNING file_id INTO v_file_id;
        END IF;
        v_offsets[i] := v_hwm;
        DELETE FROM open_txns o
        WHERE o.topic_id = p_topic_ids[i] AND o.partition = p_partitions[i]
          AND o.producer_id = p_pid
        RETURNING o.first_offset INTO v_first;
        IF FOUND AND NOT p_commit THEN
            SELECT min(o.first_offset) INTO v_min_open
            FROM open_txns o WHERE o.topic_id = p_topic_ids[i] AND o.partition = p_partitions[i];
            INSERT INTO aborted_txns (topic_id, partition, last_offset, producer_id,
                                      first_offset, last_stable_offset)
            VALUES (p_topic_ids[i], p_partitions[i], v_hwm, p_pid, v_first,
                    coalesce(v_min_open, v_hwm + 1));
        END IF;
    END LOOP;
    IF v_file_id IS NOT NULL THEN
        -- Each marker is a one-record CreateTime batch. One in a sealed log fails the
        -- whole call (the trigger): the caller still saw that partition as diskless.
        INSERT INTO batches (topic_id, partition, base_offset, last_offset, file_id,
                             byte_offset, byte_size, timestamp_type, max_timestamp,
                             log_append_time)
        SELECT m.topic_id, m.part, m.off, m.off, v_file_id, m.byte_offset, m.byte_size, 0,
               m.ts, -1
        FROM unnest(p_topic_ids, p_partitions, v_offsets, p_byte_offsets, p_byte_sizes,
                    p_timestamps) AS m(topic_id, part, off, byte_offset, byte_size, ts)
        WHERE m.off >= 0;
        -- One statement for all the markers' logs (the caller notifies them after commit).
        UPDATE logs l
        SET high_watermark = m.off + 1, byte_size = l.byte_size + m.byte_size
        FROM unnest(p_topic_ids, p_partitions, v_offsets, p_byte_sizes)
             AS m(topic_id, part, off, byte_size)
        WHERE m.off >= 0 AND l.topic_id = m.topic_id AND l.partition = m.part;
    END IF;

    IF p_commit THEN
        -- Into the group store's table, in one order (group, topic, partition) so two
        -- commits touching the same offsets wait on each other instead of deadlocking.
        INSERT INTO group_offsets AS g (group_id, topic_id, partition, committed_offset,
                                        leader_epoch, metadata, commit_timestamp)
        SELECT o.group_id, o.topic_id, o.partition, o.committed_offset, o.leader_epoch,
               o.metadata, o.commit_timestamp
        FROM txn_offsets o WHERE o.transactional_id = p_id
        ORDER BY o.group_id, o.topic_id, o.partition
        ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET
            committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,
            metadata = excluded.metadata, commit_timestamp = excluded.commit_timestamp;
    END IF;
    DELETE FROM txn_offsets o WHERE o.transactional_id = p_id;
    DELETE FROM txn_groups g WHERE g.transactional_id = p_id;
    DELETE FROM txn_partitions p WHERE p.transactional_id = p_id;
    INSERT INTO txn_pending_markers (transactional_id, topic_id, partition)
    SELECT DISTINCT p_id, k.topic_id, k.part
    FROM unnest(p_pending_topic_ids, p_pending_partitions) AS k(topic_id, part)
    ON CONFLICT DO NOTHING;
    v_pid := p_pid;
    v_epoch := p_epoch + v_bump;
    v_last_epoch := CASE WHEN p_bump_epoch THEN p_epoch ELSE t.last_producer_epoch END;
    IF p_tv2 AND v_epoch >= 32767 THEN
        -- KIP-890 part 2: epochs never wrap; the id goes on with a new producer id.
        UPDATE producer_id_blocks SET next_id = next_id + 1 WHERE id = 1
        RETURNING next_id - 1 INTO v_pid;
        v_epoch := 0;
        v_last_epoch := -1;
    END IF;
    UPDATE transactions
    SET state = v_target, producer_id = v_pid, producer_epoch = v_epoch,
        -- started_ms stays: DescribeTransactions shows the last transaction's start (Kafka).
        updated_ms = p_now, completions = completions + 1,
        -- A coordinator abort fences the producer; the fenced epoch is the one bumped from,
        -- so that producer's KIP-360 re-initialisation gets the new epoch (as Kafka 4.x).
        last_producer_epoch = v_last_epoch
    WHERE transactional_id = p_id;
    RETURN QUERY SELECT 0, v_file_id IS NOT NULL, v_offsets, t.completions + 1, v_pid, v_epoch;
END $$;
