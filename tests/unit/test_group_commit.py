"""When the append path flushes: adaptive group commit, the fixed interval, the caps."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest
import uvloop

from broker.config import AUTO_S3_OBJECTS_PER_SECOND, BrokerConfig, load_config
from broker.logs.diskless.diskless_append import PUT_BURST, Appender, PutBudget
from broker.logs.partition_log import PartitionAppend
from protocol.records import BatchHeader
from storage.coordinator import CommitResult

TOPIC = uuid.uuid4()


# The broker runs on uvloop, whose timer handles differ from asyncio's (call_at for a time
# already past returns a plain Handle): every scenario runs on both loops.
@pytest.fixture(params=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    return uvloop.run if request.param == "uvloop" else asyncio.run  # type: ignore[return-value]


class Store:
    """Records each PUT; a PUT blocks while ``gate`` is clear."""

    def __init__(self) -> None:
        self.puts: list[tuple[float, int]] = []  # (loop time, bytes)
        self.gate = asyncio.Event()
        self.gate.set()

    async def put(self, key: str, chunks: Sequence[Any]) -> None:
        self.puts.append((asyncio.get_running_loop().time(), sum(len(c) for c in chunks)))
        await self.gate.wait()


class Coordinator:
    """Assigns offsets in commit order; a commit blocks while ``gate`` is clear."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.commits = 0
        self.gate = asyncio.Event()
        self.gate.set()

    async def commit_file(self, key: str, size: int, node: int, batches: Any, now: int) -> Any:
        await self.gate.wait()
        self.commits += 1
        out = []
        for b in batches:
            out.append(CommitResult(0, self.next_offset))
            self.next_offset += b.record_count
        return out


class Cache:
    def put_object(self, key: str, chunks: Any) -> None:
        pass

    def invalidate(self, key: str) -> None:
        pass


def append(size: int = 100) -> PartitionAppend:
    header = BatchHeader(0, size, 0, 0, 0, 0, -1, -1, -1, 1)
    return PartitionAppend(TOPIC, 0, memoryview(bytes(size)), [header], False)


def appender(store: Store, coordinator: Coordinator | None = None, **kwargs: Any) -> Appender:
    options: dict[str, Any] = {"commit_interval_ms": 10_000, "buffer_max_bytes": 1 << 20}
    options.update(kwargs)
    coordinator = coordinator or Coordinator()
    return Appender(store, coordinator, Cache(), 1, on_commit=lambda _: None, **options)  # type: ignore[arg-type]


def test_adaptive_flushes_an_idle_broker_at_once(run: Callable[[Any], None]) -> None:
    run(_test_adaptive_flushes_an_idle_broker_at_once())


async def _test_adaptive_flushes_an_idle_broker_at_once() -> None:
    store = Store()
    a = appender(store)
    started = asyncio.get_running_loop().time()
    result = await asyncio.wait_for(a.submit([append()]), 5)
    # Answered long before the 10 s interval: one PUT, one commit.
    assert result[0].error == 0 and result[0].base_offset == 0
    assert len(store.puts) == 1 and store.puts[0][0] - started < 5


def test_adaptive_gathers_during_an_upload_and_flushes_when_it_ends(
    run: Callable[[Any], None],
) -> None:
    run(_test_adaptive_gathers_during_an_upload_and_flushes_when_it_ends())


async def _test_adaptive_gathers_during_an_upload_and_flushes_when_it_ends() -> None:
    store = Store()
    a = appender(store)
    store.gate.clear()
    first = a.submit([append()])
    await asyncio.sleep(0.05)
    assert len(store.puts) == 1  # the first flush is uploading
    later = [a.submit([append()]) for _ in range(5)]
    await asyncio.sleep(0.2)
    assert len(store.puts) == 1  # nothing else starts while it uploads
    store.gate.set()
    results = await asyncio.wait_for(asyncio.gather(first, *later), 5)
    # The five that gathered went out together, as one object, right after the upload.
    assert [size for _, size in store.puts] == [100, 500]
    assert [r[0].base_offset for r in results] == [0, 1, 2, 3, 4, 5]


def test_adaptive_gathers_while_commits_are_behind(run: Callable[[Any], None]) -> None:
    run(_test_adaptive_gathers_while_commits_are_behind())


async def _test_adaptive_gathers_while_commits_are_behind() -> None:
    # PUTs answer at once, commits are slow (a loaded database): objects started at every
    # upload's end would only queue behind each other's commits, one commit each.
    store, coordinator = Store(), Coordinator()
    a = appender(store, coordinator)
    coordinator.gate.clear()
    futures = [a.submit([append()])]
    await _until(lambda: len(store.puts) == 1)  # uploaded; its commit waits
    futures.append(a.submit([append()]))
    await _until(lambda: len(store.puts) == 2)  # this upload overlaps that commit
    futures += [a.submit([append()]) for _ in range(2)]
    await asyncio.sleep(0.05)
    futures += [a.submit([append()]) for _ in range(2)]
    await asyncio.sleep(0.05)  # (before, each pair went out as soon as an upload ended)
    assert [size for _, size in store.puts] == [100, 100]  # the other four gather
    coordinator.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*futures), 5)
    # They went out together once the first commit ended: three commits for six requests.
    assert [size for _, size in store.puts] == [100, 100, 400]
    assert coordinator.commits == 3
    assert [r[0].base_offset for r in results] == [0, 1, 2, 3, 4, 5]


def test_no_batch_waits_longer_than_the_interval_behind_a_slow_upload(
    run: Callable[[Any], None],
) -> None:
    run(_test_no_batch_waits_longer_than_the_interval_behind_a_slow_upload())


async def _test_no_batch_waits_longer_than_the_interval_behind_a_slow_upload() -> None:
    store = Store()
    a = appender(store, commit_interval_ms=200)
    store.gate.clear()
    a.submit([append()])
    await asyncio.sleep(0.05)
    waiting = asyncio.get_running_loop().time()
    a.submit([append()])
    # The upload never ends, yet the second buffer goes out after about the interval
    # (polled: waiting a fixed second spent the second whatever happened).
    async with asyncio.timeout(2.0):
        while len(store.puts) < 2:
            await asyncio.sleep(0.01)
    assert store.puts[1][0] - waiting >= 0.15
    store.gate.set()


def test_fixed_mode_waits_the_interval(run: Callable[[Any], None]) -> None:
    run(_test_fixed_mode_waits_the_interval())


async def _test_fixed_mode_waits_the_interval() -> None:
    store = Store()
    a = appender(store, commit_mode="fixed", commit_interval_ms=300)
    started = asyncio.get_running_loop().time()
    futures = [a.submit([append()]) for _ in range(3)]
    await asyncio.sleep(0.1)
    assert store.puts == []
    await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert len(store.puts) == 1 and store.puts[0][0] - started >= 0.29


def test_min_wait_delays_the_idle_flush(run: Callable[[Any], None]) -> None:
    run(_test_min_wait_delays_the_idle_flush())


async def _test_min_wait_delays_the_idle_flush() -> None:
    store = Store()
    a = appender(store, commit_min_ms=300)
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(a.submit([append()]), 5)
    assert store.puts[0][0] - started >= 0.29


def test_full_buffer_flushes_even_during_an_upload(run: Callable[[Any], None]) -> None:
    run(_test_full_buffer_flushes_even_during_an_upload())


async def _test_full_buffer_flushes_even_during_an_upload() -> None:
    store = Store()
    a = appender(store, buffer_max_bytes=1000)
    store.gate.clear()
    a.submit([append()])
    await asyncio.sleep(0.05)
    a.submit([append(1000)])
    await asyncio.sleep(0.05)
    assert [size for _, size in store.puts] == [100, 1000]
    store.gate.set()


def test_objects_per_second_cap_spaces_flushes(run: Callable[[Any], None]) -> None:
    run(_test_objects_per_second_cap_spaces_flushes())


class _RecordedBudget(PutBudget):
    """The budget as the appender spends it: the loop time of each object's flush (the
    PUT's own start follows in a task, late by however busy the machine is)."""

    __slots__ = ("spent",)

    def __init__(self, rate: float) -> None:
        super().__init__(rate)
        self.spent: list[float] = []

    def spend(self, now: float) -> None:
        self.spent.append(now)
        super().spend(now)


async def _test_objects_per_second_cap_spaces_flushes() -> None:
    store = Store()
    a = appender(store, objects_per_second_max=4)  # one flush per 250 ms past the burst
    budget = a._budget = _RecordedBudget(4)
    for _ in range(PUT_BURST + 3):
        await asyncio.wait_for(a.submit([append()]), 5)
    assert len(store.puts) == PUT_BURST + 3
    starts = budget.spent
    # A token bucket: the burst at once, then one object per 250 ms counted from the first
    # (the bucket refills from there; a late timer is made up by the next object's).
    assert starts[PUT_BURST - 1] - starts[0] < 0.2
    for k in range(PUT_BURST, len(starts)):
        assert starts[k] - starts[0] >= (k - PUT_BURST + 1) / 4 - 0.01


async def _until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.005)


async def _paced(a: Appender, every: float, seconds: float) -> list[float]:
    """Submit one small request every ``every`` seconds (on a fixed schedule, without
    waiting for answers, as a pipelining producer does) for ``seconds``; the latency of
    each, from submit to answer."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    pending: list[tuple[float, asyncio.Future[Any]]] = []
    i = 0
    while (due := start + i * every) < start + seconds:
        await asyncio.sleep(max(0.0, due - loop.time()))
        pending.append((loop.time(), a.submit([append()])))
        i += 1
    await asyncio.wait_for(asyncio.gather(*(future for _, future in pending)), 5)
    return [future.answered_at - sent for sent, future in pending]  # type: ignore[attr-defined]


def _timed(a: Appender) -> Appender:
    """Stamp each answer with the loop time it arrived at (future.answered_at)."""
    submit = a.submit

    def stamped(appends: list[PartitionAppend]) -> asyncio.Future[Any]:
        future = submit(appends)
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda f: setattr(f, "answered_at", loop.time()))
        return future

    a.submit = stamped  # type: ignore[method-assign]
    return a


def test_budget_writes_the_first_batch_after_a_quiet_period_at_once(
    run: Callable[[Any], None],
) -> None:
    run(_test_budget_writes_the_first_batch_after_a_quiet_period_at_once())


async def _test_budget_writes_the_first_batch_after_a_quiet_period_at_once() -> None:
    store = Store()
    a = _timed(appender(store, objects_per_second_max=5))
    # A busy stretch spends the budget ...
    await _paced(a, 0.01, 0.5)
    # ... a quiet period (one token's worth of refill) saves one up again ...
    await asyncio.sleep(1 / 5 + 0.05)
    loop = asyncio.get_running_loop()
    sent = loop.time()
    before = len(store.puts)
    # ... and the next batch is written at once: one PUT, not a budget's wait.
    await asyncio.wait_for(a.submit([append()]), 5)
    assert len(store.puts) == before + 1
    assert store.puts[-1][0] - sent < 0.1


def test_sustained_low_load_stays_within_the_put_budget(run: Callable[[Any], None]) -> None:
    run(_test_sustained_low_load_stays_within_the_put_budget())


async def _test_sustained_low_load_stays_within_the_put_budget() -> None:
    store = Store()
    a = _timed(appender(store, objects_per_second_max=5))
    seconds = 2.0
    latencies = await _paced(a, 0.02, seconds)  # 100 requests, 50 a second
    # At most the burst plus the rate over the time the PUTs spanned (about 12 objects),
    # where writing each request at once took 100.
    span = store.puts[-1][0] - store.puts[0][0]
    assert len(store.puts) <= PUT_BURST + 5 * span + 0.5 and len(store.puts) < 20
    # Nothing was lost or held back past one budget period (200 ms) and a little slack.
    assert sum(size for _, size in store.puts) == 100 * len(latencies)
    assert max(latencies) < 1 / 5 + 0.1


def test_explicit_zero_is_no_budget(run: Callable[[Any], None]) -> None:
    run(_test_explicit_zero_is_no_budget())


async def _test_explicit_zero_is_no_budget() -> None:
    config = BrokerConfig(object_store="s3", produce_objects_per_second_max="0")
    assert config.produce_objects_per_second == 0
    store = Store()
    a = _timed(appender(store, objects_per_second_max=config.produce_objects_per_second))
    latencies = await _paced(a, 0.02, 1.0)
    # Every request went out at once (the store answers at once), in its own object but
    # for those a late timer put in the same loop iteration: far past any 5/s budget.
    assert len(latencies) == 50 and len(store.puts) > 40
    assert max(latencies) < 0.1


def test_embedded_store_writes_at_once_by_default(run: Callable[[Any], None]) -> None:
    run(_test_embedded_store_writes_at_once_by_default())


async def _test_embedded_store_writes_at_once_by_default() -> None:
    config = BrokerConfig()  # object.store=local, produce.objects.per.second.max=auto
    assert config.produce_objects_per_second == 0
    store = Store()
    a = appender(store, objects_per_second_max=config.produce_objects_per_second)
    loop = asyncio.get_running_loop()
    for _ in range(10):  # a lone producer: one request, its answer, the next
        sent = loop.time()
        await asyncio.wait_for(a.submit([append()]), 5)
        assert store.puts[-1][0] - sent < 0.1
    assert len(store.puts) == 10


def test_a_full_buffer_is_written_whatever_the_budget(run: Callable[[Any], None]) -> None:
    run(_test_a_full_buffer_is_written_whatever_the_budget())


async def _test_a_full_buffer_is_written_whatever_the_budget() -> None:
    store = Store()
    a = appender(store, objects_per_second_max=1, buffer_max_bytes=1000)
    loop = asyncio.get_running_loop()
    sent = loop.time()
    # Saturation: every request fills the buffer. Holding them to one object a second
    # would hold acknowledgements back without bound; they go as they fill.
    futures = []
    for _ in range(5):
        futures.append(a.submit([append(1000)]))
        await asyncio.sleep(0.01)
    await asyncio.wait_for(asyncio.gather(*futures), 5)
    assert [size for _, size in store.puts] == [1000] * 5
    assert store.puts[-1][0] - sent < 0.5
    # A batch that does not fill the buffer still waits for the budget's next object.
    sent = loop.time()
    await asyncio.wait_for(a.submit([append()]), 5)
    assert store.puts[-1][0] - sent >= 0.5


@pytest.mark.parametrize(
    ("options", "budget"),
    [
        ({}, 0),  # embedded store: writes cost nothing
        ({"object.store": "s3"}, AUTO_S3_OBJECTS_PER_SECOND),
        # An operator's shorter interval stays the longest wait: 50 objects a second.
        ({"object.store": "s3", "produce.commit.interval.ms": "20"}, 50),
        ({"object.store": "s3", "produce.objects.per.second.max": "0"}, 0),
        ({"object.store": "s3", "produce.objects.per.second.max": "12"}, 12),
        ({"produce.objects.per.second.max": "3"}, 3),
    ],
)
def test_put_budget_resolution(options: dict[str, str], budget: int) -> None:
    assert load_config(options).produce_objects_per_second == budget


@pytest.mark.parametrize("value", ["-1", "five", "2.5", ""])
def test_a_bad_put_budget_is_a_config_error(value: str) -> None:
    with pytest.raises(ValueError, match=r"produce\.objects\.per\.second\.max must be auto"):
        load_config({"produce.objects.per.second.max": value})


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match=r"produce\.commit\.mode"):
        appender(Store(), commit_mode="sometimes")


def test_batches_of_one_loop_iteration_share_an_object(run: Callable[[Any], None]) -> None:
    async def scenario() -> None:
        store = Store()
        a = appender(store)
        both = [a.submit([append()]), a.submit([append()])]  # same iteration, idle broker
        await asyncio.wait_for(asyncio.gather(*both), 5)
        assert [size for _, size in store.puts] == [200]

    run(scenario())
