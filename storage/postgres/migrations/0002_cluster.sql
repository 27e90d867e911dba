-- The cluster as the brokers sharing this database see it: one cluster id, broker liveness
-- (heartbeat rows, until the Raft controller takes registration over), and a notification
-- when a commit moves high watermarks so long polls on other brokers wake at once.

CREATE TABLE cluster_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);

-- The first broker to start proposes the id; every later one adopts it.
CREATE FUNCTION sluice_cluster_id(p_proposed text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    INSERT INTO cluster_meta (key, value) VALUES ('cluster.id', p_proposed)
    ON CONFLICT (key) DO NOTHING;
    SELECT value INTO v FROM cluster_meta WHERE key = 'cluster.id';
    RETURN v;
END
$$;

-- One row per broker; last_seen is the database's clock, so brokers' clocks never matter.
CREATE TABLE broker_heartbeats (
    node_id integer PRIMARY KEY,
    host text NOT NULL,
    port integer NOT NULL,
    rack text,
    incarnation uuid NOT NULL,
    last_seen timestamptz NOT NULL
);

-- Record a heartbeat and answer the live brokers (seen within p_session_ms), in one round
-- trip. A starting broker does not take over a node id a live incarnation still holds: the
-- answer then shows the other incarnation and the caller refuses to start.
CREATE FUNCTION sluice_broker_heartbeat(
    p_node_id integer, p_host text, p_port integer, p_rack text, p_incarnation uuid,
    p_session_ms bigint, p_starting boolean
) RETURNS TABLE (node_id integer, host text, port integer, rack text, incarnation uuid)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_live_after timestamptz := v_now - p_session_ms * interval '1 millisecond';
BEGIN
    INSERT INTO broker_heartbeats AS b (node_id, host, port, rack, incarnation, last_seen)
    VALUES (p_node_id, p_host, p_port, p_rack, p_incarnation, v_now)
    ON CONFLICT ON CONSTRAINT broker_heartbeats_pkey DO UPDATE
        SET host = excluded.host, port = excluded.port, rack = excluded.rack,
            incarnation = excluded.incarnation, last_seen = excluded.last_seen
        WHERE NOT p_starting OR b.incarnation = excluded.incarnation OR b.last_seen <= v_live_after;
    RETURN QUERY
        SELECT b.node_id, b.host, b.port, b.rack, b.incarnation
        FROM broker_heartbeats b
        WHERE b.last_seen > v_live_after
        ORDER BY b.node_id;
END
$$;

-- Commits (and log start moves) notify 'sluice_logs' with "topic_id:partition" entries, one
-- per line; an empty payload means "maybe any partition" when the list would not fit
-- NOTIFY's 8000-byte limit. Notifications are sent at commit, never for a rollback.
CREATE FUNCTION sluice_notify_logs() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_payload text;
BEGIN
    SELECT string_agg(n.topic_id::text || ':' || n.partition, E'\n') INTO v_payload
    FROM (SELECT DISTINCT topic_id, partition FROM new_logs) n;
    IF v_payload IS NULL THEN
        RETURN NULL;
    END IF;
    IF octet_length(v_payload) > 7900 THEN
        v_payload := '';
    END IF;
    PERFORM pg_notify('sluice_logs', v_payload);
    RETURN NULL;
END
$$;

CREATE TRIGGER logs_notify AFTER UPDATE ON logs
    REFERENCING NEW TABLE AS new_logs
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_notify_logs();
