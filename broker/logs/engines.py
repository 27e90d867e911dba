"""The router of a broker with its two engines (the rules in ``router`` import neither)."""

from __future__ import annotations

from typing import Protocol

from broker.logs.classic.classic_log import ClassicLog
from broker.logs.classic.replica_manager import ClassicHost
from broker.logs.diskless.diskless_log import DisklessHost, DisklessLog
from broker.logs.router import LogRouter
from broker.logs.tiered.tiered_read import read_tiered


class EngineHost(ClassicHost, DisklessHost, Protocol):
    """What the engines and the router read of their broker (the Broker is one)."""


def log_router(broker: EngineHost) -> LogRouter:
    """Built once by the Broker (``Broker.router``), which handlers are given: the engines
    read the broker's components on each call (its replica manager, the image)."""
    return LogRouter(broker, DisklessLog(broker), ClassicLog(broker, read_tiered))
