"""The leader epoch cache and the truncation point of a returning replica (KIP-101/279)."""

from __future__ import annotations

from pathlib import Path

from storage.classic.epoch_cache import EpochCache, truncation_point


def cache(tmp_path: Path, name: str, *entries: tuple[int, int]) -> EpochCache:
    c = EpochCache(str(tmp_path / name))
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def test_assign_keeps_one_history_and_persists(tmp_path: Path) -> None:
    c = cache(tmp_path, "c", (1, 0), (3, 10), (5, 20))
    c.assign(5, 25)  # the same epoch again: nothing new
    assert c.entries == [(1, 0), (3, 10), (5, 20)]
    # A newer epoch starting before an existing entry overrides what it contradicts.
    c.assign(6, 15)
    assert c.entries == [(1, 0), (3, 10), (6, 15)]
    assert EpochCache(str(tmp_path / "c")).entries == [(1, 0), (3, 10), (6, 15)]
    text = (tmp_path / "c").read_text().split("\n")
    assert text[:2] == ["0", "3"] and text[2] == "1 0"  # Kafka's checkpoint format


def test_end_offset_for_answers_offset_for_leader_epoch(tmp_path: Path) -> None:
    c = cache(tmp_path, "c", (1, 0), (3, 10), (5, 20))
    assert c.end_offset_for(5, 30) == (5, 30)  # the latest epoch ends at the log end
    assert c.end_offset_for(3, 30) == (3, 20)
    assert c.end_offset_for(4, 30) == (3, 20)  # unknown: the largest epoch below it
    assert c.end_offset_for(2, 30) == (1, 10)
    assert c.end_offset_for(0, 30) == (0, 0)  # older than all: ended where the first began
    assert c.end_offset_for(6, 30) == (-1, -1)  # newer than any known
    assert EpochCache(str(tmp_path / "empty")).end_offset_for(1, 5) == (-1, -1)


def test_truncation_from_either_end(tmp_path: Path) -> None:
    c = cache(tmp_path, "c", (1, 0), (3, 10), (5, 20))
    c.truncate_from_end(15)
    assert c.entries == [(1, 0), (3, 10)]
    c.truncate_from_start(12)
    assert c.entries == [(3, 12)]
    c.truncate_from_end(12)
    assert c.entries == []


def _ask(leader: EpochCache, leader_end: int):  # type: ignore[no-untyped-def]
    asked: list[int] = []

    def ask(epoch: int) -> tuple[int, int]:
        asked.append(epoch)
        return leader.end_offset_for(epoch, leader_end)

    return ask, asked


def test_kip101_a_replica_keeps_records_beyond_its_high_watermark(tmp_path: Path) -> None:
    # Leader and follower both wrote m0, m1 in epoch 0; the follower's high watermark was
    # still 1 when it restarted. Truncating to it would lose m1 if it became leader next.
    leader = cache(tmp_path, "l", (0, 0))
    follower = cache(tmp_path, "f", (0, 0))
    ask, asked = _ask(leader, 2)
    assert truncation_point(follower, 2, 1, ask) == 2
    assert asked == [0]


def test_kip101_a_divergent_tail_is_cut(tmp_path: Path) -> None:
    # A had m0, m1 (epoch 0); B only m0. Both crashed, B came back as leader in epoch 1 and
    # wrote m2 at offset 1. A returns: its m1 never made it and must go.
    leader_b = cache(tmp_path, "b", (0, 0), (1, 1))
    follower_a = cache(tmp_path, "a", (0, 0))
    ask, _ = _ask(leader_b, 2)
    assert truncation_point(follower_a, 2, 1, ask) == 1


def test_kip279_several_rounds_when_the_follower_lacks_the_leaders_epochs(tmp_path: Path) -> None:
    # Leader: epoch 0 [0, 3), epoch 1 [3, 6), epoch 3 [6, 10). The follower led epoch 0 on
    # to offset 5, then wrote epoch 2 from 5 (never replicated). Round 1: epoch 2 -> leader
    # says (1, 6); the follower has no epoch 1 (its largest not newer is 0). Round 2: epoch
    # 0 -> (0, 3): both agree only up to 3.
    leader = cache(tmp_path, "l", (0, 0), (1, 3), (3, 6))
    follower = cache(tmp_path, "f", (0, 0), (2, 5))
    ask, asked = _ask(leader, 10)
    assert truncation_point(follower, 8, 2, ask) == 3
    assert asked == [2, 0]


def test_a_follower_behind_keeps_everything(tmp_path: Path) -> None:
    leader = cache(tmp_path, "l", (0, 0), (2, 50))
    follower = cache(tmp_path, "f", (0, 0))
    ask, _ = _ask(leader, 80)
    assert truncation_point(follower, 30, 10, ask) == 30  # a prefix already: nothing to cut


def test_without_epochs_only_the_high_watermark_is_trusted(tmp_path: Path) -> None:
    leader = EpochCache(str(tmp_path / "l"))
    follower = cache(tmp_path, "f", (0, 0))
    ask, _ = _ask(leader, 5)
    assert truncation_point(follower, 9, 4, ask) == 4
    empty = EpochCache(str(tmp_path / "e"))
    assert truncation_point(empty, 9, 4, ask) == 4
