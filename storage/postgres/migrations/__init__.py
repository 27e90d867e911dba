"""PostgreSQL table migrations: NNNN_name.sql, applied once each, in order, by
storage.postgres.schema (functions are in storage/postgres/functions/)."""
