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


def test_followers_and_a_full_cache_fetch_without_a_session() -> None:
    cache = FetchSessionCache(max_partitions=3)
    assert cache.open(request(0, 0, {"t": [(0, 0)]}), by_id=False, replica=True).session_id == 0
    big = cache.open(request(0, 0, {"t": [(i, 0) for i in range(4)]}), by_id=False, replica=False)
    assert big.session_id == 0 and len(read(big)) == 4  # over the bound: sessionless
    first = cache.open(request(0, 0, {"t": [(0, 0), (1, 0)]}), by_id=False, replica=False)
    second = cache.open(request(0, 0, {"u": [(0, 0), (1, 0)]}), by_id=False, replica=False)
    assert first.session_id and second.session_id
    # Over three partitions in all: the least recently used session is evicted.
    assert len(cache) == 1
    evicted = cache.open(request(first.session_id, 1, {}), by_id=False, replica=False)
    assert evicted.error == ErrorCode.fetch_session_id_not_found
