"""PostgreSQL migrations: NNNN_name.sql, applied in order by storage.postgres.pool."""
