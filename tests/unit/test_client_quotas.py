"""Client quotas: which entity's quota applies (Kafka's precedence), who shares a measured
rate, the sampled rate and the throttle time."""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
from typing import Any

import pytest

from broker.security.principal import user_of
from broker.server.client_quotas import (
    PRODUCE,
    REQUEST,
    QuotaManager,
    SampledRate,
    settle_request,
    throttle_connection,
)
from controller.image import quota_entity


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quotas(**entities: float) -> dict:
    """ "user=alice,client-id=app": rate -> the image's shape (None name: default)."""
    out = {}
    for spec, value in entities.items():
        pairs = [part.split("=") for part in spec.replace("__", "-").split(",")]
        types = [t for t, _ in pairs]
        names = [None if n == "default" else n for _, n in pairs]
        out[quota_entity(types, names)] = {PRODUCE: value}
    return out


def manager(table: dict, clock: Clock | None = None) -> QuotaManager:
    return QuotaManager(PRODUCE, lambda: table, samples=11, window_s=1, clock=clock or Clock())


def test_precedence_most_specific_first() -> None:
    table = {
        **quotas(**{"user=alice,client__id=app": 1.0}),
        **quotas(**{"user=alice,client__id=default": 2.0}),
        **quotas(**{"user=alice": 3.0}),
        **quotas(**{"user=default,client__id=app": 4.0}),
        **quotas(**{"user=default,client__id=default": 5.0}),
        **quotas(**{"user=default": 6.0}),
        **quotas(**{"client__id=app": 7.0}),
        **quotas(**{"client__id=default": 8.0}),
    }
    m = manager(table)
    assert m.bound("alice", "app") == (("alice", "app"), 1.0)
    assert m.bound("alice", "other") == (("alice", "other"), 2.0)
    assert m.bound("bob", "app") == (("bob", "app"), 4.0)
    assert m.bound("bob", "other") == (("bob", "other"), 5.0)
    only_users = manager({**quotas(**{"user=alice": 3.0}), **quotas(**{"user=default": 6.0})})
    # A user's quota is shared by all its clients; the default applies to each user.
    assert only_users.bound("alice", "x") == (("alice", ""), 3.0)
    assert only_users.bound("carol", "y") == (("carol", ""), 6.0)
    clients = manager(
        {**quotas(**{"client__id=app": 7.0}), **quotas(**{"client__id=default": 8.0})}
    )
    assert clients.bound("anyone", "app") == (("", "app"), 7.0)
    assert clients.bound("anyone", "batch") == (("", "batch"), 8.0)
    assert manager({}).bound("alice", "app") is None


def test_sampled_rate_covers_at_least_all_but_one_window() -> None:
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(10_000, 0)
    # Ten full windows at least: one burst is not judged over a few milliseconds.
    assert rate.window_ms(5) == pytest.approx(10_005)
    assert rate.rate(5) == pytest.approx(10_000 / 10.005)
    for second in range(1, 30):
        rate.record(1000, second * 1000)
    # Old samples expire: the rate settles at the steady 1000/s.
    assert rate.rate(29_500) == pytest.approx(1000, rel=0.1)


def test_throttle_time_is_kafkas_formula_and_capped() -> None:
    clock = Clock()
    m = manager(quotas(**{"user=alice": 1000.0}), clock)
    assert m.record("alice", "app", 5000) == 0  # 5000 B over >= 10 s: 500 B/s
    throttle = m.record("alice", "app", 10_000)  # 15 kB over 10 s: 1500 B/s
    assert throttle == round((1500 - 1000) / 1000 * 10_000)
    assert m.record("alice", "app", 10**9) == m.max_throttle_ms == 11_000
    assert m.record("bob", "app", 10**9) == 0  # no quota for bob
    m.unrecord("alice", "app", 10**9)
    clock.now += 1
    assert m.record("alice", "app", 0) > 0  # still 25 kB over the window


def test_a_tiny_quota_throttles_for_the_whole_window_rather_than_failing() -> None:
    # AlterClientQuotas accepts any positive double; with 5e-324 (request_percentage for
    # the default client id, one fuzzed frame) (rate - quota) / quota is inf, and every
    # request of every client failed in round(inf) and had its connection closed.
    clock = Clock()
    for tiny in (5e-324, 1e-310, 1e-300):
        m = manager(quotas(**{"client__id=default": tiny}), clock)
        assert m.record("anyone", "app", 1) == m.max_throttle_ms
        assert m.record("anyone", "app", 10**9) == m.max_throttle_ms
    huge = manager(quotas(**{"client__id=default": 1e308}), clock)
    assert huge.record("anyone", "app", 10**9) == 0


def test_quota_changes_take_effect() -> None:
    table: dict = {}
    holder = {"q": table}
    m = QuotaManager(PRODUCE, lambda: holder["q"], clock=Clock())
    assert not m.enabled() and m.record("alice", "c", 10**9) == 0
    holder["q"] = quotas(**{"user=alice": 10.0})
    assert m.enabled() and m.record("alice", "c", 10**6) > 0


def test_user_of_principal() -> None:
    assert user_of("User:alice") == "alice"
    assert user_of("User:ANONYMOUS") == "ANONYMOUS"


def test_a_request_is_settled_once_after_its_handler() -> None:
    """settle_request: the throttle the handler asked for, read and cleared for the next
    request; the request quota charged with the handling time only when some client has
    one, an answer at hand carrying its throttle (anything else: the connection mutes)."""
    # The image's quotas, replaced whole on a change (as the metadata image's are).
    tables: list[dict] = [{}]
    request = QuotaManager(REQUEST, lambda: tables[0], clock=Clock())

    def settle(result: Any, handler_ms: int = 0) -> tuple[Any, int]:
        if handler_ms:
            throttle_connection(handler_ms)  # as a handler does, in the request's context
        return settle_request(request, "alice", "app", result, 0.5)

    def run() -> None:
        answer = Answer(datetime.timedelta(0))
        assert settle(answer, 300) == (answer, 300)
        assert settle(answer) == (answer, 0)  # cleared: not the next request's
        assert request._rates == {}  # no request quota anywhere: nothing measured
        tables[0] = {quota_entity(["user"], ["alice"]): {REQUEST: 1.0}}
        carried, mute = settle(answer)
        assert mute == 0 and carried.throttle_time > datetime.timedelta(0)
        assert settle(object(), 5)[1] > 5  # no throttle field: muted for the larger

    contextvars.copy_context().run(run)


@dataclasses.dataclass
class Answer:
    throttle_time: datetime.timedelta
