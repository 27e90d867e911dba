"""The checker: after every fault is healed, read every partition back from the beginning and
audit it against what the clients were told (the workload's Ledger).

Violations (any makes the run fail):
- acks=all: an acknowledged record not read back (lost), read more than once (duplicated), or
  read once at another offset than acknowledged (misplaced);
- transactions: a committed one not read exactly once by read_committed, an aborted one read
  at all, one read partially (atomicity), a transactional producer killed by a fatal error
  (unless its own debug log shows librdkafka caused it in a way Kafka answers alike:
  client_logs.py);
- the consumer group's committed offsets went backwards;
- the read_committed reader saw an offset twice or an aborted record;
- two replicas of a classic partition differ below the high watermark.
acks=1 loss and duplication are counted and reported, not violations: Kafka's contract allows
losing acks=1 records on a leader change, and a non-idempotent producer's retry may duplicate.
"""

from __future__ import annotations

import re
import struct
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from . import client_logs
from .workload import QUIET, Ledger, Topic, parse_value

# The read gives up when nothing new arrived for this long (a long run reads hundreds of
# thousands of records on a loaded machine: no fixed total would fit every run).
# A read-back that makes no progress this long fails. Generous: after a long run the logs
# hold a million records, and on a loaded machine brokers fenced by missed heartbeats or an
# object store slow to answer stall a reader for minutes before it can go on.
READ_STALL_S = 300.0


def read_all(
    bootstrap: str, topics: list[Topic], isolation: str
) -> dict[tuple[str, int], list[tuple[int, str | None]]]:
    """Every record of every partition, from the beginning to the end (the high watermark, or
    the last stable offset with read_committed): (topic, partition) -> [(offset, value)]."""
    consumer = Consumer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": f"nemesis-check-{isolation}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "auto.offset.reset": "error",
        }
    )
    tps = [(t.name, p) for t in topics for p in range(t.partitions)]
    high = {}
    for name, p in tps:
        high[(name, p)] = consumer.get_watermark_offsets(TopicPartition(name, p), 30)[1]
    consumer.assign([TopicPartition(n, p, OFFSET_BEGINNING) for n, p in tps])
    out: dict[tuple[str, int], list[tuple[int, str | None]]] = {tp: [] for tp in tps}
    at_end: set[tuple[str, int]] = set()
    deadline = time.monotonic() + READ_STALL_S
    try:
        while len(at_end) < len(tps):
            if time.monotonic() > deadline:
                missing = sorted(set(tps) - at_end)
                raise TimeoutError(f"{isolation} read did not reach the end of {missing}")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            key = (msg.topic(), msg.partition())
            if msg.error():
                # The end: past the high watermark seen at the start (read_committed stops at
                # the last stable offset, which is all it may ever read).
                if msg.error().code() == KafkaError._PARTITION_EOF and (
                    msg.offset() >= high[key] or isolation == "read_committed"
                ):
                    at_end.add(key)
                continue
            out[key].append((msg.offset(), parse_value(msg.value())))
            deadline = time.monotonic() + READ_STALL_S
    finally:
        consumer.close()
    return out


def _kind_of(topic: str, topics: list[Topic]) -> str:
    return next(t.kind for t in topics if t.name == topic)


def check_acks(
    ledger: Ledger, topics: list[Topic], data: dict[tuple[str, int], list[tuple[int, str | None]]]
) -> dict[str, Any]:
    where: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for (topic, p), records in data.items():
        for offset, value in records:
            if value is not None:
                where[value].append((topic, p, offset))
    result: dict[str, Any] = {}
    for label, acks in (("acks_all", ledger.acks_all), ("acks_1", ledger.acks_one)):
        per_kind: dict[str, Counter[str]] = defaultdict(Counter)
        examples: dict[str, list[str]] = defaultdict(list)
        for ack in acks:
            kind = _kind_of(ack.topic, topics)
            c = per_kind[kind]
            c["acked"] += 1
            seen = where.get(ack.value, [])
            if not seen:
                verdict = "lost"
            elif len(seen) > 1:
                verdict = "duplicated"
            elif ack.offset is None:
                # Acknowledged without an offset (librdkafka: the broker answered -1): read
                # once, which is all the client can check; reported, not a violation.
                verdict = "no_offset"
            elif seen[0] != (ack.topic, ack.partition, ack.offset):
                verdict = "misplaced"
            else:
                continue
            c[verdict] += 1
            if len(examples[f"{kind}/{verdict}"]) < 5:
                examples[f"{kind}/{verdict}"].append(
                    f"{ack.value} acked at {ack.topic}-{ack.partition}@{ack.offset}, read at {seen}"
                )
        result[label] = {
            k: {
                "acked": c["acked"],
                **{v: c[v] for v in ("lost", "duplicated", "misplaced", "no_offset")},
            }
            for k, c in sorted(per_kind.items())
        }
        result[label + "_examples"] = dict(examples)
    return result


def check_txns(
    ledger: Ledger,
    committed_read: dict[tuple[str, int], list[tuple[int, str | None]]],
    client_logs_dir: Path | None = None,
) -> dict[str, Any]:
    """``client_logs_dir``: where the transactional workers' librdkafka debug logs are; a
    fatal error they show the client caused itself (tests/nemesis/client_logs.py) is
    reported apart, not counted."""
    seen: Counter[str] = Counter()
    for records in committed_read.values():
        for _, value in records:
            if value is not None and value.startswith("txn/"):
                seen[value] += 1
    out: Counter[str] = Counter()
    examples: list[str] = []
    causes = (
        client_logs.classify_files(sorted(client_logs_dir.glob("*txn*.out")))
        if client_logs_dir is not None
        else {}
    )
    partitions: Counter[str] = Counter()
    for topic, partition in committed_read:
        partitions[topic] = max(partitions[topic], partition + 1)
    missing: list[tuple[str, str, list[int], int]] = []
    for key, (topic, outcome, values) in ledger.txns.items():
        out[outcome] += 1
        counts = [seen.get(v, 0) for v in values]
        visible = sum(1 for c in counts if c)
        problem = None
        if any(c > 1 for c in counts):
            problem = "duplicated"
        elif outcome == "committed" and visible != len(values):
            problem = "committed_missing"
            missing.append((key, topic, counts, partitions[topic] or 1))
        elif outcome == "aborted" and visible:
            problem = "aborted_visible"
        elif 0 < visible < len(values):
            problem = "partial"
        if problem:
            out[problem] += 1
            if len(examples) < 5:
                examples.append(f"{key} ({outcome}): {problem}, read counts {counts}")
    aborted = {v for _, o, vs in ledger.txns.values() if o == "aborted" for v in vs}
    live_aborted = sorted(v for v in ledger.reader_seen if v in aborted)
    fatal, client_caused = ledger.txn_fatal, []
    missing_client_caused: list[str] = []
    if client_logs_dir is not None:
        client_caused, fatal = client_logs.split_fatals(ledger.txn_fatal, causes)
        missing_client_caused, _ = client_logs.explain_missing(
            missing,
            causes,
            lambda r: _duplicated_batch(client_logs_dir.parent / "cluster", r),
            {key: outcome for key, (_t, outcome, _v) in ledger.txns.items()},
        )
        if missing_client_caused:
            out["committed_missing"] -= len(missing_client_caused)
            out["committed_missing_client_caused"] = len(missing_client_caused)
            if not out["committed_missing"]:
                del out["committed_missing"]
    return {
        "transactions": dict(out),
        "fatal_errors": len(fatal),
        "fatal_examples": fatal[:5],
        # librdkafka's own doing, which Kafka answers alike (client_logs.py): it gave purged,
        # possibly written records' sequence numbers to new records, or aborted a transaction
        # the coordinator never saw after a commit; shown, not a broker violation
        "fatal_client_caused": len(client_caused),
        "fatal_client_caused_examples": client_caused[:3],
        # the same reuse when the new batch had the purged one's range: answered as its
        # duplicate (Kafka alike), the committed transaction misses that batch's records
        "committed_missing_client_caused_examples": missing_client_caused[:3],
        "reader_saw_aborted": len(live_aborted),
        "examples": examples + live_aborted[:5],
    }


# ---------------------------------------------------------------------- replica logs

# A v2 batch's producer fields: producerId int64, producerEpoch int16, baseSequence int32,
# records count int32, after the 43 bytes of base offset .. max timestamp.
_PRODUCER = struct.Struct(">qhii")
_TXN_VALUE = re.compile(rb"txn/([^/\x00-\x1f]+/\d+)/\d+")


def _duplicated_batch(cluster: Path, r: client_logs.Reused) -> str | None:
    """The transaction (``<worker>/<n>``) whose records are in the batch of ``r``'s producer
    id and epoch that starts at its base sequence with as many records, in a replica's log of
    the partition (a classic one: diskless batches are in the object store, not looked at);
    None if there is no such batch."""
    want = (r.producer_id, r.epoch, r.base_sequence, r.records)
    for directory in sorted(cluster.glob(f"broker-*/data/{r.topic}-{r.partition}")):
        for data, pos, end in _batch_spans(directory):
            if end - pos >= 61 and _PRODUCER.unpack_from(data, pos + 43) == want:
                m = _TXN_VALUE.search(data, pos, end)
                return None if m is None else m.group(1).decode()
        return None  # one replica is enough: the replicas are compared apart
    return None


# A v2 record batch: baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic
# int8, crc uint32, attributes int16, lastOffsetDelta int32, ...
_HEAD = struct.Struct(">qiibIhi")


def _batch_spans(directory: Path) -> Iterator[tuple[bytes, int, int]]:
    """(segment bytes, start, end) of every complete batch in a partition directory, in
    segment and offset order."""
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + _HEAD.size <= len(data):
            length = _HEAD.unpack_from(data, pos)[1]
            if length <= 0 or pos + 12 + length > len(data):
                break  # the tail being written, or preallocated zeroes
            yield data, pos, pos + 12 + length
            pos += 12 + length


def batches(directory: Path) -> list[tuple[int, int, int]]:
    """(base offset, last offset, crc) of every complete batch in a partition directory."""
    out = []
    for data, pos, _end in _batch_spans(directory):
        base, _length, _epoch, _magic, crc, _attrs, last_delta = _HEAD.unpack_from(data, pos)
        out.append((base, base + last_delta, crc))
    return out


def check_replicas(
    data_dirs: dict[int, Path],
    replicas: dict[tuple[str, int], list[int]],
    high: dict[tuple[str, int], int],
    tiered: set[str],
) -> dict[str, Any]:
    """Every replica's batches below the high watermark are the same batches (offsets and CRC);
    a classic (not tiered) replica holds all of them from offset 0."""
    problems: list[str] = []
    compared = 0
    for (topic, p), nodes in sorted(replicas.items()):
        hw = high[(topic, p)]
        logs = {}
        for n in nodes:
            logs[n] = {b[0]: b for b in batches(data_dirs[n] / f"{topic}-{p}") if b[1] < hw}
        reference: dict[int, tuple[int, int, int]] = {}
        for n, bs in logs.items():
            for base, b in bs.items():
                if base in reference and reference[base] != b:
                    problems.append(f"{topic}-{p}: batch at {base} differs on broker {n}")
                reference.setdefault(base, b)
        compared += len(reference)
        if topic in tiered:
            continue
        for n, bs in logs.items():
            expect = 0
            for base in sorted(bs):
                if base != expect:
                    problems.append(f"{topic}-{p}: broker {n} has a gap/overlap at {expect}")
                    break
                expect = bs[base][1] + 1
            else:
                if expect < hw:
                    problems.append(f"{topic}-{p}: broker {n} holds up to {expect} of hw {hw}")
    return {"batches_compared": compared, "problems": problems[:20], "differ": len(problems)}


def check_joiners(
    ledger: Ledger, data: dict[tuple[str, int], list[tuple[int, str | None]]]
) -> dict[str, Any]:
    """Each group that joined during a migration read its partitions from their first
    record: below the highest offset it read, no record of the log was skipped (issue 31:
    a group started at the migration boundary and silently missed the classic part)."""
    groups: dict[str, Any] = {}
    skipped = 0
    examples: list[str] = []
    for group, partitions in sorted(ledger.joined.items()):
        read_total = 0
        for (topic, partition), offsets in sorted(partitions.items()):
            read = set(offsets)
            read_total += len(read)
            top = max(read)
            log = [o for o, _v in data.get((topic, partition), []) if o <= top]
            missing = [o for o in log if o not in read]
            if missing:
                skipped += len(missing)
                if len(examples) < 5:
                    examples.append(
                        f"{group} {topic}-{partition}: read up to {top}, skipped "
                        f"{len(missing)} (first {missing[:5]})"
                    )
        groups[group] = read_total
    return {"groups": groups, "skipped": skipped, "examples": examples}


def violations(summary: dict[str, Any]) -> list[str]:
    out = []
    for kind, c in summary["acks_all"].items():
        for verdict in ("lost", "duplicated", "misplaced"):
            if c[verdict]:
                out.append(f"acks=all {kind}: {c[verdict]} {verdict}")
    t = summary["txns"]
    for problem in ("duplicated", "committed_missing", "aborted_visible", "partial"):
        if t["transactions"].get(problem):
            out.append(f"transactions: {t['transactions'][problem]} {problem}")
    if t["fatal_errors"]:
        out.append(f"transactions: {t['fatal_errors']} fatal producer errors")
    if summary["producer_fatal"]:
        # An idempotent producer's fatal error (OUT_OF_ORDER_SEQUENCE_NUMBER: the broker lost
        # sequences it had acknowledged) ends it; Kafka never lets that happen without loss.
        out.append(f"idempotent producers: {len(summary['producer_fatal'])} fatal errors")
    if t["reader_saw_aborted"]:
        out.append(f"read_committed reader saw {t['reader_saw_aborted']} aborted records")
    if summary["group"]["regressions"]:
        out.append(f"group offsets went backwards {len(summary['group']['regressions'])} times")
    if summary["reader_regressions"]:
        out.append(f"reader offsets went backwards {len(summary['reader_regressions'])} times")
    if summary.get("not_healthy_at_end"):
        out.append(f"not healthy after healing: {summary['not_healthy_at_end']}")
    if summary.get("joiners", {}).get("skipped"):
        out.append(
            f"groups that joined during a migration skipped {summary['joiners']['skipped']} records"
        )
    if summary["replicas"]["differ"]:
        out.append(f"replica logs differ: {summary['replicas']['differ']} problems")
    return out
