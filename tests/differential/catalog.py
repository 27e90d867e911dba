"""Every scripted session: importing a sessions module registers its sessions in
``sessions.SESSIONS``, so this module imports them all (record.py and the tests use it)."""

from __future__ import annotations

from . import sessions_admin, sessions_groups, sessions_txn  # noqa: F401  (registered on import)
from .sessions import KIND_FREE, SESSIONS

__all__ = ["KIND_FREE", "SESSIONS"]
