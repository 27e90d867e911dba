"""The Kafka error a failed group-store call is answered with."""

from __future__ import annotations

import logging
import sqlite3

from kio.schema.errors import ErrorCode

from storage.coordinator import CoordinatorUnavailable

log = logging.getLogger(__name__)


def store_error(exc: BaseException, what: str) -> ErrorCode:
    """An unavailable database is retriable: COORDINATOR_NOT_AVAILABLE makes clients look
    the coordinator up again and retry."""
    if isinstance(exc, CoordinatorUnavailable | sqlite3.OperationalError | OSError):
        log.warning("%s failed: %s", what, exc)
        return ErrorCode.coordinator_not_available
    log.error("%s failed", what, exc_info=exc)
    return ErrorCode.unknown_server_error
