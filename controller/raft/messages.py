"""Raft data types and the wire encoding of messages between voters.

Everything here is plain data: log entries, the hard state a node must persist, snapshots and
the five message kinds. The encoding is our own struct-packed binary format (never pickle: the
port is reachable by whoever can route to it, and decoding must not run code).

Frame payload layout (all integers big-endian)::

    u8 version (=1) | u8 type | u64 term | i32 src | i32 dst | type-specific fields

Byte strings are u32-length-prefixed. Decoding checks every length against the buffer, so a
malformed frame raises ``DecodeError`` rather than reading past its end.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

NO_NODE = -1  # "nobody": no vote cast, leader unknown (node ids are >= 0, as Kafka's are)


class EntryKind(IntEnum):
    DATA = 0  # a proposal of the application
    NOOP = 1  # appended by every new leader: only entries of the current term commit by
    #          counting replicas, so a new leader needs one of its own to commit older ones


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    data: bytes = b""
    kind: EntryKind = EntryKind.DATA


@dataclass(frozen=True, slots=True)
class HardState:
    """What a node must have on disk before it answers: its term and vote (a vote forgotten by
    a crash could be cast twice in one term) and, as a hint for fast restarts, the commit index
    (not needed for safety; a stale value only means re-learning it from the leader)."""

    term: int = 0
    vote: int = NO_NODE
    commit: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state machine's state after applying every entry up to ``index`` (of ``term``)."""

    index: int
    term: int
    voters: tuple[int, ...]
    data: bytes


# --- messages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoteRequest:
    term: int  # for a pre-vote: the term the sender would campaign in (its term + 1)
    src: int
    dst: int
    last_index: int
    last_term: int
    pre: bool


@dataclass(frozen=True, slots=True)
class VoteResponse:
    term: int  # granted: the request's term; refused: the responder's own term
    src: int
    dst: int
    granted: bool
    pre: bool


@dataclass(frozen=True, slots=True)
class AppendRequest:
    term: int
    src: int
    dst: int
    prev_index: int
    prev_term: int
    commit: int
    # The leader's read-index round when it sent this; echoed in the response so that a
    # quorum of answers proves the leader was still leader after a read arrived.
    seq: int
    entries: tuple[Entry, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class AppendResponse:
    term: int
    src: int
    dst: int
    success: bool
    # success: the follower's log matches the leader's up to ``index``.
    # refusal: ``index`` is the prev_index refused; hint_* is where the leader should look
    # next (the follower's last entry at or below prev_index with term <= prev_term).
    index: int
    hint_index: int
    hint_term: int
    seq: int


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    term: int
    src: int
    dst: int
    seq: int
    snapshot: Snapshot


Message = VoteRequest | VoteResponse | AppendRequest | AppendResponse | SnapshotRequest


class NotLeader(Exception):
    """This node is not the leader; ``leader`` is its best guess of who is (NO_NODE: unknown)."""

    def __init__(self, leader: int = NO_NODE, term: int = 0, message: str | None = None) -> None:
        self.leader = leader
        self.term = term
        super().__init__(message or f"not the leader (leader hint {leader}, term {term})")


class ProposalDropped(NotLeader):
    """The proposal will never commit: another entry was committed at its index (its leader
    was deposed before replicating it). Safe to retry on the current leader."""


class CommitUnknown(Exception):
    """The outcome of a proposal cannot be known here (e.g. a snapshot jumped over its index
    and does not tell whose entry it holds). Retry only if the entry is idempotent."""


# --- encoding -------------------------------------------------------------------------------

VERSION = 1
_T_VOTE_REQ, _T_VOTE_RESP, _T_APPEND_REQ, _T_APPEND_RESP, _T_SNAP_REQ = 1, 2, 3, 4, 5

_HEAD = struct.Struct(">BBQii")
_VOTE_REQ = struct.Struct(">QQ?")
_VOTE_RESP = struct.Struct(">??")
_APPEND_REQ = struct.Struct(">QQQQI")
_ENTRY = struct.Struct(">QBI")
_APPEND_RESP = struct.Struct(">?QQQQ")
_SNAP_REQ = struct.Struct(">QQQH")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


class DecodeError(ValueError):
    pass


def encode(msg: Message) -> list[bytes]:
    """Encode ``msg`` as a list of chunks (entry payloads and snapshot data are not copied)."""
    match msg:
        case VoteRequest():
            head = _HEAD.pack(VERSION, _T_VOTE_REQ, msg.term, msg.src, msg.dst)
            return [head + _VOTE_REQ.pack(msg.last_index, msg.last_term, msg.pre)]
        case VoteResponse():
            head = _HEAD.pack(VERSION, _T_VOTE_RESP, msg.term, msg.src, msg.dst)
            return [head + _VOTE_RESP.pack(msg.granted, msg.pre)]
        case AppendRequest():
            out = [
                _HEAD.pack(VERSION, _T_APPEND_REQ, msg.term, msg.src, msg.dst)
                + _APPEND_REQ.pack(
                    msg.prev_index, msg.prev_term, msg.commit, msg.seq, len(msg.entries)
                )
            ]
            out.extend(encode_entries(msg.entries))
            return out
        case AppendResponse():
            head = _HEAD.pack(VERSION, _T_APPEND_RESP, msg.term, msg.src, msg.dst)
            body = _APPEND_RESP.pack(msg.success, msg.index, msg.hint_index, msg.hint_term, msg.seq)
            return [head + body]
        case SnapshotRequest():
            snap = msg.snapshot
            return [
                _HEAD.pack(VERSION, _T_SNAP_REQ, msg.term, msg.src, msg.dst)
                + _SNAP_REQ.pack(msg.seq, snap.index, snap.term, len(snap.voters))
                + b"".join(_I32.pack(v) for v in snap.voters)
                + _U32.pack(len(snap.data)),
                snap.data,
            ]
    raise TypeError(f"not a raft message: {msg!r}")


def encode_entries(entries: tuple[Entry, ...] | list[Entry]) -> list[bytes]:
    """Entries without their indexes (consecutive; the container gives the first)."""
    out: list[bytes] = []
    for e in entries:
        out.append(_ENTRY.pack(e.term, e.kind, len(e.data)))
        if e.data:
            out.append(e.data)
    return out


def decode_entries(
    buf: memoryview, pos: int, first_index: int, count: int
) -> tuple[list[Entry], int]:
    entries: list[Entry] = []
    for i in range(count):
        if pos + _ENTRY.size > len(buf):
            raise DecodeError("truncated entry header")
        term, kind, size = _ENTRY.unpack_from(buf, pos)
        pos += _ENTRY.size
        if pos + size > len(buf):
            raise DecodeError("truncated entry data")
        try:
            entry_kind = EntryKind(kind)
        except ValueError:
            raise DecodeError(f"unknown entry kind {kind}") from None
        entries.append(Entry(first_index + i, term, bytes(buf[pos : pos + size]), entry_kind))
        pos += size
    return entries, pos


def decode(payload: bytes | memoryview) -> Message:
    buf = memoryview(payload)
    try:
        msg, end = _decode(buf)
    except struct.error as exc:
        raise DecodeError(str(exc)) from None
    if end != len(buf):
        raise DecodeError(f"{len(buf) - end} trailing bytes")
    return msg


def _decode(buf: memoryview) -> tuple[Message, int]:
    version, kind, term, src, dst = _HEAD.unpack_from(buf, 0)
    if version != VERSION:
        raise DecodeError(f"unsupported raft message version {version}")
    pos = _HEAD.size
    if kind == _T_VOTE_REQ:
        last_index, last_term, pre = _VOTE_REQ.unpack_from(buf, pos)
        return VoteRequest(term, src, dst, last_index, last_term, pre), pos + _VOTE_REQ.size
    if kind == _T_VOTE_RESP:
        granted, pre = _VOTE_RESP.unpack_from(buf, pos)
        return VoteResponse(term, src, dst, granted, pre), pos + _VOTE_RESP.size
    if kind == _T_APPEND_REQ:
        prev_index, prev_term, commit, seq, count = _APPEND_REQ.unpack_from(buf, pos)
        pos += _APPEND_REQ.size
        # Each entry takes at least its header: reject absurd counts before looping.
        if count * _ENTRY.size > len(buf) - pos:
            raise DecodeError(f"entry count {count} exceeds the frame")
        entries, pos = decode_entries(buf, pos, prev_index + 1, count)
        msg = AppendRequest(term, src, dst, prev_index, prev_term, commit, seq, tuple(entries))
        return msg, pos
    if kind == _T_APPEND_RESP:
        success, index, hint_index, hint_term, seq = _APPEND_RESP.unpack_from(buf, pos)
        msg = AppendResponse(term, src, dst, success, index, hint_index, hint_term, seq)
        return msg, pos + _APPEND_RESP.size
    if kind == _T_SNAP_REQ:
        seq, index, snap_term, nvoters = _SNAP_REQ.unpack_from(buf, pos)
        pos += _SNAP_REQ.size
        voters = tuple(_I32.unpack_from(buf, pos + 4 * i)[0] for i in range(nvoters))
        pos += 4 * nvoters
        (size,) = _U32.unpack_from(buf, pos)
        pos += 4
        if pos + size > len(buf):
            raise DecodeError("truncated snapshot data")
        data = bytes(buf[pos : pos + size])
        snap = Snapshot(index, snap_term, voters, data)
        return SnapshotRequest(term, src, dst, seq, snap), pos + size
    raise DecodeError(f"unknown raft message type {kind}")
