-- Commits no longer NOTIFY 'sluice_logs' from inside their transaction: PostgreSQL takes one
-- lock for the whole server at the commit of every notifying transaction and holds it through
-- the WAL flush, so all commits flushed one at a time (docs/coordinator-scaling.md). The
-- process that committed notifies after its commit instead, from a connection of its own
-- (storage/postgres/notify.py). Brokers still running the code before this migration keep
-- committing and listening, but their commits wake nobody any more: until they are
-- upgraded, their data reaches other brokers' long polls at their next re-check (at most
-- about a second, remote.poll.interval.ms) or fetch.wait.max.ms: latency only.
DROP TRIGGER IF EXISTS logs_notify ON logs;
DROP FUNCTION IF EXISTS sluice_notify_logs();
-- sluice_enforce_retention answers whether it moved each log (r_moved): a new return type.
DROP FUNCTION IF EXISTS sluice_enforce_retention(uuid[], integer[], bigint[], bigint[], bigint);
