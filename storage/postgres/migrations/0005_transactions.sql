-- Transactions (storage/transactions/): the transaction coordinator's state and, per
-- partition, the open transactions (the last stable offset) and the aborted ones (what
-- read_committed fetches list). Same tables and semantics as the SQLite backend
-- (storage/transactions/sqlite.py), held to by tests/unit/test_transactions_contract.py.
--
-- Locking extends 0001's discipline: `logs` rows first (sorted, sluice_lock_logs), then
-- `transactions` rows. commit_file takes the rows of its transactional producers FOR
-- SHARE after its logs locks; txn_complete locks its markers' logs, then its transaction
-- FOR UPDATE; txn_init/txn_add/txn_commit_offsets lock only their transaction row (and
-- txn_init then producer_id_blocks). `open_txns` and `aborted_txns` rows of a partition
-- are only written under its `logs` row lock; `txn_partitions`, `txn_groups` and
-- `txn_offsets` rows only under their `transactions` row lock. So brokers never deadlock.
--
-- Error codes (Kafka's): 47 INVALID_PRODUCER_EPOCH, 48 INVALID_TXN_STATE,
-- 49 INVALID_PRODUCER_ID_MAPPING, 51 CONCURRENT_TRANSACTIONS, 90 PRODUCER_FENCED.

-- ------------------------------------------------------------------------ tables

-- COLLATE "C": ids sort by bytes, as in SQLite, whatever the database's locale.
CREATE TABLE transactions (
    transactional_id text COLLATE "C" PRIMARY KEY,
    producer_id bigint NOT NULL,
    producer_epoch integer NOT NULL,
    state text NOT NULL CHECK (state IN ('Empty', 'Ongoing', 'CompleteCommit', 'CompleteAbort')),
    timeout_ms bigint NOT NULL,
    started_ms bigint NOT NULL,
    updated_ms bigint NOT NULL
);
-- commit_file verifies a transactional batch by its producer id. An id belongs to one
-- transactional id only (ids come from one counter); not UNIQUE because txn_init inserts
-- a new id's row (its lock) before it draws the producer id.
CREATE INDEX transactions_producer ON transactions (producer_id);
-- txn_expired reads only the ongoing ones, oldest first.
CREATE INDEX transactions_ongoing ON transactions (started_ms) WHERE state = 'Ongoing';

CREATE TABLE txn_partitions (
    transactional_id text COLLATE "C" NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    PRIMARY KEY (transactional_id, topic_id, partition)
);

CREATE TABLE txn_groups (
    transactional_id text COLLATE "C" NOT NULL,
    group_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (transactional_id, group_id)
);

-- TxnOffsetCommit's offsets until the transaction ends (then group_offsets, or gone).
CREATE TABLE txn_offsets (
    transactional_id text COLLATE "C" NOT NULL,
    group_id text COLLATE "C" NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    committed_offset bigint NOT NULL,
    leader_epoch integer NOT NULL,
    metadata text NOT NULL,
    commit_timestamp bigint NOT NULL,
    PRIMARY KEY (transactional_id, group_id, topic_id, partition)
);

-- Per partition, the producers with an open transaction and where it began.
CREATE TABLE open_txns (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    producer_id bigint NOT NULL,
    first_offset bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id)
);
-- The last stable offset is min(first_offset) of a partition: one index probe.
CREATE INDEX open_txns_first ON open_txns (topic_id, partition, first_offset);

-- Keyed by the abort marker's offset (unique in its partition): fetches ask
-- "last_offset >= x". last_stable_offset is the partition's LSO just after the marker
-- (Kafka's AbortedTxn keeps it too): it bounds that scan (sluice_find_batches).
CREATE TABLE aborted_txns (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    last_offset bigint NOT NULL,
    producer_id bigint NOT NULL,
    first_offset bigint NOT NULL,
    last_stable_offset bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
);

-- ------------------------------------------------------------------------ 0001's, extended

-- Moving the log start also drops the aborted transactions wholly below it: no fetch can
-- overlap them any more. (Open transactions stay: the LSO is simply never below the
-- log start.)
CREATE OR REPLACE FUNCTION sluice_move_log_start(
    p_topic_id uuid, p_partition integer, p_new_start bigint,
    OUT freed bigint, OUT file_ids bigint[]
) LANGUAGE plpgsql AS $$
BEGIN
    WITH dropped AS (
        DELETE FROM batches
        WHERE topic_id = p_topic_id AND partition = p_partition AND last_offset < p_new_start
        RETURNING file_id, byte_size
    )
    SELECT coalesce(sum(byte_size), 0), coalesce(array_agg(DISTINCT file_id), '{}')
    INTO freed, file_ids
    FROM dropped;
    UPDATE logs
    SET log_start_offset = p_new_start, byte_size = byte_size - freed
    WHERE topic_id = p_topic_id AND partition = p_partition;
    DELETE FROM aborted_txns
    WHERE topic_id = p_topic_id AND partition = p_partition AND last_offset < p_new_start;
END $$;

-- A deleted topic's logs go with their open and aborted transactions.
CREATE OR REPLACE FUNCTION sluice_delete_logs(p_topic_ids uuid[], p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_file_ids bigint[];
BEGIN
    PERFORM 1 FROM logs WHERE topic_id = ANY (p_topic_ids)
    ORDER BY topic_id, partition FOR UPDATE;
    WITH dropped AS (
        DELETE FROM batches WHERE topic_id = ANY (p_topic_ids) RETURNING file_id
    )
    SELECT array_agg(DISTINCT file_id) INTO v_file_ids FROM dropped;
    DELETE FROM logs WHERE topic_id = ANY (p_topic_ids);
    DELETE FROM producer_state WHERE topic_id = ANY (p_topic_ids);
    DELETE FROM open_txns WHERE topic_id = ANY (p_topic_ids);
    DELETE FROM aborted_txns WHERE topic_id = ANY (p_topic_ids);
    PERFORM sluice_mark_files_if_empty(v_file_ids, p_now);
END $$;

-- commit_file and find_batches gain an argument: the old signatures go (an overload left
-- behind would let a batch skip the verification).
DROP FUNCTION sluice_commit_file(
    text, bigint, integer, bigint, uuid[], integer[], bigint[], bigint[], bigint[], bigint[],
    smallint[], bigint[], integer[], bigint[]);
DROP FUNCTION sluice_find_batches(uuid[], integer[], bigint[], bigint[], bigint, integer);

-- 0001's commit_file with p_transactional (one flag per batch): a transactional batch is
-- accepted only if its producer id has an ONGOING transaction with the batch's epoch that
-- includes its partition (47 for another epoch, else 48), and when appended (not a
-- duplicate) it opens its producer's transaction in the partition.
CREATE FUNCTION sluice_commit_file(
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
    -- per distinct (log, producer); s_epoch NULL: producer unknown in this log
    s_n integer;
    s_topic uuid[];
    s_part integer[];
    s_pid bigint[];
    s_epoch integer[];
    s_last integer[];  -- newest entry (index into e_*)
    s_new integer[];   -- entries appended by this call
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
            -- Kafka's ProducerStateManager checks.
            v_seq := p_base_sequences[i];
            v_epoch := p_producer_epochs[i];
            v_last_seq := sluice_increment_sequence(v_seq, p_record_counts[i] - 1);
            IF s_epoch[pi] IS NOT NULL THEN
                IF v_epoch < s_epoch[pi] THEN
                    r_error := 47; r_base_offset := -1; r_log_append_time := -1;
                    r_log_start_offset := -1;
                    RETURN NEXT;
                    CONTINUE;
                ELSIF v_epoch > s_epoch[pi] THEN
                    -- A bumped epoch restarts sequences at 0.
                    IF v_seq <> 0 THEN
                        r_error := 45; r_base_offset := -1; r_log_append_time := -1;
                        r_log_start_offset := -1;
                        RETURN NEXT;
                        CONTINUE;
                    END IF;
                ELSE
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
                    IF s_last[pi] IS NOT NULL
                       AND v_seq <> sluice_increment_sequence(e_last_seq[s_last[pi]], 1) THEN
                        r_error := 45; r_base_offset := -1; r_log_append_time := -1;
                        r_log_start_offset := -1;
                        RETURN NEXT;
                        CONTINUE;
                    END IF;
                END IF;
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
            e_append[e_n] := v_append;
            e_prev[e_n] := s_last[pi];
            s_last[pi] := e_n;
            s_new[pi] := s_new[pi] + 1;
        END IF;
        IF p_transactional[i] THEN
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

-- 0001's find_batches with the last stable offset on every row and, with
-- p_read_committed, only batches below it plus one row per aborted transaction
-- overlapping the batches returned (r_aborted_producer_id non-NULL, after the batches).
CREATE FUNCTION sluice_find_batches(
    p_topic_ids uuid[],
    p_partitions integer[],
    p_offsets bigint[],
    p_max_bytes bigint[],
    p_max_total_bytes bigint,
    p_max_batches integer,
    p_read_committed boolean
) RETURNS TABLE (
    r_i integer,
    r_error integer,
    r_log_start_offset bigint,
    r_high_watermark bigint,
    r_last_stable_offset bigint,
    r_object_key text,
    r_byte_offset bigint,
    r_byte_size bigint,
    r_base_offset bigint,
    r_last_offset bigint,
    r_aborted_producer_id bigint,
    r_aborted_first_offset bigint
) LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_total bigint := 0;
    v_part bigint;
    v_empty boolean := true;  -- Kafka's minOneMessage: the answer's first batch always goes
    v_found boolean;
    v_end bigint;  -- batches end below it: the LSO (read_committed) or the high watermark
    v_last bigint;
    a record;
    q record;
    b record;
BEGIN
    FOR q IN
        SELECT u.i::integer AS i, u.topic_id, u.part, u.fetch_offset, u.max_bytes,
               l.log_start_offset, l.high_watermark, ot.first_open
        FROM unnest(p_topic_ids, p_partitions, p_offsets, p_max_bytes)
             WITH ORDINALITY AS u(topic_id, part, fetch_offset, max_bytes, i)
        LEFT JOIN logs l ON l.topic_id = u.topic_id AND l.partition = u.part
        -- The last stable offset: one probe of open_txns_first per partition.
        LEFT JOIN LATERAL (
            SELECT min(o.first_offset) AS first_open FROM open_txns o
            WHERE o.topic_id = u.topic_id AND o.partition = u.part) ot ON true
        ORDER BY u.i
    LOOP
        r_i := q.i;
        r_object_key := NULL; r_byte_offset := NULL; r_byte_size := NULL;
        r_base_offset := NULL; r_last_offset := NULL;
        r_aborted_producer_id := NULL; r_aborted_first_offset := NULL;
        IF q.high_watermark IS NULL THEN
            r_error := 3; r_log_start_offset := -1; r_high_watermark := -1;
            r_last_stable_offset := -1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        r_log_start_offset := q.log_start_offset;
        r_high_watermark := q.high_watermark;
        r_last_stable_offset := CASE WHEN q.first_open IS NULL THEN q.high_watermark
                                     ELSE greatest(q.first_open, q.log_start_offset) END;
        -- read_committed consumers see only what is below the last stable offset.
        v_end := CASE WHEN p_read_committed THEN r_last_stable_offset ELSE q.high_watermark END;
        IF q.fetch_offset < q.log_start_offset OR q.fetch_offset > q.high_watermark THEN
            r_error := 1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        r_error := 0;
        v_found := false;
        IF q.fetch_offset < v_end AND (v_empty OR v_total < p_max_total_bytes) THEN
            v_part := 0;
            -- Like Kafka's ReplicaManager, each partition may use what is left of the
            -- total budget, so a later partition can still take batches smaller than
            -- the one that did not fit.
            FOR b IN
                SELECT f.object_key, bt.byte_offset, bt.byte_size, bt.base_offset, bt.last_offset
                FROM batches bt
                JOIN files f ON f.file_id = bt.file_id
                WHERE bt.topic_id = q.topic_id AND bt.partition = q.part
                  AND bt.last_offset >= q.fetch_offset AND bt.last_offset < v_end
                ORDER BY bt.last_offset
                LIMIT p_max_batches
            LOOP
                EXIT WHEN NOT v_empty AND (v_part + b.byte_size > q.max_bytes
                                           OR v_total + b.byte_size > p_max_total_bytes);
                r_object_key := b.object_key; r_byte_offset := b.byte_offset;
                r_byte_size := b.byte_size; r_base_offset := b.base_offset;
                r_last_offset := b.last_offset;
                RETURN NEXT;
                v_part := v_part + b.byte_size;
                v_total := v_total + b.byte_size;
                v_empty := false;
                v_found := true;
                v_last := b.last_offset;
            END LOOP;
        END IF;
        IF p_read_committed AND v_found THEN
            -- Aborted transactions overlapping [fetch offset, v_last], in marker order.
            -- The scan stops after the first whose recorded LSO is past v_last: every
            -- later abort was of a transaction open then (so it began at or after that
            -- LSO) or begun later still (Kafka's transaction index search stops so too).
            r_object_key := NULL; r_byte_offset := NULL; r_byte_size := NULL;
            r_base_offset := NULL; r_last_offset := NULL;
            FOR a IN
                SELECT x.producer_id, x.first_offset, x.last_stable_offset
                FROM aborted_txns x
                WHERE x.topic_id = q.topic_id AND x.partition = q.part
                  AND x.last_offset >= q.fetch_offset
                ORDER BY x.last_offset
            LOOP
                IF a.first_offset <= v_last THEN
                    r_aborted_producer_id := a.producer_id;
                    r_aborted_first_offset := a.first_offset;
                    RETURN NEXT;
                END IF;
                EXIT WHEN a.last_stable_offset > v_last;
            END LOOP;
        END IF;
        IF NOT v_found THEN
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;

-- ------------------------------------------------------------------------ transactions

-- The state of one transactional id as the Python side builds it (TransactionState):
-- its partitions sorted by (topic, partition) and its groups sorted.
CREATE FUNCTION sluice_txn_partition_topics(p_id text) RETURNS uuid[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(p.topic_id ORDER BY p.topic_id, p.partition), '{}')
    FROM txn_partitions p WHERE p.transactional_id = p_id
$$;
CREATE FUNCTION sluice_txn_partition_numbers(p_id text) RETURNS integer[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(p.partition ORDER BY p.topic_id, p.partition), '{}')
    FROM txn_partitions p WHERE p.transactional_id = p_id
$$;
CREATE FUNCTION sluice_txn_group_ids(p_id text) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(g.group_id ORDER BY g.group_id), '{}')
    FROM txn_groups g WHERE g.transactional_id = p_id
$$;

-- InitProducerId with a transactional id. One row: r_error, the producer id and epoch
-- (-1 on error) and, with 51 (CONCURRENT_TRANSACTIONS), the ongoing transaction that
-- must be aborted first (r_pending_*).
CREATE FUNCTION sluice_txn_init(
    p_id text, p_timeout_ms bigint, p_expected_pid bigint, p_expected_epoch integer,
    p_now bigint
) RETURNS TABLE (
    r_error integer,
    r_producer_id bigint,
    r_producer_epoch integer,
    r_pending_producer_id bigint,
    r_pending_epoch integer,
    r_pending_state text,
    r_pending_timeout_ms bigint,
    r_pending_started_ms bigint,
    r_pending_updated_ms bigint,
    r_pending_topic_ids uuid[],
    r_pending_partitions integer[],
    r_pending_groups text[]
) LANGUAGE plpgsql AS $$
DECLARE
    t transactions%ROWTYPE;
    v_pid bigint;
    v_epoch integer;
BEGIN
    SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        -- The row first (it is this id's lock), then the producer id: every path locks
        -- the transactions row before producer_id_blocks.
        INSERT INTO transactions (transactional_id, producer_id, producer_epoch, state,
                                  timeout_ms, started_ms, updated_ms)
        VALUES (p_id, -1, 0, 'Empty', p_timeout_ms, -1, p_now)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            UPDATE producer_id_blocks SET next_id = next_id + 1 WHERE id = 1
            RETURNING next_id - 1 INTO v_pid;
            UPDATE transactions SET producer_id = v_pid WHERE transactional_id = p_id;
            RETURN QUERY SELECT 0, v_pid, 0, NULL::bigint, NULL::integer, NULL::text,
                NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[],
                NULL::text[];
            RETURN;
        END IF;
        -- Another broker created it meanwhile (the insert waited for it): as for a known id.
        SELECT * INTO t FROM transactions WHERE transactional_id = p_id FOR UPDATE;
    END IF;

    IF p_expected_pid >= 0
       AND (p_expected_pid <> t.producer_id OR p_expected_epoch <> t.producer_epoch) THEN
        RETURN QUERY SELECT 90, -1::bigint, -1, NULL::bigint, NULL::integer, NULL::text,
            NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[],
            NULL::text[];
        RETURN;
    END IF;
    IF t.state = 'Ongoing' THEN
        IF EXISTS (SELECT 1 FROM txn_partitions p WHERE p.transactional_id = p_id) THEN
            RETURN QUERY SELECT 51, -1::bigint, -1, t.producer_id, t.producer_epoch, t.state,
                t.timeout_ms, t.started_ms, t.updated_ms, sluice_txn_partition_topics(p_id),
                sluice_txn_partition_numbers(p_id), sluice_txn_group_ids(p_id);
            RETURN;
        END IF;
        -- Only offsets were added: nothing reached a partition, nothing needs a marker.
        DELETE FROM txn_offsets o WHERE o.transactional_id = p_id;
        DELETE FROM txn_groups g WHERE g.transactional_id = p_id;
    END IF;
    v_pid := t.producer_id;
    v_epoch := t.producer_epoch + 1;
    IF v_epoch >= 32767 THEN
        -- Epochs never wrap: a new producer id at epoch 0 (MAX_PRODUCER_EPOCH).
        UPDATE producer_id_blocks SET next_id = next_id + 1 WHERE id = 1
        RETURNING next_id - 1 INTO v_pid;
        v_epoch := 0;
    END IF;
    UPDATE transactions
    SET producer_id = v_pid, producer_epoch = v_epoch, state = 'Empty',
        timeout_ms = p_timeout_ms, started_ms = -1, updated_ms = p_now
    WHERE transactional_id = p_id;
    RETURN QUERY SELECT 0, v_pid, v_epoch, NULL::bigint, NULL::integer, NULL::text,
        NULL::bigint, NULL::bigint, NULL::bigint, NULL::uuid[], NULL::integer[], NULL::text[];
END $$;

-- The checks txn_add, txn_commit_offsets and txn_complete share: 49 for an unknown id or
-- another producer id, 90 for another epoch.
CREATE FUNCTION sluice_txn_check_producer(
    t transactions, p_found boolean, p_pid bigint, p_epoch integer
) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN NOT p_found OR t.producer_id <> p_pid THEN 49
                WHEN t.producer_epoch <> p_epoch THEN 90
                ELSE 0 END
$$;

-- AddPartitionsToTxn / AddOffsetsToTxn: add to the ongoing transaction, starting one
-- from Empty or Complete*.
CREATE FUNCTION sluice_txn_add(
    p_id text, p_pid bigint, p_epoch integer, p_topic_ids uuid[], p_partitions integer[],
    p_groups text[], p_now bigint
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
    IF coalesce(cardinality(p_topic_ids), 0) = 0 AND coalesce(cardinality(p_groups), 0) = 0 THEN
        RETURN 0;
    END IF;
    IF t.state <> 'Ongoing' THEN
        UPDATE transactions SET state = 'Ongoing', started_ms = p_now, updated_ms = p_now
        WHERE transactional_id = p_id;
    END IF;
    INSERT INTO txn_partitions (transactional_id, topic_id, partition)
    SELECT DISTINCT p_id, k.topic_id, k.part
    FROM unnest(p_topic_ids, p_partitions) AS k(topic_id, part)
    ORDER BY 2, 3
    ON CONFLICT DO NOTHING;
    INSERT INTO txn_groups (transactional_id, group_id)
    SELECT DISTINCT p_id, g.group_id FROM unnest(p_groups) AS g(group_id)
    ORDER BY 2
    ON CONFLICT DO NOTHING;
    RETURN 0;
END $$;

-- TxnOffsetCommit: pending offsets of one group (one row per partition: the caller
-- keeps the last of duplicates; ON CONFLICT cannot update a row twice).
CREATE FUNCTION sluice_txn_commit_offsets(
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

-- EndTxn and the coordinator's aborts: register the markers' object, append each marker
-- at its log's high watermark, close the producer's open transactions (recording the
-- aborted ones), move or drop the pending offsets, and record the outcome, atomically.
-- Arrays: one element per marker. One row: r_error, r_registered, r_offsets (per
-- marker, -1 when its log is gone or nothing was appended).
CREATE FUNCTION sluice_txn_complete(
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
    p_now bigint
) RETURNS TABLE (r_error integer, r_registered boolean, r_offsets bigint[])
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
        RETURN QUERY SELECT 49, false, v_none;
        RETURN;
    END IF;
    IF t.state = v_target AND t.producer_epoch = p_epoch + v_bump THEN
        -- A retry whose first attempt completed: the same answer, nothing changes.
        RETURN QUERY SELECT 0, false, v_none;
        RETURN;
    END IF;
    IF v_error <> 0 THEN
        RETURN QUERY SELECT v_error, false, v_none;
        RETURN;
    END IF;
    IF t.state <> 'Ongoing' THEN
        RETURN QUERY SELECT 48, false, v_none;
        RETURN;
    END IF;
    -- The markers must name exactly the transaction's partitions: one added since the
    -- caller read the state would otherwise be left without a marker.
    IF (SELECT count(DISTINCT (k.topic_id, k.part))
        FROM unnest(p_topic_ids, p_partitions) AS k(topic_id, part)) <> n
       OR (SELECT count(*) FROM txn_partitions p WHERE p.transactional_id = p_id) <> n
       OR EXISTS (
           SELECT 1 FROM unnest(p_topic_ids, p_partitions) AS k(topic_id, part)
           WHERE NOT EXISTS (
               SELECT 1 FROM txn_partitions p
               WHERE p.transactional_id = p_id AND p.topic_id = k.topic_id
                 AND p.partition = k.part)) THEN
        RETURN QUERY SELECT 51, false, v_none;
        RETURN;
    END IF;

    v_offsets := v_none;
    FOR i IN 1..n LOOP
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
        -- Each marker is a one-record CreateTime batch.
        INSERT INTO batches (topic_id, partition, base_offset, last_offset, file_id,
                             byte_offset, byte_size, timestamp_type, max_timestamp,
                             log_append_time)
        SELECT m.topic_id, m.part, m.off, m.off, v_file_id, m.byte_offset, m.byte_size, 0,
               m.ts, -1
        FROM unnest(p_topic_ids, p_partitions, v_offsets, p_byte_offsets, p_byte_sizes,
                    p_timestamps) AS m(topic_id, part, off, byte_offset, byte_size, ts)
        WHERE m.off >= 0;
        -- One statement: one notification for all the markers' logs.
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
    UPDATE transactions
    SET state = v_target, producer_epoch = producer_epoch + v_bump, started_ms = -1,
        updated_ms = p_now
    WHERE transactional_id = p_id;
    RETURN QUERY SELECT 0, v_file_id IS NOT NULL, v_offsets;
END $$;
