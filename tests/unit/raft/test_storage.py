"""Raft disk storage: recovery of torn tails, fsync before returning, atomic snapshot/log
replacement, and the voter-set guard."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from controller.raft import admin
from controller.raft.core import RaftCore, Ready
from controller.raft.messages import Entry, EntryKind, HardState, Snapshot
from controller.raft.storage import (
    LOG_FILE,
    SNAPSHOT_FILE,
    DiskStorage,
    StorageError,
    inspect,
    write_membership,
)

VOTERS = (1, 2, 3)


def ready(
    entries: list[Entry] | None = None,
    hs: HardState | None = None,
    *,
    snapshot: Snapshot | None = None,
    rewrite: bool = False,
    base: tuple[int, int] = (0, 0),
    must_sync: bool = True,
) -> Ready:
    return Ready(
        hard_state=hs,
        snapshot=snapshot,
        restore=False,
        rewrite=rewrite,
        base_index=base[0],
        base_term=base[1],
        entries=entries or [],
        must_sync=must_sync,
        messages=[],
        committed=[],
    )


def entries(first: int, last: int, term: int) -> list[Entry]:
    return [Entry(i, term, b"d%d" % i) for i in range(first, last + 1)]


def reopen(path: Path) -> tuple[DiskStorage, object]:
    st = DiskStorage(path)
    return st, st.open(1, VOTERS)


def test_empty_directory_starts_empty(tmp_path: Path) -> None:
    st, state = reopen(tmp_path)
    assert state.hard_state == HardState() and state.entries == [] and state.snapshot is None
    st.close()
    assert json.loads((tmp_path / "membership.json").read_text()) == {
        "node_id": 1,
        "voters": [1, 2, 3],
    }


def test_entries_and_hard_state_survive_reopen_with_conflicts_cut(tmp_path: Path) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready(entries(1, 5, 1), HardState(1, 2, 0)))
    st.save(ready(entries(4, 6, 2), HardState(2, 3, 4)))  # a new leader replaced 4..5
    st.save(ready(hs=HardState(2, 3, 6), must_sync=False))
    st.close()
    st, state = reopen(tmp_path)
    want = [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (6, 2)]
    assert [(e.index, e.term) for e in state.entries] == want
    assert state.entries[5].data == b"d6"
    assert state.hard_state == HardState(2, 3, 6)
    st.close()


def test_kinds_and_empty_payloads_round_trip(tmp_path: Path) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready([Entry(1, 1, b"", EntryKind.NOOP), Entry(2, 1, b"x" * 70000)]))
    st.close()
    st, state = reopen(tmp_path)
    assert state.entries == [Entry(1, 1, b"", EntryKind.NOOP), Entry(2, 1, b"x" * 70000)]
    st.close()


@pytest.mark.parametrize("cut", [1, 4, 7, 8, 20, -1])
def test_torn_tail_is_truncated_at_the_last_whole_record(tmp_path: Path, cut: int) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready(entries(1, 3, 1), HardState(1, 1, 0)))
    st.close()
    good = (tmp_path / LOG_FILE).stat().st_size
    st, _ = reopen(tmp_path)
    st.save(ready(entries(4, 6, 1), HardState(1, 1, 3)))
    st.close()
    full = (tmp_path / LOG_FILE).read_bytes()
    # A crash in the middle of the second write: any prefix of it may have reached the disk.
    # cut -1 tears the hard-state record that followed the entries record.
    size = len(full) - 1 if cut == -1 else good + cut
    (tmp_path / LOG_FILE).write_bytes(full[:size])
    st, state = reopen(tmp_path)
    assert [e.index for e in state.entries] == ([1, 2, 3, 4, 5, 6] if cut == -1 else [1, 2, 3])
    assert state.hard_state == HardState(1, 1, 0)
    if cut != -1:
        assert (tmp_path / LOG_FILE).stat().st_size == good  # the tail is gone for good
    st.save(ready(entries(4, 4, 2), HardState(2, 1, 0)))  # and appends continue cleanly
    st.close()
    st, state = reopen(tmp_path)
    assert [(e.index, e.term) for e in state.entries][-1] == (4, 2)
    st.close()


def test_garbage_and_zeroed_tail_are_dropped(tmp_path: Path) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready(entries(1, 2, 1), HardState(1, 1, 0)))
    st.close()
    with open(tmp_path / LOG_FILE, "ab") as f:
        f.write(b"\0" * 4096)  # a power loss can leave a zero-filled extension
    st, state = reopen(tmp_path)
    assert [e.index for e in state.entries] == [1, 2]
    st.close()
    data = bytearray((tmp_path / LOG_FILE).read_bytes())
    data[-3] ^= 0xFF  # corrupt the last record: CRC mismatch
    (tmp_path / LOG_FILE).write_bytes(bytes(data))
    st, state = reopen(tmp_path)
    assert state.hard_state == HardState()  # the last record (entries) went with its bytes
    st.close()


def test_corrupt_header_is_an_error_not_a_torn_tail(tmp_path: Path) -> None:
    st, _ = reopen(tmp_path)
    st.close()
    data = bytearray((tmp_path / LOG_FILE).read_bytes())
    data[10] ^= 0xFF
    (tmp_path / LOG_FILE).write_bytes(bytes(data))
    with pytest.raises(StorageError):
        reopen(tmp_path)


def test_save_fsyncs_before_returning_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st, _ = reopen(tmp_path)
    calls: list[str] = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync
    log_size = lambda: (tmp_path / LOG_FILE).stat().st_size  # noqa: E731

    def fdatasync(fd: int) -> None:
        calls.append(f"fdatasync@{log_size()}")
        real_fdatasync(fd)

    def fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "fsync", fsync)
    st.save(ready(entries(1, 1, 1), HardState(1, 1, 0)))
    # the sync happened after the write, inside save()
    assert calls == [f"fdatasync@{log_size()}"]
    calls.clear()
    st.save(ready(hs=HardState(1, 1, 1), must_sync=False))  # a commit hint: no sync
    assert calls == []
    st.save(ready(snapshot=Snapshot(1, 1, VOTERS, b"s"), rewrite=True, base=(1, 1)))
    # snapshot file + its directory, then the new log file + the directory
    assert calls == ["fsync"] * 4
    st.close()


def test_snapshot_and_compaction_replace_files_atomically(tmp_path: Path) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready(entries(1, 10, 1), HardState(1, 1, 8)))
    snap = Snapshot(8, 1, VOTERS, b"state-at-8")
    st.save(ready(snapshot=snap, rewrite=True, base=(6, 1), entries=entries(7, 10, 1)))
    st.close()
    assert not list(tmp_path.glob("*.tmp"))
    st, state = reopen(tmp_path)
    assert state.snapshot == snap
    assert (state.base_index, state.base_term) == (6, 1)
    assert [e.index for e in state.entries] == [7, 8, 9, 10]
    assert state.hard_state == HardState(1, 1, 8)
    st.close()
    assert inspect(tmp_path)["snapshot_index"] == 8
    assert inspect(tmp_path)["last_index"] == 10


def test_crash_between_installed_snapshot_and_log_rewrite(tmp_path: Path) -> None:
    """A follower's log diverged; the leader's snapshot is written, then the crash comes
    before the log is rewritten: the old entries must not be kept after the snapshot."""
    st, _ = reopen(tmp_path)
    st.save(ready(entries(1, 6, 1), HardState(2, 1, 2)))
    st.close()
    from controller.raft.storage import _atomic_write, encode_snapshot

    _atomic_write(tmp_path / SNAPSHOT_FILE, encode_snapshot(Snapshot(5, 2, VOTERS, b"s")))
    st, state = reopen(tmp_path)
    core = RaftCore(1, VOTERS, state)
    assert (core.log.base_index, core.log.base_term, core.log.entries) == (5, 2, [])
    rd = core.ready()  # the first Ready replaces the set-aside log before anything is appended
    assert rd.rewrite and (rd.base_index, rd.entries) == (5, [])
    st.save(rd)
    core.advance(rd)
    st.save(ready([Entry(6, 3, b"new")], HardState(3, 2, 5)))
    st.close()
    st, state = reopen(tmp_path)
    assert (state.base_index, [e.index for e in state.entries]) == (5, [6])
    st.close()


def test_crash_between_local_snapshot_and_compaction_keeps_the_log(tmp_path: Path) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready(entries(1, 6, 1), HardState(1, 1, 5)))
    st.close()
    from controller.raft.storage import _atomic_write, encode_snapshot

    _atomic_write(tmp_path / SNAPSHOT_FILE, encode_snapshot(Snapshot(5, 1, VOTERS, b"s")))
    st, state = reopen(tmp_path)
    assert [e.index for e in state.entries] == [1, 2, 3, 4, 5, 6]
    st.close()


def test_corrupt_snapshot_refuses_to_start(tmp_path: Path) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready(snapshot=Snapshot(3, 1, VOTERS, b"abc"), rewrite=True, base=(3, 1)))
    st.close()
    data = bytearray((tmp_path / SNAPSHOT_FILE).read_bytes())
    data[-6] ^= 1
    (tmp_path / SNAPSHOT_FILE).write_bytes(bytes(data))
    with pytest.raises(StorageError, match="checksum"):
        reopen(tmp_path)


def test_other_voter_set_refuses_to_start_until_the_operator_changes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    st, _ = reopen(tmp_path)
    st.save(ready(entries(1, 2, 1), HardState(1, 1, 2)))
    st.close()
    with pytest.raises(StorageError, match="offline procedure"):
        DiskStorage(tmp_path).open(1, (1, 2, 4))
    with pytest.raises(StorageError):
        DiskStorage(tmp_path).open(2, VOTERS)
    assert admin.main(["set-voters", str(tmp_path), "--node-id", "1", "--voters", "1,2,4"]) == 0
    st = DiskStorage(tmp_path)
    assert [e.index for e in st.open(1, (1, 2, 4)).entries] == [1, 2]
    st.close()
    assert admin.main(["inspect", str(tmp_path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["voters"] == [1, 2, 4] and shown["last_index"] == 2 and shown["term"] == 1
    write_membership(tmp_path, 1, VOTERS)
