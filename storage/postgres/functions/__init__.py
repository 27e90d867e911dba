"""PostgreSQL functions: NAME.sql holds the one current text of function NAME, applied
by storage.postgres.schema after the table migrations."""
