"""What a transactional producer's own debug log (librdkafka ``debug=eos,msg``, written to
its worker's ``<name>.out``) says about a fatal error: whether the client itself caused it.

The one cause recognised: librdkafka (2.x, transactions without KIP-890 part 2's epoch bump
per transaction) gives the sequence numbers of records it purged on ``abort_transaction()``
to the next transaction's records ("advancing epoch base msgid ... due to N message(s) in
aborted transaction"), also when a request carrying them had failed with an unknown outcome
(``MsgPossiblyPersisted``: a lost connection, a timeout, NOT_ENOUGH_REPLICAS_AFTER_APPEND;
or NOT_LEADER_OR_FOLLOWER, which Kafka also answers to a batch it had appended).
When that request was in fact written, the broker holds those sequence numbers already, and
the new transaction's first request in that partition reuses them with other records: Kafka
answers OUT_OF_ORDER_SEQUENCE_NUMBER (or, when the batch happens to have the same range,
DUPLICATE: then the checker sees a committed transaction missing records), and librdkafka,
whose next expected sequence it is, calls it a fatal "sequence desynchronization". Sluice
answers exactly as Kafka 4.x does (tests/differential session ``txn_sequence_reused``), so such a
fatal error is reported, not counted as a broker violation, but only with that evidence in the
client's own log; every other fatal error still is one.

The duplicate case is recognised too: a request delivered with sequence numbers an abort's
purge had reused (``FatalCauses.reused_delivered``). When the purged records had been written,
the broker answered the new batch as their duplicate (Kafka 4.x alike: the same differential
session) and wrote nothing: the transaction commits without those records. The checker puts
a committed transaction missing exactly such a batch's records in a partition down to the
client (``explain_missing``).

The second: an abort answered INVALID_TXN_STATE. librdkafka sends EndTxn(abort) whenever it
sent an AddPartitionsToTxn in the transaction, even one the coordinator refused (it counts any
error as "maybe received"); when none was registered, the coordinator still holds the previous
transaction, and after a commit Kafka answers an abort INVALID_TXN_STATE (CompleteCommit; the
differential session ``txn_end_states`` compares it), which librdkafka makes fatal. Explained
when, since the transaction began, no partition was registered and the one before committed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

# "%7|1796630124.810|PRODUCE|rdkafka#producer-1| [thrd:...]: ...: <topic> [<p>]: Produce
# MessageSet with <n> message(s) (<b> bytes, ApiVersion 10, MsgVersion 2, MsgId <id>, BaseSeq
# <seq>, PID{...}, ...)"
_PRODUCE = re.compile(
    r"\|PRODUCE\|(?P<client>[^|]+)\|.*?: (?P<topic>\S+) \[(?P<p>\d+)\]: Produce MessageSet "
    r"with (?P<n>\d+) message\(s\) \(.*?MsgId (?P<msgid>\d+), BaseSeq (?P<seq>-?\d+), "
    r"PID\{Id:(?P<pid>\d+),Epoch:(?P<epoch>\d+)\}"
)
# "...: <topic> [<p>]: MessageSet with <n> message(s) (MsgId <id>, BaseSeq <seq>) delivered"
_DELIVERED = re.compile(
    r"\|MSGSET\|(?P<client>[^|]+)\|.*?: (?P<topic>\S+) \[(?P<p>\d+)\]: MessageSet with "
    r"(?P<n>\d+) message\(s\) \(MsgId (?P<msgid>\d+), BaseSeq (?P<seq>-?\d+)\) delivered"
)
_ADVBASE = re.compile(
    r"\|ADVBASE\|(?P<client>[^|]+)\|.*?: (?P<topic>\S+) \[(?P<p>\d+)\] advancing epoch base "
    r"msgid to \d+ due to \d+ message\(s\) in aborted transaction"
)
# A new producer id or epoch starts the partition's sequence numbers again at 0.
_NEWPID = re.compile(r"\|NEWPID\|(?P<client>[^|]+)\|.*?: (?P<topic>\S+) \[(?P<p>\d+)\] changed PID")
# The refused request as librdkafka names it, in its log and in the error the app is told.
_DESYNC = (
    r"ProduceRequest for (?P<topic>\S+) \[(?P<p>\d+)\] with (?P<n>\d+) message\(s\) failed due "
    r"to sequence desynchronization with broker \d+ \(PID\{[^}]*\}, base seq (?P<seq>\d+)"
)
_FATAL = re.compile(r"\|TXNERR\|(?P<client>[^|]+)\|.*Fatal transaction error: " + _DESYNC)

_END_REFUSED = re.compile(
    r"\|ENDTXN\|(?P<client>[^|]+)\|.*EndTxn returned INVALID_TXN_STATE in state "
    r"AbortingTransaction"
)
_INVALID_END = "Failed to end transaction: Broker: Producer attempted a transactional operation"

Key = tuple[str, str, int]  # (client instance, topic, partition)


@dataclass
class _Client:
    registered: bool = False  # a partition registered since the transaction began
    committed_before: bool = False  # the transaction before it committed
    end_refused: bool = False  # its abort was answered INVALID_TXN_STATE


@dataclass
class _Partition:
    # msgid -> the sequence number it was sent with, for records sent in a request and not
    # (yet) acknowledged: whatever the answer said, the broker may hold them
    sent: dict[int, int] = field(default_factory=dict)
    # sequence numbers of such records that a purge on abort gave to later records
    reused: set[int] = field(default_factory=set)
    # first msgid of a request -> the (producer id, epoch) it was last sent with
    pids: dict[int, tuple[int, int]] = field(default_factory=dict)


class Reused(NamedTuple):
    topic: str
    partition: int
    records: int
    producer_id: int
    epoch: int
    base_sequence: int


@dataclass
class FatalCauses:
    reused_sequences: list[str] = field(default_factory=list)  # the fatal lines, explained
    # fatal INVALID_TXN_STATE ends of an abort of a transaction the coordinator never saw
    unregistered_aborts: int = 0
    unexplained: list[str] = field(default_factory=list)
    # Each request delivered with sequence numbers an abort's purge reused: answered as a
    # duplicate of the purged records if they had been written (the checker looks).
    reused_delivered: list[Reused] = field(default_factory=list)


def classify(lines: Iterable[str]) -> FatalCauses:
    """Each fatal "sequence desynchronization" line in one worker's log (an instance may
    log several at once; the application is told one of them), explained as the client's
    own reuse of sequence numbers or not. Explained when the refused batch starts within,
    or right after, the sequence numbers an abort's purge reused in that partition, with no
    newer epoch since: a reused number the broker had is answered as a duplicate of the old
    record (Kafka then keeps the KIP-890 verification's lowest sequence and refuses the
    next batch), and a batch overlapping them is out of order."""
    state: dict[Key, _Partition] = {}
    clients: dict[str, _Client] = {}
    out = FatalCauses()
    for line in lines:
        if "|TXNSTATE|" in line or "|TXNCOMPLETE|" in line or "|ADDPARTS|" in line:
            _follow_transaction(line, clients)
        if "|ENDTXN|" in line:
            m = _END_REFUSED.search(line)
            if m is not None:
                clients.setdefault(m["client"], _Client()).end_refused = True
        if "|PRODUCE|" in line:
            m = _PRODUCE.search(line)
            if m is not None:
                p = state.setdefault(_key(m), _Partition())
                first, seq = int(m["msgid"]), int(m["seq"])
                for i in range(int(m["n"])):
                    p.sent[first + i] = seq + i
                p.pids[first] = (int(m["pid"]), int(m["epoch"]))
        elif "|MSGSET|" in line:
            m = _DELIVERED.search(line)
            if m is not None:
                p = state.setdefault(_key(m), _Partition())
                first, seq, n = int(m["msgid"]), int(m["seq"]), int(m["n"])
                for i in range(n):
                    p.sent.pop(first + i, None)
                pid, epoch = p.pids.pop(first, (-1, -1))
                if p.reused and all(seq + i in p.reused for i in range(n)):
                    out.reused_delivered.append(Reused(m["topic"], int(m["p"]), n, pid, epoch, seq))
        elif "|ADVBASE|" in line:
            m = _ADVBASE.search(line)
            if m is not None:
                p = state.setdefault(_key(m), _Partition())
                p.reused.update(p.sent.values())
                p.sent.clear()  # purged: never sent again
        elif "|NEWPID|" in line:
            m = _NEWPID.search(line)
            if m is not None:
                state[_key(m)] = _Partition()
        elif "|TXNERR|" in line:
            if "Fatal transaction error" in line and _INVALID_END in line:
                client = clients.get(line.split("|")[3], _Client())
                if client.end_refused and client.committed_before and not client.registered:
                    out.unregistered_aborts += 1
                else:
                    out.unexplained.append(line.strip())
                continue
            m = _FATAL.search(line)
            if m is None:
                continue
            reused = state.get(_key(m), _Partition()).reused
            seq = int(m["seq"])
            explained = bool(reused) and min(reused) <= seq <= max(reused) + 1
            (out.reused_sequences if explained else out.unexplained).append(line.strip())
    return out


def _follow_transaction(line: str, clients: dict[str, _Client]) -> None:
    client = clients.setdefault(line.split("|")[3], _Client())
    if "Transaction state change Ready -> InTransaction" in line:
        client.registered = False
        client.end_refused = False
    elif "registered with transaction" in line:
        client.registered = True
    elif "Transaction successfully committed" in line:
        client.committed_before = True
    elif "Transaction successfully aborted" in line:
        client.committed_before = False


def classify_files(paths: Iterable[Path]) -> dict[str, FatalCauses]:
    """Per worker (a log's name without .out), its fatal errors' causes."""
    out = {}
    for path in paths:
        with open(path, errors="replace") as f:
            out[path.stem] = classify(f)
    return out


def _key(m: re.Match[str]) -> Key:
    return (m["client"], m["topic"], int(m["p"]))


_REQUEST = re.compile(_DESYNC)


def split_fatals(fatals: list[str], causes: dict[str, FatalCauses]) -> tuple[list[str], list[str]]:
    """The workers' fatal errors (the ledger's, "HH:MM:SS <worker>: <error>") split into
    (explained by the client's own doing, the rest): a sequence error when its request,
    producer id, epoch and base sequence are those of a fatal line its worker's log
    explained; an INVALID_TXN_STATE end as many times as its worker's log explained one."""
    explained: list[str] = []
    rest: list[str] = []
    keys = {
        worker: {m.group(0) for line in c.reused_sequences if (m := _REQUEST.search(line))}
        for worker, c in causes.items()
    }
    aborts = {worker: c.unregistered_aborts for worker, c in causes.items()}
    for fatal in fatals:
        worker = fatal.split(" ", 2)[1].rstrip(":") if fatal.count(" ") >= 2 else ""
        m = _REQUEST.search(fatal)
        if m is not None and m.group(0) in keys.get(worker, ()):
            explained.append(fatal)
        elif "INVALID_TXN_STATE" in fatal and _INVALID_END in fatal and aborts.get(worker):
            aborts[worker] -= 1
            explained.append(fatal)
        else:
            rest.append(fatal)
    return explained, rest


def explain_missing(
    missing: list[tuple[str, str, list[int], int]],
    causes: dict[str, FatalCauses],
    duplicated: Callable[[Reused], str | None],
    outcomes: dict[str, str],
) -> tuple[list[str], list[str]]:
    """Committed transactions missing records, (key, topic, read count per record, the
    topic's partitions), split into (the client's doing, the rest).

    The worker writes record i of a transaction to partition i % partitions. A transaction
    is the client's doing when, in each partition where it misses records, it misses all of
    them, and its worker's log shows a request delivered there with reused sequence numbers
    carrying as many records, whose producer id, epoch and sequence numbers are those of a
    batch in the partition's log (``duplicated``: the key of the transaction that batch's
    records belong to, or None) of an earlier transaction of the same worker that was not
    committed, with none committed between the two: the batch the abort's purge left
    behind, which the broker answered the new request as a duplicate of."""
    left = {worker: list(c.reused_delivered) for worker, c in causes.items()}
    explained: list[str] = []
    rest: list[str] = []
    for key, topic, counts, partitions in missing:
        worker, number = key.rsplit("/", 1)
        events = left.get(worker, [])
        per: dict[int, list[int]] = {}
        for i, c in enumerate(counts):
            per.setdefault(i % partitions, []).append(c)
        short = {p: len(cs) for p, cs in per.items() if 0 in cs}

        def left_behind(e: Reused, worker: str = worker, number: str = number) -> bool:
            old = duplicated(e)
            if old is None or old.rsplit("/", 1)[0] != worker:
                return False
            first = int(old.rsplit("/", 1)[1])
            if not first < int(number) or outcomes.get(old) == "committed":
                return False
            between = (f"{worker}/{j}" for j in range(first + 1, int(number)))
            return all(outcomes.get(k) != "committed" for k in between)

        found: list[Reused] = []
        for p, n in sorted(short.items()):
            if any(per[p]):
                break  # only part of the partition's records missing: not this
            match = next(
                (
                    e
                    for e in events
                    if (e.topic, e.partition, e.records) == (topic, p, n)
                    and e not in found
                    and left_behind(e)
                ),
                None,
            )
            if match is None:
                break
            found.append(match)
        if short and len(found) == len(short):
            for e in found:
                events.remove(e)
            explained.append(key)
        else:
            rest.append(key)
    return explained, rest
