"""Which PostgreSQL failures are a dead connection (an outage: the connection is dropped,
the failure logged once without a traceback) rather than a statement's own error (a bug,
logged with its traceback). asyncpg reports a connection that a PostgreSQL restart killed
under a statement as InternalClientError ("cannot switch to state 12; another operation is
in progress") when the FATAL arrived just before the EOF: nemesis run 7 logged the NOTIFY
connection's as an ERROR with a traceback at a kill of PostgreSQL."""

from __future__ import annotations

import asyncpg

from storage.postgres.pool import lost_connection


def test_a_connection_that_died_under_a_statement_is_lost() -> None:
    assert lost_connection(
        asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        )
    )
    assert lost_connection(ConnectionResetError(104, "Connection reset by peer"))
    assert lost_connection(asyncpg.AdminShutdownError("terminating connection"))
    assert lost_connection(asyncpg.CannotConnectNowError("the database system is starting up"))


def test_a_statement_error_is_not_a_lost_connection() -> None:
    assert not lost_connection(asyncpg.UniqueViolationError("duplicate key"))
    assert not lost_connection(asyncpg.RaiseError("log is sealed"))
    assert not lost_connection(ValueError("a bug"))
