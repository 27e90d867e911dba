"""The router of a broker with its two engines (the rules in ``router`` import neither)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.logs.classic.classic_log import ClassicLog
from broker.logs.diskless.diskless_log import DisklessLog
from broker.logs.router import LogRouter

if TYPE_CHECKING:
    from broker.node import Broker


def log_router(broker: Broker) -> LogRouter:
    """Cheap (three small objects), so made per request: the engines read the broker's
    components on each call. (A handler given only what it uses, issue 26 item 2, will
    be given this router instead.)"""
    return LogRouter(broker, DisklessLog(broker), ClassicLog(broker))
