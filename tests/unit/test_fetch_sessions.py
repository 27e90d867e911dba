"""KIP-227 incremental fetch sessions (broker/fetch/fetch_sessions.py), as Kafka's FetchSession:
opening on epoch 0, the next epochs adding, updating and forgetting partitions, the errors a
client recovers from, answers only about what changed, and the cache's bound."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.fetch.fetch_sessions import FetchSessionCache


def request(
    session_id: int,
    epoch: int,
    parts: dict[str, list[tuple[int, int]]],
    forgotten: dict[str, list[int]] | None = None,
) -> Any:
    return SimpleNamespace(
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            SimpleNamespace(
                topic=name,
                partitions=[
                    SimpleNamespace(partition=i, fetch_offset=o, partition_max_bytes=1000)
                    for i, o in ps
                ],
            )
            for name, ps in parts.items()
        ],
        forgotten_topics_data=[
            SimpleNamespace(topic=name, partitions=ps) for name, ps in (forgotten or {}).items()
        ],
    )


def read(view: Any) -> dict[tuple[str, int], int]:
    return {(t.topic, p.partition): p.fetch_offset for t in view.topics for p in t.partitions}


def entry(index: int, hw: int = 10, records: bytes = b"", error: int = 0) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": error,
        "high_watermark": hw,
        "last_stable_offset": hw,
        "log_start_offset": 0,
        "records": records,
        "preferred_read_replica": -1,
    }


def test_a_session_reads_all_its_partitions_and_answers_what_changed() -> None:
    cache = FetchSessionCache()
    full = cache.open(request(0, 0, {"t": [(0, 5), (1, 7)]}), by_id=False, replica=False)
    assert full.error == 0 and full.session_id > 0 and not full.incremental
    assert read(full) == {("t", 0): 5, ("t", 1): 7}
    assert full.include("t", entry(0)) and full.include("t", entry(1))  # a full answer

    # Epoch 1 names only what moved; the session still reads both partitions.
    nxt = cache.open(request(full.session_id, 1, {"t": [(0, 9)]}), by_id=False, replica=False)
    assert nxt.incremental and read(nxt) == {("t", 0): 9, ("t", 1): 7}
    assert nxt.include("t", entry(0, records=b"x"))  # records: answered
    assert not nxt.include("t", entry(1))  # nothing new: left out
    assert nxt.include("t", entry(1, hw=11))  # a moved high watermark: answered
    assert nxt.include("t", entry(1, hw=11, error=int(ErrorCode.not_leader_or_follower)))

    # Epoch 2 forgets one and adds another topic's partition.
    third = cache.open(
        request(full.session_id, 2, {"u": [(0, 0)]}, forgotten={"t": [1]}),
        by_id=False,
        replica=False,
    )
    assert read(third) == {("t", 0): 9, ("u", 0): 0}


def test_the_errors_a_client_recovers_from() -> None:
    cache = FetchSessionCache()
    full = cache.open(request(0, 0, {"t": [(0, 0)]}), by_id=False, replica=False)
    missing = cache.open(request(12345, 1, {}), by_id=False, replica=False)
    assert missing.error == ErrorCode.fetch_session_id_not_found
    stale = cache.open(request(full.session_id, 5, {}), by_id=False, replica=False)
    assert stale.error == ErrorCode.invalid_fetch_session_epoch
    # A full fetch naming the session closes it (FINAL: no new one).
    closing = cache.open(request(full.session_id, -1, {"t": [(0, 0)]}), by_id=False, replica=False)
    assert closing.session_id == 0 and read(closing) == {("t", 0): 0} and len(cache) == 0
    gone = cache.open(request(full.session_id, 1, {}), by_id=False, replica=False)
    assert gone.error == ErrorCode.fetch_session_id_not_found


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def opened(cache: FetchSessionCache, topic: str, size: int) -> int:
    view = cache.open(request(0, 0, {topic: [(i, 0) for i in range(size)]}), False, False)
    assert len(read(view)) == size  # read whole, with a session or without
    return view.session_id


def test_followers_fetch_without_a_session() -> None:
    cache = FetchSessionCache()
    assert cache.open(request(0, 0, {"t": [(0, 0)]}), by_id=False, replica=True).session_id == 0
    assert len(cache) == 0


def test_the_cache_counts_sessions_not_partitions() -> None:
    # Kafka's max.incremental.fetch.session.cache.slots is a number of sessions: a consumer
    # of 5,000 partitions gets one from the default cache (Sluice counted partitions: 1000
    # in all, so such a consumer fetched fully every time).
    cache = FetchSessionCache()
    assert opened(cache, "t", 5000)
    assert (
        FetchSessionCache(max_sessions=0)
        .open(request(0, 0, {"t": [(0, 0)]}), by_id=False, replica=False)
        .session_id
        == 0
    )


def test_a_full_cache_evicts_as_kafka() -> None:
    clock = Clock()
    cache = FetchSessionCache(max_sessions=2, eviction_s=120, clock=clock)
    small = opened(cache, "a", 2)
    big = opened(cache, "b", 10)
    assert small and big and len(cache) == 2
    # Full, both recently created and used: no session, not even for a bigger consumer.
    assert opened(cache, "c", 50) == 0
    # Older than the eviction time but both used lately: a bigger session takes the
    # smallest one's place; one no bigger than the smallest gets none.
    clock.now += 121
    for sid in (small, big):
        epoch = 1
        assert not cache.open(request(sid, epoch, {}), False, False).error
    assert opened(cache, "d", 2) == 0
    bigger = opened(cache, "d", 3)
    assert bigger and len(cache) == 2
    gone = cache.open(request(small, 2, {}), by_id=False, replica=False)
    assert gone.error == ErrorCode.fetch_session_id_not_found
    # A session unused for the eviction time goes first, whatever its size.
    clock.now += 60
    assert not cache.open(request(bigger, 1, {}), False, False).error
    clock.now += 61  # big: unused for 121 s, the least recently used
    assert opened(cache, "e", 1)
    assert (
        cache.open(request(big, 2, {}), False, False).error == ErrorCode.fetch_session_id_not_found
    )
    assert not cache.open(request(bigger, 2, {}), False, False).error
