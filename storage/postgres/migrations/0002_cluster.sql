-- The cluster as the brokers sharing this database see it: one cluster id, broker liveness
-- (heartbeat rows, until the Raft controller takes registration over), and a notification
-- when a commit moves high watermarks so long polls on other brokers wake at once.

CREATE TABLE cluster_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);

-- One row per broker; last_seen is the database's clock, so brokers' clocks never matter.
CREATE TABLE broker_heartbeats (
    node_id integer PRIMARY KEY,
    host text NOT NULL,
    port integer NOT NULL,
    rack text,
    incarnation uuid NOT NULL,
    last_seen timestamptz NOT NULL
);
