-- Record a heartbeat and answer the live brokers (seen within p_session_ms), in one round
-- trip. A starting broker does not take over a node id a live incarnation still holds: the
-- answer then shows the other incarnation and the caller refuses to start.
CREATE OR REPLACE FUNCTION sluice_broker_heartbeat(
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
