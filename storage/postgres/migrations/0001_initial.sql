-- Sluice batch coordinator and topic catalog on PostgreSQL (DESIGN §4).
--
-- Same tables and semantics as the SQLite backend (storage/coordinator/sqlite.py), which
-- the shared contract suite holds both to. Every public operation is ONE statement or
-- ONE call of a function below, so it costs one round trip whatever the number of
-- partitions: the loops over batches and partitions run here, next to the data.
--
-- Locking discipline (why concurrent brokers never deadlock): a writer first locks the
-- `logs` rows it touches, all at once, ORDER BY topic_id, partition; only then, if at
-- all, the `files` rows it may mark deleting, ORDER BY file_id. `batches` and
-- `producer_state` rows of a partition are only ever written under that partition's
-- `logs` row lock. Functions run at READ COMMITTED (the pool pins it), so a statement
-- that follows a lock wait sees what the other transaction committed.
--
-- Error codes returned are Kafka's: 0 NONE, 1 OFFSET_OUT_OF_RANGE,
-- 3 UNKNOWN_TOPIC_OR_PARTITION, 45 OUT_OF_ORDER_SEQUENCE_NUMBER, 47 INVALID_PRODUCER_EPOCH.

-- ------------------------------------------------------------------------ tables

CREATE TABLE logs (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    log_start_offset bigint NOT NULL DEFAULT 0,
    high_watermark bigint NOT NULL DEFAULT 0,
    byte_size bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition)
);

CREATE TABLE files (
    file_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    object_key text NOT NULL UNIQUE,
    size bigint NOT NULL,
    uploader_broker_id integer NOT NULL,
    committed_at bigint NOT NULL,
    state text NOT NULL CHECK (state IN ('uploaded', 'deleting')),
    reason text NOT NULL CHECK (reason IN ('produce', 'merge')),
    marked_at bigint
);
-- Only deleting files are ever listed by time; a partial index stays tiny.
CREATE INDEX files_deleting ON files (marked_at, file_id) WHERE state = 'deleting';

-- Keyed by (partition, last_offset): a fetch asks "last_offset >= x" and reads one
-- contiguous index range.
CREATE TABLE batches (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    base_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    file_id bigint NOT NULL REFERENCES files (file_id),
    byte_offset bigint NOT NULL,
    byte_size bigint NOT NULL,
    timestamp_type smallint NOT NULL,
    max_timestamp bigint NOT NULL,
    log_append_time bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
);
-- To find files left without batches after deletions (and for the foreign key).
CREATE INDEX batches_by_file ON batches (file_id);

-- One row per retained batch (at most 5) of a producer in a partition. Sequences are
-- bigint: a producer may send any int32 and a batch's range is computed past 2^31-1
-- before it wraps.
CREATE TABLE producer_state (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    producer_id bigint NOT NULL,
    base_offset bigint NOT NULL,
    producer_epoch integer NOT NULL,
    base_sequence bigint NOT NULL,
    last_sequence bigint NOT NULL,
    last_offset bigint NOT NULL,
    log_append_time bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id, base_offset)
);

-- Producer ids handed out to brokers (InitProducerId), one row.
CREATE TABLE producer_id_blocks (
    id integer PRIMARY KEY CHECK (id = 1),
    next_id bigint NOT NULL
);
INSERT INTO producer_id_blocks (id, next_id) VALUES (1, 0);

-- The topic catalog (storage/catalog/postgres.py). COLLATE "C": names sort by bytes,
-- as in SQLite, whatever the database's locale.
CREATE TABLE topics (
    name text COLLATE "C" PRIMARY KEY,
    topic_id uuid NOT NULL UNIQUE,
    partitions integer NOT NULL CHECK (partitions > 0),
    configs jsonb NOT NULL DEFAULT '{}'
);

-- ------------------------------------------------------------------------ helpers

-- Kafka's DefaultRecordBatch.incrementSequence: sequences wrap at 2^31-1 to 0.
CREATE FUNCTION sluice_increment_sequence(seq bigint, increment bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN seq > 2147483647 - increment
                THEN increment - (2147483647 - seq) - 1
                ELSE seq + increment END
$$;

-- Lock logs rows in the one global order. Missing rows are simply not locked.
CREATE FUNCTION sluice_lock_logs(p_topic_ids uuid[], p_partitions integer[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
    FROM logs l
    JOIN unnest(p_topic_ids, p_partitions) AS k(topic_id, part)
      ON l.topic_id = k.topic_id AND l.partition = k.part
    ORDER BY l.topic_id, l.partition
    FOR UPDATE OF l;
END $$;

-- Mark the given files deleting when no batch points into them any more.
CREATE FUNCTION sluice_mark_files_if_empty(p_file_ids bigint[], p_now bigint) RETURNS void
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

-- Drop the batches of a log wholly below new_start and move its start there.
CREATE FUNCTION sluice_move_log_start(
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
END $$;

-- ------------------------------------------------------------------------ commit_file

-- Register one uploaded object and assign offsets to its batches (arrays: one element
-- per batch, in order). Returns one row per batch: r_i is its 1-based position.
--
-- The logs and producer states touched are read once into arrays (PL/pgSQL has no
-- maps: the request's distinct logs and producer states are numbered and the numbers
-- index plain arrays), updated in memory batch by batch, so duplicates within this
-- very call are recognised, and written back with one statement per table.
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
    p_base_sequences bigint[]
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

-- ------------------------------------------------------------------------ find_batches

-- The batches that answer one fetch. One row per request without batches (r_object_key
-- NULL), else one row per batch; r_i is the request's 1-based position. STABLE: every
-- statement inside sees the snapshot of the calling query, so high watermarks and
-- batches agree even while commits land.
CREATE FUNCTION sluice_find_batches(
    p_topic_ids uuid[],
    p_partitions integer[],
    p_offsets bigint[],
    p_max_bytes bigint[],
    p_max_total_bytes bigint,
    p_max_batches integer
) RETURNS TABLE (
    r_i integer,
    r_error integer,
    r_log_start_offset bigint,
    r_high_watermark bigint,
    r_object_key text,
    r_byte_offset bigint,
    r_byte_size bigint,
    r_base_offset bigint,
    r_last_offset bigint
) LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_total bigint := 0;
    v_part bigint;
    v_empty boolean := true;  -- Kafka's minOneMessage: the answer's first batch always goes
    v_found boolean;
    q record;
    b record;
BEGIN
    FOR q IN
        SELECT u.i::integer AS i, u.topic_id, u.part, u.fetch_offset, u.max_bytes,
               l.log_start_offset, l.high_watermark
        FROM unnest(p_topic_ids, p_partitions, p_offsets, p_max_bytes)
             WITH ORDINALITY AS u(topic_id, part, fetch_offset, max_bytes, i)
        LEFT JOIN logs l ON l.topic_id = u.topic_id AND l.partition = u.part
        ORDER BY u.i
    LOOP
        r_i := q.i;
        r_object_key := NULL; r_byte_offset := NULL; r_byte_size := NULL;
        r_base_offset := NULL; r_last_offset := NULL;
        IF q.high_watermark IS NULL THEN
            r_error := 3; r_log_start_offset := -1; r_high_watermark := -1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        r_log_start_offset := q.log_start_offset;
        r_high_watermark := q.high_watermark;
        IF q.fetch_offset < q.log_start_offset OR q.fetch_offset > q.high_watermark THEN
            r_error := 1;
            RETURN NEXT;
            CONTINUE;
        END IF;
        r_error := 0;
        v_found := false;
        IF q.fetch_offset < q.high_watermark AND (v_empty OR v_total < p_max_total_bytes) THEN
            v_part := 0;
            -- Like Kafka's ReplicaManager, each partition may use what is left of the
            -- total budget, so a later partition can still take batches smaller than
            -- the one that did not fit.
            FOR b IN
                SELECT f.object_key, bt.byte_offset, bt.byte_size, bt.base_offset, bt.last_offset
                FROM batches bt
                JOIN files f ON f.file_id = bt.file_id
                WHERE bt.topic_id = q.topic_id AND bt.partition = q.part
                  AND bt.last_offset >= q.fetch_offset
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
            END LOOP;
        END IF;
        IF NOT v_found THEN
            RETURN NEXT;
        END IF;
    END LOOP;
END $$;

-- ------------------------------------------------------------------------ deletion

CREATE FUNCTION sluice_delete_logs(p_topic_ids uuid[], p_now bigint) RETURNS void
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
    PERFORM sluice_mark_files_if_empty(v_file_ids, p_now);
END $$;

-- Move log start offsets forward (offset -1: the high watermark), in request order.
CREATE FUNCTION sluice_delete_records(
    p_topic_ids uuid[], p_partitions integer[], p_offsets bigint[], p_now bigint
) RETURNS TABLE (r_i integer, r_error integer, r_low_watermark bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_file_ids bigint[] := '{}';
    v_start bigint;
    v_hwm bigint;
    v_target bigint;
    v_moved record;
    q record;
BEGIN
    PERFORM sluice_lock_logs(p_topic_ids, p_partitions);
    FOR q IN
        SELECT u.i::integer AS i, u.topic_id, u.part, u.target
        FROM unnest(p_topic_ids, p_partitions, p_offsets) WITH ORDINALITY AS u(topic_id, part, target, i)
        ORDER BY u.i
    LOOP
        r_i := q.i;
        SELECT l.log_start_offset, l.high_watermark INTO v_start, v_hwm
        FROM logs l WHERE l.topic_id = q.topic_id AND l.partition = q.part;
        IF NOT FOUND THEN
            r_error := 3; r_low_watermark := -1;
        ELSE
            v_target := CASE WHEN q.target = -1 THEN v_hwm ELSE q.target END;
            IF v_target < 0 OR v_target > v_hwm THEN
                r_error := 1; r_low_watermark := -1;  -- Kafka: low watermark -1
            ELSIF v_target <= v_start THEN
                r_error := 0; r_low_watermark := v_start;
            ELSE
                SELECT * INTO v_moved FROM sluice_move_log_start(q.topic_id, q.part, v_target);
                v_file_ids := v_file_ids || v_moved.file_ids;
                r_error := 0; r_low_watermark := v_target;
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
    PERFORM sluice_mark_files_if_empty(v_file_ids, p_now);
END $$;

-- Drop whole batches older than retention.ms / beyond retention.bytes (-1: unlimited).
-- Both rules drop a prefix of whole batches, so the result is the longer prefix: walk
-- from the oldest batch while either rule says drop; the first batch both keep becomes
-- the new start (the high watermark when every batch went).
CREATE FUNCTION sluice_enforce_retention(
    p_topic_ids uuid[], p_partitions integer[], p_retention_ms bigint[],
    p_retention_bytes bigint[], p_now bigint
) RETURNS TABLE (
    r_i integer, r_error integer, r_log_start_offset bigint, r_high_watermark bigint,
    r_byte_size bigint
) LANGUAGE plpgsql AS $$
DECLARE
    v_file_ids bigint[] := '{}';
    v_start bigint;
    v_hwm bigint;
    v_size bigint;
    v_new_start bigint;
    v_by_time boolean;
    v_by_bytes boolean;
    v_remaining bigint;
    v_dropped boolean;
    v_decided boolean;
    v_moved record;
    q record;
    b record;
BEGIN
    PERFORM sluice_lock_logs(p_topic_ids, p_partitions);
    FOR q IN
        SELECT u.i::integer AS i, u.topic_id, u.part, u.ms, u.bytes
        FROM unnest(p_topic_ids, p_partitions, p_retention_ms, p_retention_bytes)
             WITH ORDINALITY AS u(topic_id, part, ms, bytes, i)
        ORDER BY u.i
    LOOP
        r_i := q.i;
        SELECT l.log_start_offset, l.high_watermark, l.byte_size INTO v_start, v_hwm, v_size
        FROM logs l WHERE l.topic_id = q.topic_id AND l.partition = q.part;
        IF NOT FOUND THEN
            r_error := 3; r_log_start_offset := -1; r_high_watermark := -1; r_byte_size := 0;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_new_start := NULL;
        v_by_bytes := q.bytes >= 0 AND v_size > q.bytes;
        v_by_time := q.ms >= 0;
        IF v_by_time OR v_by_bytes THEN
            v_remaining := v_size;
            v_dropped := false;
            v_decided := false;
            FOR b IN
                SELECT bt.base_offset, bt.byte_size,
                       CASE WHEN bt.timestamp_type = 1 THEN bt.log_append_time
                            ELSE bt.max_timestamp END AS ts
                FROM batches bt
                WHERE bt.topic_id = q.topic_id AND bt.partition = q.part
                ORDER BY bt.last_offset
            LOOP
                -- retention.ms only ever drops a prefix: it stops at the first recent batch.
                v_by_time := v_by_time AND b.ts < p_now - q.ms;
                -- Kafka: drop the oldest while size - segment size >= retention.bytes.
                v_by_bytes := v_by_bytes AND v_remaining - b.byte_size >= q.bytes;
                IF NOT (v_by_time OR v_by_bytes) THEN
                    IF v_dropped THEN
                        v_new_start := b.base_offset;
                    END IF;
                    v_decided := true;
                    EXIT;
                END IF;
                v_remaining := v_remaining - b.byte_size;
                v_dropped := true;
            END LOOP;
            IF NOT v_decided AND v_dropped THEN
                v_new_start := v_hwm;
            END IF;
        END IF;
        IF v_new_start IS NOT NULL AND v_new_start > v_start THEN
            SELECT * INTO v_moved FROM sluice_move_log_start(q.topic_id, q.part, v_new_start);
            v_file_ids := v_file_ids || v_moved.file_ids;
            v_size := v_size - v_moved.freed;
            v_start := v_new_start;
        END IF;
        r_error := 0; r_log_start_offset := v_start; r_high_watermark := v_hwm;
        r_byte_size := v_size;
        RETURN NEXT;
    END LOOP;
    PERFORM sluice_mark_files_if_empty(v_file_ids, p_now);
END $$;
