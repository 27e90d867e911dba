"""One INFO line per refused request kind: which client, from where, what, and why.

Operators need to see that a client is being turned away (a bad topic config, a
transactional producer, an invalid request) without a line per request: a client that
retries the same thing in a loop would flood the log. So each (client id, host, API, error,
message) is logged once; the memory of what was logged is bounded, so a client inventing
new client ids cannot grow it without limit.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from broker.server.log_budget import LineBudget

log = logging.getLogger("sluice.refused")

# Codes that are part of the protocol's normal flow (group rebalances, leadership moves,
# auto-created topics becoming ready): answering them is not refusing the client anything.
ROUTINE = frozenset(
    int(code)
    for code in (
        ErrorCode.none,
        ErrorCode.rebalance_in_progress,
        ErrorCode.member_id_required,
        ErrorCode.unknown_member_id,
        ErrorCode.illegal_generation,
        # KIP-848: a member behind the group's epochs rejoins or retries.
        ErrorCode.fenced_member_epoch,
        ErrorCode.stale_member_epoch,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.offset_not_available,
        ErrorCode.unstable_offset_commit,
        ErrorCode.fetch_session_id_not_found,
        ErrorCode.invalid_fetch_session_epoch,
    )
)
MAX_REMEMBERED = 4096
LINES_PER_S = 20  # a client inventing client ids must not be able to fill the disk


class RefusalLog:
    def __init__(
        self, max_remembered: int = MAX_REMEMBERED, lines_per_s: int = LINES_PER_S
    ) -> None:
        self._seen: collections.OrderedDict[tuple[Any, ...], None] = collections.OrderedDict()
        self._max = max_remembered
        self._budget = LineBudget(lines_per_s)

    def note(
        self,
        client_id: str | None,
        host: str,
        port: int,
        api: str,
        code: int,
        message: str,
        reason: str | None = None,
    ) -> None:
        """Log a refusal unless this client was already refused for this reason (by default
        the message; callers whose messages carry per-request figures pass a coarser one)."""
        if code in ROUTINE:
            return
        key = (client_id, host, api, code, message if reason is None else reason)
        if key in self._seen:
            self._seen.move_to_end(key)
            return
        self._seen[key] = None
        if len(self._seen) > self._max:
            self._seen.popitem(last=False)
        suffix = self._budget.take()
        if suffix is None:
            return
        try:
            name = ErrorCode(code).name.upper()
        except ValueError:
            name = str(code)
        log.info(
            "refused %s from client %r at %s:%s: %s%s%s",
            api,
            client_id,
            host,
            port,
            name,
            f" ({message})" if message else "",
            suffix,
        )

    def note_response(
        self, client_id: str | None, host: str, port: int, api: str, response: Any
    ) -> None:
        """Log every distinct error a (kio) response carries, at any depth."""
        for code, message in _errors(response):
            self.note(client_id, host, port, api, code, message)


def _errors(entity: Any) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    stack = [entity]
    while stack:
        item = stack.pop()
        if not dataclasses.is_dataclass(item):
            continue
        code = getattr(item, "error_code", None)
        if code is not None and int(code) not in ROUTINE:
            found.append((int(code), getattr(item, "error_message", None) or ""))
        for field in dataclasses.fields(item):
            value = getattr(item, field.name)
            if isinstance(value, tuple):
                stack.extend(v for v in value if dataclasses.is_dataclass(v))
            elif dataclasses.is_dataclass(value):
                stack.append(value)
    return found


REFUSALS = RefusalLog()
