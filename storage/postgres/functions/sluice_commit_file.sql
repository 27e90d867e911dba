-- Register one uploaded object and assign offsets to its batches (arrays: one element
-- per batch, in order). Returns one row per batch: r_i is its 1-based position.
--
-- The logs and producer states touched are read once into arrays (PL/pgSQL has no
-- maps: the request's distinct logs and producer states are numbered and the numbers
-- index plain arrays), updated in memory batch by batch, so duplicates within this
-- very call are recognised, and written back with one statement per table.
--
-- p_transactional (one flag per batch): a transactional batch is
-- accepted only if its producer id has an ONGOING transaction with the batch's epoch that
-- includes its partition (47 for another epoch, else 48), and when appended (not a
-- duplicate) it opens its producer's transaction in the partition. Until one is appended
-- there, the lowest sequence its batches showed is kept (txn_partitions.lowest_sequence,
-- KIP-890's VerificationStateEntry) and a batch with a higher one is refused (45): a
-- client that gives a new transaction the sequence of a record it purged from its aborted
-- one has that record answered as a duplicate of the aborted one, and must not get the
-- rest of the transaction committed without it.
CREATE OR REPLACE FUNCTION sluice_commit_file(
    p_object_key text,
    p_object_size bigint,
    p_uploader_broker_id integer,
    p_now bigint,
    p_topic_ids uuid[],
    p_partitions integer[],
    p_byte_offsets bigint[],
    p_byte_sizes bigint[],
    p_record_counts bigint[],
    p_max_timestamps bigint[],
    p_timestamp_types smallint[],
    p_producer_ids bigint[],
    p_producer_epochs integer[],
    p_base_sequences bigint[],
    p_transactional boolean[]
) RETURNS TABLE (
    r_i integer,
    r_error integer,
    r_base_offset bigint,
    r_log_append_time bigint,
    r_log_start_offset bigint
) LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(cardinality(p_topic_ids), 0);
    v_file_id bigint;
    -- per batch: index of its log in l_*, of its producer state in s_* (NULL: none)
    b_log integer[];
    b_prod integer[];
    -- per batch: the transaction verification's error (NULL: no transactional batch)
    b_txn integer[];
    -- per distinct log; l_hwm stays NULL for logs that do not exist
    l_n integer;
    l_topic uuid[];
    l_part integer[];
    l_start bigint[];
    l_hwm bigint[];
    l_size bigint[];
    l_dirty boolean[];
    l_sealed boolean[];  -- sealed by a migration to classic (sealed_logs)
    -- per distinct (log, producer); s_epoch NULL: producer unknown in this log
    s_n integer;
    s_topic uuid[];
    s_part integer[];
    s_pid bigint[];
    s_epoch integer[];
    s_last integer[];  -- newest entry (index into e_*)
    s_new integer[];   -- entries appended by this call
    -- per (log, producer) of a transactional batch its transaction accepted: the lowest
    -- sequence seen before a batch of the transaction was appended in the partition
    -- (g_opened), and whether this call lowered it
    g_lowest bigint[];
    g_opened boolean[];
    g_changed boolean[];
    -- retained batches of producers, each linked to the one before it
    e_n integer := 0;
    e_loaded integer;          -- entries 1..e_loaded came from the table
    e_base_seq bigint[] := '{}';
    e_last_seq bigint[] := '{}';
    e_base_off bigint[] := '{}';
    e_last_off bigint[] := '{}';
    e_append bigint[] := '{}';
    e_prev integer[] := '{}';
    -- accepted batches
    a_n integer := 0;
    a_idx integer[] := '{}';
    a_base bigint[] := '{}';
    a_append bigint[] := '{}';
    -- transactional batches appended: (log, producer, base offset)
    o_n integer := 0;
    o_topic uuid[] := '{}';
    o_part integer[] := '{}';
    o_pid bigint[] := '{}';
    o_base bigint[] := '{}';
    -- producer_state rows to insert, and per producer the oldest offset kept
    w_n integer := 0;
    t_n integer := 0;
    v_oldest bigint;
    w_topic uuid[] := '{}';
    w_part integer[] := '{}';
    w_pid bigint[] := '{}';
    w_base_off bigint[] := '{}';
    w_epoch integer[] := '{}';
    w_base_seq bigint[] := '{}';
    w_last_seq bigint[] := '{}';
    w_last_off bigint[] := '{}';
    w_append bigint[] := '{}';
    t_topic uuid[] := '{}';
    t_part integer[] := '{}';
    t_pid bigint[] := '{}';
    t_oldest bigint[] := '{}';
    i integer;
    li integer;
    pi integer;
    e integer;
    k integer;
    v_seq bigint;
    v_last_seq bigint;
    v_epoch integer;
    v_base bigint;
    v_append bigint;
    rec record;
BEGIN
    INSERT INTO files (object_key, size, uploader_broker_id, committed_at, state, reason)
    VALUES (p_object_key, p_object_size, p_uploader_broker_id, p_now, 'uploaded', 'produce')
    RETURNING file_id INTO v_file_id;

    SELECT array_agg(x.log_idx ORDER BY x.i), array_agg(x.prod_idx ORDER BY x.i),
           max(x.log_idx), max(x.prod_idx)
    INTO b_log, b_prod, l_n, s_n
    FROM (
        SELECT u.i,
               dense_rank() OVER (ORDER BY u.topic_id, u.part)::integer AS log_idx,
               CASE WHEN u.pid >= 0 THEN
                   dense_rank() OVER (ORDER BY u.pid < 0, u.topic_id, u.part, u.pid)::integer
               END AS prod_idx
        FROM unnest(p_topic_ids, p_partitions, p_producer_ids)
             WITH ORDINALITY AS u(topic_id, part, pid, i)
    ) x;
    l_n := coalesce(l_n, 0);
    s_n := coalesce(s_n, 0);
    -- Sized up front: assigning [k] to an empty array makes its bounds [k:k], and the
    -- unnest() below would pair elements by position, not by index.
    l_topic := array_fill(NULL::uuid, ARRAY[l_n]);
    l_part := array_fill(NULL::integer, ARRAY[l_n]);
    l_start := array_fill(NULL::bigint, ARRAY[l_n]);
    l_hwm := array_fill(NULL::bigint, ARRAY[l_n]);
    l_size := array_fill(NULL::bigint, ARRAY[l_n]);
    l_dirty := array_fill(false, ARRAY[l_n]);
    l_sealed := array_fill(false, ARRAY[l_n]);
    s_topic := array_fill(NULL::uuid, ARRAY[s_n]);
    s_part := array_fill(NULL::integer, ARRAY[s_n]);
    s_pid := array_fill(NULL::bigint, ARRAY[s_n]);
    s_epoch := array_fill(NULL::integer, ARRAY[s_n]);
    s_last := array_fill(NULL::integer, ARRAY[s_n]);
    s_new := array_fill(0, ARRAY[s_n]);

    FOR i IN 1..n LOOP
        li := b_log[i];
        l_topic[li] := p_topic_ids[i];
        l_part[li] := p_partitions[i];
        pi := b_prod[i];
        IF pi IS NOT NULL THEN
            s_topic[pi] := p_topic_ids[i];
            s_part[pi] := p_partitions[i];
            s_pid[pi] := p_producer_ids[i];
        END IF;
    END LOOP;

    -- Lock the touched logs in the global order and read them.
    FOR rec IN
        SELECT kl.idx::integer AS idx, l.log_start_offset, l.high_watermark, l.byte_size
        FROM unnest(l_topic, l_part) WITH ORDINALITY AS kl(topic_id, part, idx)
        JOIN logs l ON l.topic_id = kl.topic_id AND l.partition = kl.part
        ORDER BY l.topic_id, l.partition
        FOR UPDATE OF l
    LOOP
        l_start[rec.idx] := rec.log_start_offset;
        l_hwm[rec.idx] := rec.high_watermark;
        l_size[rec.idx] := rec.byte_size;
    END LOOP;
    -- Under the logs locks, which seal_log takes too: a seal committed before this
    -- statement is seen here, one after it waits for this commit.
    FOR rec IN
        SELECT kl.idx::integer AS idx
        FROM unnest(l_topic, l_part) WITH ORDINALITY AS kl(topic_id, part, idx)
        JOIN sealed_logs s ON s.topic_id = kl.topic_id AND s.partition = kl.part
    LOOP
        l_sealed[rec.idx] := true;
    END LOOP;

    -- KIP-890's verification of transactional batches, only when the call has one (a
    -- produce without transactions never reads these tables). After the logs locks, as
    -- the global order wants: the transactions rows FOR SHARE, so txn_complete (which
    -- locks the markers' logs, then its row FOR UPDATE) either ended the transaction
    -- before this statement (the batch is refused) or waits for this commit (the batch
    -- lands below its marker). The next statement sees what a lock wait let commit.
    IF true = ANY (p_transactional) THEN
        PERFORM 1 FROM transactions t
        WHERE t.producer_id IN (
            SELECT u.pid FROM unnest(p_producer_ids, p_transactional) AS u(pid, tx) WHERE u.tx)
        ORDER BY t.transactional_id
        FOR SHARE OF t;
        SELECT array_agg(
                   CASE WHEN NOT u.tx THEN 0
                        WHEN t.transactional_id IS NULL THEN 48       -- INVALID_TXN_STATE
                        WHEN t.producer_epoch <> u.epoch THEN 47      -- INVALID_PRODUCER_EPOCH
                        WHEN t.state <> 'Ongoing' THEN 48
                        WHEN EXISTS (SELECT 1 FROM txn_partitions tp
                                     WHERE tp.transactional_id = t.transactional_id
                                       AND tp.topic_id = u.topic_id AND tp.partition = u.part)
                             THEN 0
                        ELSE 48 END
                   ORDER BY u.i)
        INTO b_txn
        FROM unnest(p_topic_ids, p_partitions, p_producer_ids, p_producer_epochs, p_transactional)
             WITH ORDINALITY AS u(topic_id, part, pid, epoch, tx, i)
        LEFT JOIN transactions t ON u.tx AND t.producer_id = u.pid;
        g_lowest := array_fill(NULL::bigint, ARRAY[s_n]);
        g_opened := array_fill(NULL::boolean, ARRAY[s_n]);
        g_changed := array_fill(false, ARRAY[s_n]);
        FOR rec IN
            SELECT DISTINCT ON (u.pi) u.pi, tp.lowest_sequence,
                   EXISTS (SELECT 1 FROM open_txns o
                           WHERE o.topic_id = u.topic_id AND o.partition = u.part
                             AND o.producer_id = u.pid) AS opened
            FROM unnest(p_topic_ids, p_partitions, p_producer_ids, p_transactional, b_prod,
                        b_txn) AS u(topic_id, part, pid, tx, pi, err)
            JOIN transactions t ON t.producer_id = u.pid
            JOIN txn_partitions tp ON tp.transactional_id = t.transactional_id
                                  AND tp.topic_id = u.topic_id AND tp.partition = u.part
            WHERE u.tx AND u.err = 0
            ORDER BY u.pi
        LOOP
            g_lowest[rec.pi] := rec.lowest_sequence;
            g_opened[rec.pi] := rec.opened;
        END LOOP;
    END IF;

    -- Producer states, oldest batch first (they are protected by the logs locks).
    IF s_n > 0 THEN
        FOR rec IN
            SELECT kp.idx::integer AS idx, ps.producer_epoch, ps.base_sequence, ps.last_sequence,
                   ps.base_offset, ps.last_offset, ps.log_append_time
            FROM unnest(s_topic, s_part, s_pid) WITH ORDINALITY AS kp(topic_id, part, pid, idx)
            JOIN producer_state ps
              ON ps.topic_id = kp.topic_id AND ps.partition = kp.part AND ps.producer_id = kp.pid
            ORDER BY kp.idx, ps.base_offset
        LOOP
            e_n := e_n + 1;
            e_base_seq[e_n] := rec.base_sequence;
            e_last_seq[e_n] := rec.last_sequence;
            e_base_off[e_n] := rec.base_offset;
            e_last_off[e_n] := rec.last_offset;
            e_append[e_n] := rec.log_append_time;
            e_prev[e_n] := s_last[rec.idx];
            s_last[rec.idx] := e_n;
            s_epoch[rec.idx] := rec.producer_epoch;
        END LOOP;
    END IF;
    e_loaded := e_n;

    r_i := 0;
    FOR i IN 1..n LOOP
        r_i := i;
        li := b_log[i];
        IF l_hwm[li] IS NULL THEN
            r_error := 3; r_base_offset := -1; r_log_append_time := -1; r_log_start_offset := -1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF l_sealed[li] THEN
            -- Sealed by a migration to classic, which this broker has not seen yet: the
            -- batch belongs in the classic log now. NOT_LEADER_OR_FOLLOWER (6) sends its
            -- producer there (the seal carried its producer state along); the object's
            -- other batches are committed. (sluice_refuse_sealed_batch stays the last guard.)
            r_error := 6; r_base_offset := -1; r_log_append_time := -1; r_log_start_offset := -1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- Before the idempotence checks: a retry of a batch whose transaction has ended
        -- is refused like any late batch, never answered as a duplicate.
        IF b_txn IS NOT NULL AND b_txn[i] <> 0 THEN
            r_error := b_txn[i]; r_base_offset := -1; r_log_append_time := -1;
            r_log_start_offset := -1;
            RETURN NEXT;
            CONTINUE;
        END IF;

        pi := b_prod[i];
        IF pi IS NOT NULL THEN
            -- Kafka's ProducerStateManager checks, in its order: the epoch, a duplicate,
            -- a transaction's verification, the sequence.
            v_seq := p_base_sequences[i];
            v_epoch := p_producer_epochs[i];
            v_last_seq := sluice_increment_sequence(v_seq, p_record_counts[i] - 1);
            IF p_transactional[i] AND NOT g_opened[pi]
               AND (g_lowest[pi] IS NULL OR v_seq < g_lowest[pi]) THEN
                -- Noted before the duplicate check, as Kafka starts a verification first.
                g_lowest[pi] := v_seq;
                g_changed[pi] := true;
            END IF;
            -- Refusals carry the log start offset, as Kafka's do.
            IF s_epoch[pi] IS NOT NULL AND v_epoch < s_epoch[pi] THEN
                r_error := 47; r_base_offset := -1; r_log_append_time := -1;
                r_log_start_offset := l_start[li];
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF s_epoch[pi] IS NOT NULL AND v_epoch = s_epoch[pi] THEN
                -- A duplicate of one of the last 5 batches: the original answer.
                e := s_last[pi];
                k := 0;
                WHILE e IS NOT NULL AND k < 5 LOOP
                    EXIT WHEN e_base_seq[e] = v_seq AND e_last_seq[e] = v_last_seq;
                    e := e_prev[e];
                    k := k + 1;
                END LOOP;
                IF e IS NOT NULL AND k < 5 THEN
                    r_error := 0; r_base_offset := e_base_off[e];
                    r_log_append_time := e_append[e]; r_log_start_offset := l_start[li];
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            IF (p_transactional[i] AND NOT g_opened[pi] AND v_seq > g_lowest[pi])
               OR (s_epoch[pi] IS NOT NULL AND v_epoch > s_epoch[pi] AND v_seq <> 0)
               OR (s_epoch[pi] IS NOT NULL AND v_epoch = s_epoch[pi] AND s_last[pi] IS NOT NULL
                   AND v_seq <> sluice_increment_sequence(e_last_seq[s_last[pi]], 1)) THEN
                -- Higher than the verification's lowest, a bumped epoch not restarting at
                -- 0, or not the next sequence.
                r_error := 45; r_base_offset := -1; r_log_append_time := -1;
                r_log_start_offset := l_start[li];
                RETURN NEXT;
                CONTINUE;
            END IF;
            IF s_epoch[pi] IS DISTINCT FROM v_epoch THEN
                -- First batch seen from this producer, or an accepted epoch bump: the
                -- previous epoch's batches are forgotten.
                s_epoch[pi] := v_epoch;
                s_last[pi] := NULL;
                s_new[pi] := 0;
            END IF;
        END IF;

        v_base := l_hwm[li];
        v_append := CASE WHEN p_timestamp_types[i] = 1 THEN p_now ELSE -1 END;
        l_hwm[li] := v_base + p_record_counts[i];
        l_size[li] := l_size[li] + p_byte_sizes[i];
        l_dirty[li] := true;
        a_n := a_n + 1;
        a_idx[a_n] := i;
        a_base[a_n] := v_base;
        a_append[a_n] := v_append;
        IF pi IS NOT NULL THEN
            e_n := e_n + 1;
            e_base_seq[e_n] := v_seq;
            e_last_seq[e_n] := v_last_seq;
            e_base_off[e_n] := v_base;
            e_last_off[e_n] := v_base + p_record_counts[i] - 1;
            -- A retry of this batch is answered with its timestamp (Kafka's BatchMetadata:
            -- the log append time, else the batch's max timestamp).
            e_append[e_n] := CASE WHEN v_append >= 0 THEN v_append ELSE p_max_timestamps[i] END;
            e_prev[e_n] := s_last[pi];
            s_last[pi] := e_n;
            s_new[pi] := s_new[pi] + 1;
        END IF;
        IF p_transactional[i] THEN
            g_opened[pi] := true;
            o_n := o_n + 1;
            o_topic[o_n] := p_topic_ids[i];
            o_part[o_n] := p_partitions[i];
            o_pid[o_n] := p_producer_ids[i];
            o_base[o_n] := v_base;
        END IF;
        r_error := 0; r_base_offset := v_base; r_log_append_time := v_append;
        r_log_start_offset := l_start[li];
        RETURN NEXT;
    END LOOP;

    IF true = ANY (g_changed) THEN
        UPDATE txn_partitions tp SET lowest_sequence = g.lowest
        FROM unnest(s_topic, s_part, s_pid, g_lowest, g_changed)
             AS g(topic_id, part, pid, lowest, changed)
        JOIN transactions t ON t.producer_id = g.pid
        WHERE g.changed AND tp.transactional_id = t.transactional_id
          AND tp.topic_id = g.topic_id AND tp.partition = g.part;
    END IF;

    IF a_n = 0 THEN
        -- Nothing in the object is live: the cleaner may delete it after the grace period.
        UPDATE files SET state = 'deleting', marked_at = p_now WHERE file_id = v_file_id;
        RETURN;
    END IF;

    INSERT INTO batches (topic_id, partition, base_offset, last_offset, file_id, byte_offset,
                         byte_size, timestamp_type, max_timestamp, log_append_time)
    SELECT p_topic_ids[a.i], p_partitions[a.i], a.base, a.base + p_record_counts[a.i] - 1,
           v_file_id, p_byte_offsets[a.i], p_byte_sizes[a.i], p_timestamp_types[a.i],
           p_max_timestamps[a.i], a.append_time
    FROM unnest(a_idx, a_base, a_append) AS a(i, base, append_time);

    UPDATE logs l
    SET high_watermark = u.hwm, byte_size = u.size
    FROM unnest(l_topic, l_part, l_hwm, l_size, l_dirty) AS u(topic_id, part, hwm, size, dirty)
    WHERE u.dirty AND l.topic_id = u.topic_id AND l.partition = u.part;

    IF o_n > 0 THEN
        -- A producer's first transactional batch in a partition opens its transaction
        -- there; an open one keeps its first offset.
        INSERT INTO open_txns (topic_id, partition, producer_id, first_offset)
        SELECT DISTINCT ON (o.topic_id, o.part, o.pid) o.topic_id, o.part, o.pid, o.base
        FROM unnest(o_topic, o_part, o_pid, o_base) AS o(topic_id, part, pid, base)
        ORDER BY o.topic_id, o.part, o.pid, o.base
        ON CONFLICT DO NOTHING;
    END IF;

    IF s_n > 0 THEN
        -- Store only the new entries still retained, then drop every older row: those
        -- that fell out of the five, and all rows of a previous epoch (their offsets
        -- are lower than any batch of the new epoch).
        FOR pi IN 1..s_n LOOP
            CONTINUE WHEN s_new[pi] = 0;
            e := s_last[pi];
            k := 0;
            WHILE e IS NOT NULL AND k < 5 LOOP
                IF e > e_loaded THEN
                    w_n := w_n + 1;
                    w_topic[w_n] := s_topic[pi];
                    w_part[w_n] := s_part[pi];
                    w_pid[w_n] := s_pid[pi];
                    w_base_off[w_n] := e_base_off[e];
                    w_epoch[w_n] := s_epoch[pi];
                    w_base_seq[w_n] := e_base_seq[e];
                    w_last_seq[w_n] := e_last_seq[e];
                    w_last_off[w_n] := e_last_off[e];
                    w_append[w_n] := e_append[e];
                END IF;
                v_oldest := e_base_off[e];
                e := e_prev[e];
                k := k + 1;
            END LOOP;
            t_n := t_n + 1;
            t_topic[t_n] := s_topic[pi];
            t_part[t_n] := s_part[pi];
            t_pid[t_n] := s_pid[pi];
            t_oldest[t_n] := v_oldest;
        END LOOP;
        INSERT INTO producer_state (topic_id, partition, producer_id, base_offset, producer_epoch,
                                    base_sequence, last_sequence, last_offset, log_append_time)
        SELECT * FROM unnest(w_topic, w_part, w_pid, w_base_off, w_epoch, w_base_seq, w_last_seq,
                             w_last_off, w_append);
        DELETE FROM producer_state ps
        USING unnest(t_topic, t_part, t_pid, t_oldest) AS t(topic_id, part, pid, oldest)
        WHERE ps.topic_id = t.topic_id AND ps.partition = t.part AND ps.producer_id = t.pid
          AND ps.base_offset < t.oldest;
    END IF;
    RETURN;
END $$;
