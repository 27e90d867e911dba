"""Requests answered late, logged with where they waited: a stall a client saw (the long
nemesis run's diskless produce requests held 32 and 44 s with nothing logged) can then be
placed, behind the connection's earlier requests or after its handler ran."""

from __future__ import annotations

import logging
import time

from broker.server.log_budget import LineBudget
from protocol.codec import RequestHeader

log = logging.getLogger(__name__)

# A produce answered later than this is logged (clients time out at 30 s by default).
SLOW_PRODUCE_S = 10.0
_LINES = LineBudget(2)  # a stalled broker has many: lines a second, the rest counted


def note_slow_produce(
    header: RequestHeader, received: float, admitted: float, peer: tuple[str, int]
) -> None:
    """Called as a produce's answer is written: one line if it took SLOW_PRODUCE_S or more
    since it was read (``received``), split at the call of its handler (``admitted``):
    before, queued behind the connection's earlier requests; after, its commit or high
    watermark and the earlier answers of the connection. Times are time.perf_counter()."""
    now = time.perf_counter()
    total = now - received
    if total < SLOW_PRODUCE_S or (suffix := _LINES.take()) is None:
        return
    log.warning(
        "Produce from %s:%d (client %r, correlation id %d) answered after %.1f s: %.1f s "
        "queued behind the connection's earlier requests, %.1f s from its handler to its "
        "answer%s",
        *peer,
        header.client_id,
        header.correlation_id,
        total,
        admitted - received,
        now - admitted,
        suffix,
    )
