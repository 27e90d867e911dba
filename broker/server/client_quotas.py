"""Client quotas (KIP-13, KIP-55, KIP-124): per (user, client-id) byte rates for produce and
fetch, and a request-time percentage, measured as Kafka measures them.

Which quota applies follows Kafka's precedence, most specific first: user+client-id,
user+default client-id, user, default user+client-id, default user+default client-id,
default user, client-id, default client-id. The matching entity also says who shares the
measured rate: a quota set for a user is shared by all of that user's clients, one set for
a default applies to each user (or client id) separately.

Rates are Kafka's sampled rates: ``quota.window.num`` samples of
``quota.window.size.seconds``, the rate being their sum over the time they cover (at least
``num - 1`` full windows, so one burst after a quiet period is not judged over a few
milliseconds). A client over its quota is answered with ``throttle_time_ms`` =
(rate - quota) / quota x window, capped at the whole window, and its connection is not read
from for that long after the answer (KIP-219, see broker/server/connection.py).
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
import time
from collections.abc import Callable, Mapping
from typing import Any

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"

# The entity lookups in precedence order: (user part, client-id part) with "u"/"c" for the
# client's own name, None for the default entity, and "" for "no such part". The second
# pair says whose rate is measured: "u"/"c" keep that part of the client's identity.
_ORDER: list[tuple[tuple[str, str], tuple[str, str]]] = [
    (("u", "c"), ("u", "c")),
    (("u", "default"), ("u", "c")),
    (("u", ""), ("u", "")),
    (("default", "c"), ("u", "c")),
    (("default", "default"), ("u", "c")),
    (("default", ""), ("u", "")),
    (("", "c"), ("", "c")),
    (("", "default"), ("", "c")),
]
_ABSENT = "\0absent"  # an entity without this part (no user name can contain NUL)
# Bounds the per-client state a client cycling through random client ids can create.
MAX_SENSORS = 50_000


class SampledRate:
    """Kafka's windowed Rate over ``samples`` windows of ``window_ms``."""

    __slots__ = ("_samples", "_values", "_window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self._samples = samples
        self._window_ms = window_ms
        self._values: list[list[float]] = []  # [window start ms, value], oldest first

    def record(self, value: float, now_ms: float) -> None:
        values = self._values
        if not values or now_ms - values[-1][0] >= self._window_ms:
            values.append([now_ms, 0.0])
            if len(values) > self._samples:
                del values[0]
        values[-1][1] += value

    def unrecord(self, value: float) -> None:
        if self._values:
            self._values[-1][1] -= value

    def window_ms(self, now_ms: float) -> float:
        """The time the samples cover, as Kafka computes it (at least samples - 1 windows)."""
        self._purge(now_ms)
        oldest = self._values[0][0] if self._values else now_ms
        elapsed = now_ms - oldest
        minimum = (self._samples - 1) * self._window_ms
        full = int(elapsed // self._window_ms)
        if full < self._samples - 1:
            elapsed += minimum - full * self._window_ms
        return max(elapsed, 1.0)

    def rate(self, now_ms: float) -> float:
        """Per second."""
        window = self.window_ms(now_ms)
        return sum(v for _, v in self._values) / (window / 1000)

    def _purge(self, now_ms: float) -> None:
        expire = now_ms - self._samples * self._window_ms
        while self._values and self._values[0][0] + self._window_ms <= expire:
            del self._values[0]


class QuotaManager:
    """One quota type (a key of ``_ORDER``'s entities): bounds, rates, throttle times."""

    def __init__(
        self,
        key: str,
        quotas: Callable[[], Mapping[Any, Mapping[str, float]]],
        samples: int = 11,
        window_s: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.key = key
        self._source = quotas
        self._samples = samples
        self._window_ms = window_s * 1000
        self._clock = clock
        self._seen: Any = None
        self._bounds: dict[tuple[str, str], tuple[tuple[str, str], float] | None] = {}
        self._rates: dict[tuple[str, str], SampledRate] = {}

    @property
    def max_throttle_ms(self) -> int:
        return self._samples * self._window_ms

    def enabled(self) -> bool:
        """Whether any entity has this quota (else nothing is measured)."""
        self._refresh()
        return self._any

    def _refresh(self) -> None:
        quotas = self._source()
        if quotas is not self._seen:
            self._seen = quotas
            self._bounds = {}
            self._any = any(self.key in values for values in quotas.values())
            self._table = {
                _entity_key(entity): values[self.key]
                for entity, values in quotas.items()
                if self.key in values
            }

    def bound(self, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """(whose rate is measured, the quota) for a client, or None when unlimited."""
        self._refresh()
        cache_key = (user, client_id)
        if cache_key in self._bounds:
            return self._bounds[cache_key]
        found = None
        for (user_part, client_part), (keep_user, keep_client) in _ORDER:
            lookup = (_part(user_part, user), _part(client_part, client_id))
            value = self._table.get(lookup)
            if value is not None:
                sensor = (user if keep_user else "", client_id if keep_client else "")
                found = (sensor, value)
                break
        if len(self._bounds) >= MAX_SENSORS:
            self._bounds = {}
        self._bounds[cache_key] = found
        return found

    def record(self, user: str, client_id: str, value: float) -> int:
        """Record ``value`` (bytes, or request time in ms x 100 for percentages) and return
        the throttle time in ms (0: within the quota)."""
        if not self.enabled():
            return 0
        found = self.bound(user, client_id)
        if found is None:
            return 0
        sensor, bound = found
        rate = self._rates.get(sensor)
        if rate is None:
            if len(self._rates) >= MAX_SENSORS:
                self._rates = {}
            rate = self._rates[sensor] = SampledRate(self._samples, self._window_ms)
        now = self._clock() * 1000
        rate.record(value, now)
        measured = rate.rate(now)
        if measured <= bound:
            return 0
        throttle = (measured - bound) / bound * rate.window_ms(now)
        # A positive bound may still be tiny (AlterClientQuotas takes any positive double:
        # 5e-324 is one): the quotient is then inf, which round() cannot take.
        if not throttle < self.max_throttle_ms:
            return self.max_throttle_ms
        return round(throttle)

    def unrecord(self, user: str, client_id: str, value: float) -> None:
        """Take back a recorded value (a fetch answered empty because it was throttled)."""
        found = self.bound(user, client_id)
        if found is not None and (rate := self._rates.get(found[0])) is not None:
            rate.unrecord(value)


def _part(spec: str, name: str) -> str | None:
    """An entity part for a lookup: the client's name, the default (None) or absent ("")."""
    if spec in ("u", "c"):
        return name
    return None if spec == "default" else _ABSENT


def _entity_key(entity: Any) -> tuple[str | None, str | None]:
    """An image entity ((type, name) pairs) as (user, client id), _ABSENT for a missing part."""
    names = dict(entity)
    return names.get("user", _ABSENT), names.get("client-id", _ABSENT)


class ClientQuotas:
    """The three quota types of a broker, reading the quotas of its metadata image."""

    def __init__(
        self,
        quotas: Callable[[], Mapping[Any, Mapping[str, float]]],
        samples: int,
        window_s: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.produce = QuotaManager(PRODUCE, quotas, samples, window_s, clock)
        self.fetch = QuotaManager(FETCH, quotas, samples, window_s, clock)
        self.request = QuotaManager(REQUEST, quotas, samples, window_s, clock)


# A handler that throttles its client says so here (it runs in the connection's task): the
# request pipeline then admits nothing more from that connection until the throttle time
# has passed. Waiting for the answer to be written would be too late: requests pipelined
# behind it were admitted by then.
_THROTTLE: contextvars.ContextVar[int] = contextvars.ContextVar("throttle_ms", default=0)


def throttle_connection(throttle_ms: int) -> None:
    """Called by a handler whose answer will carry ``throttle_ms`` (quotas, KIP-219)."""
    if throttle_ms > _THROTTLE.get():
        _THROTTLE.set(throttle_ms)


def settle_request(
    request_quota: QuotaManager | None, user: str, client_id: str, result: Any, seconds: float
) -> tuple[Any, int]:
    """After a handler ran (the request pipeline), a request's quotas in one step: the
    throttle time its handler asked for (``throttle_connection``, cleared for the next
    request), and its handling time (``seconds``) charged to the request quota when any
    client has one, in percent of a second as Kafka counts. An answer at hand that has a
    throttle time carries the request quota's (a future only mutes). Returns the answer
    and how long to mute the connection for (0: not throttled)."""
    throttle_ms = _THROTTLE.get()
    if throttle_ms:
        _THROTTLE.set(0)
    if request_quota is None or not request_quota.enabled():
        return result, throttle_ms  # the common case: nothing to measure
    charged = request_quota.record(user, client_id, seconds * 100)
    if charged <= 0:
        return result, throttle_ms
    fields = getattr(result, "__dataclass_fields__", None)
    if fields is not None and "throttle_time" in fields:
        current = result.throttle_time
        if isinstance(current, datetime.timedelta) and current.total_seconds() * 1000 < charged:
            result = dataclasses.replace(
                result, throttle_time=datetime.timedelta(milliseconds=charged)
            )
        return result, throttle_ms  # the answer's throttle time mutes when it is written
    return result, max(throttle_ms, charged)
