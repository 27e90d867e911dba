"""Durable Raft storage in one directory: an append-only log file and a snapshot file.

``raft.log`` is a sequence of records, each ``u32 length | u32 crc32c(payload) | payload``;
the payload is a type byte and a body:

* HEADER (first record): magic, format version, and the base (index, term) the log starts after;
* HARD_STATE: term, vote, commit;
* ENTRIES: first index, then entries; an ENTRIES record replaces any stored entries from its
  first index on (a follower's conflicting suffix is cut this way, never in place).

Appends are written with one ``write`` and made durable with ``fdatasync`` *before* ``save``
returns, and the driver only answers peers after that. After a crash the tail may be torn or
hold garbage (a power loss can persist later blocks of unsynced writes and not earlier ones):
recovery keeps records up to the first bad one (short, zero length, CRC mismatch) and truncates
the file there. Only unacknowledged data can be in that tail.

Compaction and snapshot installation rewrite the log: the new file is written beside it,
fsynced, renamed over it, and the directory fsynced. ``snapshot`` is replaced the same way,
*before* the log is rewritten; ``PersistentState.reconcile`` handles a crash between the two.

``membership.json`` records the node id and the voter set the directory was created for, so a
node started with another voter set refuses to start (see the package docstring for how an
operator changes it).
"""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path

from crc32c import crc32c

from controller.raft.core import Ready
from controller.raft.log import PersistentState
from controller.raft.messages import (
    NO_NODE,
    DecodeError,
    Entry,
    HardState,
    Snapshot,
    decode_entries,
    encode_entries,
)
from storage.durable import fsync_dir, write_all

log = logging.getLogger(__name__)

LOG_FILE = "raft.log"
SNAPSHOT_FILE = "snapshot"
MEMBERSHIP_FILE = "membership.json"

_LOG_MAGIC = b"SLRL"
_SNAP_MAGIC = b"SLRS"
_FORMAT = 1

_T_HEADER, _T_HARD_STATE, _T_ENTRIES = 1, 2, 3

_FRAME = struct.Struct(">II")
_HEADER = struct.Struct(">B4sHQQ")
_HARD_STATE = struct.Struct(">BQqQ")
_ENTRIES = struct.Struct(">BQI")
_SNAP_HEAD = struct.Struct(">4sHQQH")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_MAX_RECORD = 1 << 31


class StorageError(Exception):
    """The directory holds something this code must not guess about (corruption, other
    cluster's data, a voter set that differs from the configuration)."""


def _frame(payload: list[bytes]) -> list[bytes]:
    body = b"".join(payload)
    return [_FRAME.pack(len(body), crc32c(body)), body]


def _atomic_write(path: Path, chunks: list[bytes]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_all(fd, chunks)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)  # without it a power loss may forget the rename


def _hard_state_record(hs: HardState) -> list[bytes]:
    return _frame([_HARD_STATE.pack(_T_HARD_STATE, hs.term, hs.vote, hs.commit)])


def _entries_record(entries: list[Entry]) -> list[bytes]:
    head = _ENTRIES.pack(_T_ENTRIES, entries[0].index, len(entries))
    return _frame([head, *encode_entries(entries)])


def encode_snapshot(snap: Snapshot) -> list[bytes]:
    head = _SNAP_HEAD.pack(_SNAP_MAGIC, _FORMAT, snap.index, snap.term, len(snap.voters))
    head += b"".join(_I32.pack(v) for v in snap.voters) + _U64.pack(len(snap.data))
    crc = crc32c(snap.data, crc32c(head))
    return [head, snap.data, _U32.pack(crc)]


def decode_snapshot(data: bytes) -> Snapshot:
    try:
        magic, fmt, index, term, nvoters = _SNAP_HEAD.unpack_from(data, 0)
        if magic != _SNAP_MAGIC or fmt != _FORMAT:
            raise StorageError(f"not a snapshot file (magic {magic!r}, format {fmt})")
        pos = _SNAP_HEAD.size
        voters = tuple(_I32.unpack_from(data, pos + 4 * i)[0] for i in range(nvoters))
        pos += 4 * nvoters
        (size,) = _U64.unpack_from(data, pos)
        pos += 8
        if pos + size + 4 != len(data):
            raise StorageError("snapshot file has the wrong size")
        (crc,) = _U32.unpack_from(data, pos + size)
    except struct.error as exc:
        raise StorageError(f"truncated snapshot file: {exc}") from None
    if crc32c(data[: pos + size]) != crc:
        raise StorageError("snapshot file fails its checksum")
    return Snapshot(index, term, voters, data[pos : pos + size])


class DiskStorage:
    """Blocking file I/O; the asyncio node calls it from a worker thread."""

    def __init__(self, directory: str | Path, *, fsync: bool = True) -> None:
        self.dir = Path(directory)
        self._fsync = fsync  # False only for tests that do not care about power loss
        self._fd = -1
        self._hs = HardState()

    # --- start --------------------------------------------------------------------------------

    def open(self, node_id: int, voters: tuple[int, ...] | list[int]) -> PersistentState:
        """Load (creating on first use) and return what was persisted."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._check_membership(node_id, tuple(sorted(voters)))
        snap_path = self.dir / SNAPSHOT_FILE
        snapshot = decode_snapshot(snap_path.read_bytes()) if snap_path.exists() else None
        log_path = self.dir / LOG_FILE
        if not log_path.exists():
            _atomic_write(log_path, self._log_image(0, 0, HardState(), []))
        state, good_end = self._replay(log_path.read_bytes())
        state.snapshot = snapshot
        size = log_path.stat().st_size
        self._fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        if good_end < size:
            log.warning("raft log %s: dropping a torn tail of %d bytes", log_path, size - good_end)
            os.ftruncate(self._fd, good_end)
            os.fsync(self._fd)
        self._hs = state.hard_state
        # Not reconciled here: the core does it and then asks for the log to be rewritten.
        return state

    def _check_membership(self, node_id: int, voters: tuple[int, ...]) -> None:
        path = self.dir / MEMBERSHIP_FILE
        if not path.exists():
            write_membership(self.dir, node_id, voters)
            return
        stored = json.loads(path.read_text())
        if stored.get("node_id") != node_id or tuple(stored.get("voters", ())) != voters:
            raise StorageError(
                f"{self.dir} belongs to node {stored.get('node_id')} of voters "
                f"{stored.get('voters')}, not node {node_id} of {list(voters)}; to change the "
                "voter set follow the offline procedure in controller/raft/__init__.py"
            )

    @staticmethod
    def _replay(data: bytes) -> tuple[PersistentState, int]:
        """Parse the log file; returns the state and where its last good record ends."""
        view = memoryview(data)
        pos = 0
        state: PersistentState | None = None
        entries: list[Entry] = []
        while pos + _FRAME.size <= len(view):
            size, crc = _FRAME.unpack_from(view, pos)
            body_at = pos + _FRAME.size
            if size == 0 or size > _MAX_RECORD or body_at + size > len(view):
                break
            body = view[body_at : body_at + size]
            if crc32c(body) != crc:
                break
            kind = body[0]
            try:
                if kind == _T_HEADER:
                    _, magic, fmt, base_index, base_term = _HEADER.unpack_from(body, 0)
                    if magic != _LOG_MAGIC or fmt != _FORMAT or state is not None:
                        raise StorageError(f"bad raft log header at byte {pos}")
                    state = PersistentState(HardState(), None, base_index, base_term, [])
                elif state is None:
                    raise StorageError("raft log does not start with its header")
                elif kind == _T_HARD_STATE:
                    _, term, vote, commit = _HARD_STATE.unpack_from(body, 0)
                    state.hard_state = HardState(term, vote, commit)
                elif kind == _T_ENTRIES:
                    _, first, count = _ENTRIES.unpack_from(body, 0)
                    new, end = decode_entries(body, _ENTRIES.size, first, count)
                    if end != len(body):
                        raise StorageError(f"entries record at byte {pos} has trailing bytes")
                    last = state.base_index + len(entries)
                    if not state.base_index < first <= last + 1:
                        raise StorageError(f"entries from {first} do not follow {last}")
                    del entries[first - state.base_index - 1 :]
                    entries.extend(new)
                else:
                    raise StorageError(f"unknown raft log record type {kind} at byte {pos}")
            except (struct.error, DecodeError) as exc:
                # The CRC matched, so this is not a torn write but a format error.
                raise StorageError(f"malformed raft log record at byte {pos}: {exc}") from None
            pos = body_at + size
        if state is None:
            raise StorageError("raft log has no valid header")
        state.entries = entries
        return state, pos

    # --- writes -------------------------------------------------------------------------------

    def save(self, rd: Ready) -> None:
        """Persist what a Ready asks for; durable on return when it says so."""
        if rd.snapshot is not None:
            _atomic_write(self.dir / SNAPSHOT_FILE, encode_snapshot(rd.snapshot))
        hs = rd.hard_state or self._hs
        if rd.rewrite:
            os.close(self._fd)
            self._fd = -1
            path = self.dir / LOG_FILE
            _atomic_write(path, self._log_image(rd.base_index, rd.base_term, hs, rd.entries))
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        else:
            chunks: list[bytes] = []
            if rd.entries:
                chunks += _entries_record(rd.entries)
            if rd.hard_state is not None:
                chunks += _hard_state_record(rd.hard_state)
            if chunks:
                write_all(self._fd, chunks)
                if rd.must_sync and self._fsync:
                    os.fdatasync(self._fd)
        self._hs = hs

    @staticmethod
    def _log_image(
        base_index: int, base_term: int, hs: HardState, entries: list[Entry]
    ) -> list[bytes]:
        chunks = _frame([_HEADER.pack(_T_HEADER, _LOG_MAGIC, _FORMAT, base_index, base_term)])
        chunks += _hard_state_record(hs)
        if entries:
            chunks += _entries_record(entries)
        return chunks

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def write_membership(
    directory: str | Path, node_id: int, voters: tuple[int, ...] | list[int]
) -> None:
    """Record (or, in the offline replacement procedure, change) the voter set of a data
    directory. Only with every voter stopped: see the package docstring."""
    directory = Path(directory)
    body = {"node_id": node_id, "voters": sorted(voters)}
    _atomic_write(directory / MEMBERSHIP_FILE, [json.dumps(body).encode() + b"\n"])


def read_persisted(directory: str | Path) -> PersistentState:
    """What a node's data directory holds, read without writing anything (a torn tail is
    ignored, not truncated): safe while the node runs, since the log is only appended to
    or replaced whole (rename), so a read sees a prefix of one version of it."""
    directory = Path(directory)
    state, _ = DiskStorage._replay((directory / LOG_FILE).read_bytes())
    # The snapshot after the log: a log rewritten for a newer snapshot in between is then
    # reconciled with that snapshot, never an older snapshot with a newer log.
    snap_path = directory / SNAPSHOT_FILE
    state.snapshot = decode_snapshot(snap_path.read_bytes()) if snap_path.exists() else None
    return state.reconcile()


def read_voters(directory: str | Path) -> tuple[int, list[int]]:
    """(node id, voters) a data directory belongs to."""
    membership = json.loads((Path(directory) / MEMBERSHIP_FILE).read_text())
    return int(membership["node_id"]), [int(v) for v in membership["voters"]]


def inspect(directory: str | Path) -> dict[str, object]:
    """Read-only summary of a stopped node's data directory (for the operator procedure:
    which survivor has the most up-to-date log)."""
    directory = Path(directory)
    state = read_persisted(directory)
    snapshot = state.snapshot
    last_index = state.base_index + len(state.entries)
    last_term = state.entries[-1].term if state.entries else state.base_term
    membership = json.loads((directory / MEMBERSHIP_FILE).read_text())
    hs = state.hard_state
    return {
        "node_id": membership["node_id"],
        "voters": membership["voters"],
        "term": hs.term,
        "vote": None if hs.vote == NO_NODE else hs.vote,
        "commit": hs.commit,
        "last_index": last_index,
        "last_term": last_term,
        "snapshot_index": snapshot.index if snapshot else 0,
    }
