"""Kafka's connection limits, shared by every listener of a broker.

- ``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``, ``host:count,...``):
  a client address past its limit has its new connection closed at once, as Kafka does.
- ``max.connections``: connections of the whole broker. The inter-broker listener is
  exempt, as in Kafka, so replication and an operator on that listener are never locked
  out by a flood on the client listener. Whatever is configured, and on every listener,
  the broker keeps room below its open-file limit (RLIMIT_NOFILE): past it, it could not
  open a segment, an object or a database connection, and would fail for everyone.
- ``max.connection.creation.rate``: new connections per second, per broker (Kafka delays
  acceptance; here the connection past the rate is closed, which a client retries).
- ``connections.max.idle.ms``: a connection that neither sent nor received anything for
  this long is closed (Kafka's default: 10 minutes).
- ``connections.max.unauthenticated.ms``: a connection on a SASL listener that has not
  authenticated this long after it was opened is closed; a half-finished login must not
  hold a connection slot for the idle timeout.
- KIP-612's ``connection_creation_rate`` quota of an ``ip`` entity (or the default ip
  entity), set with AlterClientQuotas: new connections per second from one address, over
  a sliding second; past it the new connection is closed. This is what stops a client from
  escaping a produce quota by reconnecting.
- ``queued.max.request.bytes``: bytes all connections may hold in requests still being
  received; past it, connections waiting for the rest of a large request stop reading
  until memory is returned (Kafka's memory pool). Idle or stalled senders are then cut by
  the idle timeout.

Pure bookkeeping: the server calls it when a connection opens or closes and sweeps it
once a second.
"""

from __future__ import annotations

import resource
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from broker.config import BrokerConfig, parse_overrides

UNLIMITED = 2**31 - 1
# File descriptors kept free below RLIMIT_NOFILE for everything that is not a client
# connection: segments and indexes, sockets to the store, the database and other brokers.
RESERVED_FILES = 512
# Addresses whose recent connection times are kept for the ip quota (bounded: a client
# cannot grow this by connecting from many addresses).
MAX_RATE_HOSTS = 50_000


def file_limited(max_connections: int) -> int:
    """``max.connections`` capped to what the open-file limit leaves for clients."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, soft - RESERVED_FILES))


@dataclass(frozen=True)
class LimitSettings:
    max_per_ip: int = UNLIMITED
    per_ip_overrides: tuple[tuple[str, int], ...] = ()
    max_connections: int = UNLIMITED
    max_creation_rate: int = UNLIMITED
    idle_ms: int = 600_000
    unauthenticated_ms: int = 10_000
    queued_max_request_bytes: int = -1


def limit_settings(config: BrokerConfig) -> LimitSettings:
    return LimitSettings(
        max_per_ip=config.max_connections_per_ip,
        per_ip_overrides=tuple(parse_overrides(config.max_connections_per_ip_overrides).items()),
        max_connections=config.max_connections,
        max_creation_rate=config.max_connection_creation_rate,
        idle_ms=config.connections_max_idle_ms,
        unauthenticated_ms=config.connections_max_unauthenticated_ms,
        queued_max_request_bytes=config.queued_max_request_bytes,
    )


class ConnectionLimits:
    def __init__(
        self, settings: LimitSettings, ip_rate: Callable[[str], float | None] | None = None
    ) -> None:
        self.settings = settings
        # The connection_creation_rate quota of an address (None: no quota applies).
        self._ip_rate = ip_rate
        self._ip_created: dict[str, deque[float]] = {}
        self._overrides = dict(settings.per_ip_overrides)
        self._max = settings.max_connections
        # Applies to every listener, the exempt one too: past it nothing can be opened.
        self._file_cap = file_limited(UNLIMITED)
        self._per_ip: dict[str, int] = {}
        self._total = 0
        self._created: deque[float] = deque()  # accept times (ms) in the last second
        # Bytes of requests being received, all connections together, and the connections
        # (of every listener) waiting for some to be returned: each one's retry, called
        # when bytes are returned.
        self.receiving_bytes = 0
        self.memory_waiters: set[Callable[[], None]] = set()
        self.refused = 0

    @property
    def total(self) -> int:
        return self._total

    def admit(self, host: str, exempt: bool, now_ms: float) -> str | None:
        """Count a new connection from ``host``; or why it must be closed (not counted)."""
        s = self.settings
        limit = self._overrides.get(host, s.max_per_ip)
        if self._per_ip.get(host, 0) >= limit:
            self.refused += 1
            return f"too many connections from {host} (max.connections.per.ip={limit})"
        if self._total >= self._file_cap:
            self.refused += 1
            return f"too many connections for the open-file limit ({self._file_cap})"
        if not exempt:
            if self._total >= self._max:
                self.refused += 1
                return f"too many connections (max.connections={self._max})"
            created = self._created
            while created and created[0] <= now_ms - 1000:
                created.popleft()
            if len(created) >= s.max_creation_rate:
                self.refused += 1
                return (
                    f"too many new connections (max.connection.creation.rate={s.max_creation_rate})"
                )
            created.append(now_ms)
            if (quota := self._ip_quota_refusal(host, now_ms)) is not None:
                self.refused += 1
                return quota
        self._per_ip[host] = self._per_ip.get(host, 0) + 1
        self._total += 1
        return None

    def _ip_quota_refusal(self, host: str, now_ms: float) -> str | None:
        rate = self._ip_rate(host) if self._ip_rate is not None else None
        if rate is None:
            self._ip_created.pop(host, None)
            return None
        times = self._ip_created.get(host)
        if times is None:
            if len(self._ip_created) >= MAX_RATE_HOSTS:
                self._ip_created.clear()
            times = self._ip_created[host] = deque()
        while times and times[0] <= now_ms - 1000:
            times.popleft()
        if len(times) >= rate:
            return f"connection_creation_rate quota of {host} ({rate:g}/s) exceeded"
        times.append(now_ms)
        return None

    def release(self, host: str) -> None:
        count = self._per_ip.get(host, 0) - 1
        if count <= 0:
            self._per_ip.pop(host, None)
        else:
            self._per_ip[host] = count
        self._total = max(0, self._total - 1)

    def may_buffer(self, more: int) -> bool:
        """Whether a connection may hold ``more`` bytes of an incomplete request."""
        cap = self.settings.queued_max_request_bytes
        return cap < 0 or self.receiving_bytes + more <= cap

    def expired(
        self, opened_ms: float, last_active_ms: float, authenticated: bool, now_ms: float
    ) -> str | None:
        """Why a connection is to be closed by the sweep (None: keep it)."""
        s = self.settings
        if not authenticated and now_ms - opened_ms >= s.unauthenticated_ms:
            return f"not authenticated within {s.unauthenticated_ms} ms"
        if s.idle_ms >= 0 and now_ms - last_active_ms >= s.idle_ms:
            return f"idle for {s.idle_ms} ms (connections.max.idle.ms)"
        return None
