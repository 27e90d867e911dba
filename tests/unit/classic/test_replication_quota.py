"""Replication throttling's parts (broker/logs/classic/replication_quota.py): the measured
rate over Kafka's eleven one-second windows, and the throttled-replicas lists."""

from __future__ import annotations

from broker.logs.classic.replication_quota import (
    UNTHROTTLED,
    WINDOWS,
    ReplicationQuota,
    throttled,
)


def test_the_rate_is_measured_over_the_windows_and_forgets_old_ones() -> None:
    now = [100.0]
    quota = ReplicationQuota(lambda: 1000, clock=lambda: now[0])
    assert not quota.exceeded()
    quota.record(5000)  # one burst after a quiet time: spread over (WINDOWS - 1) s
    assert quota.measured() == 500.0 and not quota.exceeded()
    for _ in range(10):
        now[0] += 1.0
        quota.record(2000)
    assert quota.exceeded()  # 25 kB in ~10 s
    now[0] += WINDOWS + 1.0  # all windows expired
    assert quota.measured() == 0.0 and not quota.exceeded()


def test_no_bound_never_throttles() -> None:
    quota = ReplicationQuota(lambda: UNTHROTTLED)
    quota.record(10**12)
    assert not quota.exceeded()


def test_throttled_replica_lists() -> None:
    assert throttled("*", 3, 7)
    assert throttled("0:1,3:7", 3, 7) and not throttled("0:1,3:7", 3, 1)
    assert not throttled("0:1", 0, 2)
    assert not throttled(None, 0, 1) and not throttled("", 0, 1)
    assert throttled(" 0:1 , 2:3 ", 2, 3)
    assert not throttled("junk,0:x", 0, 1)  # an unreadable entry names nothing


def test_a_leader_over_its_rate_sends_a_catching_up_follower_nothing() -> None:
    """leader.replication.throttled.rate: over it, a throttled follower out of the ISR gets
    no records, yet its fetch position still counts (it could not rejoin the ISR
    otherwise); an in-sync follower is never throttled."""
    import tempfile
    from pathlib import Path
    from types import SimpleNamespace

    from broker.logs.classic.classic_log import ClassicSlot, read_classic
    from broker.logs.fetch_slots import FetchBudget

    from .test_partition import lead, partition, produce, records

    with tempfile.TemporaryDirectory() as tmp:
        p = partition(Path(tmp))
        lead(p, isr=(1, 2))  # 3 is catching up
        for _ in range(3):
            produce(p, records(5), acks=1)
        quota = ReplicationQuota(lambda: 1000)
        manager = SimpleNamespace(
            leader_quota=quota,
            throttles=lambda part, replica, as_leader: replica not in part.isr,
            check_isr=lambda part: None,
        )
        broker = SimpleNamespace(classic=manager, watch=SimpleNamespace(notify=lambda _c: None))

        def fetch(replica: int, offset: int) -> bytes:
            slot = ClassicSlot("t", 0)
            slot.classic, slot.offset, slot.replica, slot.max_bytes = p, offset, replica, 1 << 20
            read_classic(broker, slot, FetchBudget(1 << 20))  # type: ignore[arg-type]
            return bytes(slot.data)

        assert fetch(3, 0)  # under the rate: served, and counted
        assert quota.measured() > 0
        quota.record(10**6)  # over it now
        assert fetch(3, 5) == b""
        assert p.leader_state is not None and p.leader_state.progress[3].log_end_offset == 5
        assert fetch(2, 0)  # in the ISR: never throttled
        p.close()
