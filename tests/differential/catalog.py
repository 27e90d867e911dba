"""Every scripted session: importing a sessions module registers its sessions in
``sessions.SESSIONS``, so this module imports them all (record.py and the tests use it)."""

from __future__ import annotations

from . import (  # noqa: F401  (registered on import)
    sessions_admin,
    sessions_auth,
    sessions_groups,
    sessions_txn,
)
from .sessions import KIND_FREE, SECURE, SESSIONS

__all__ = ["KIND_FREE", "SECURE", "SESSIONS"]
