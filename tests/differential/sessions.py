"""The scripted sessions: each sends the same requests to whichever broker its Side talks to
and records the answers by label. A session creates only topics named after itself, so all of
them can share one Kafka and one Sluice per kind.

Setup steps (creating a topic, waiting for its leader, producing the data a fetch reads) go
through ``Side.request`` and are not compared; everything under test goes through
``Side.call``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from tests.e2e._batches import Record, build_batch, build_raw_batch, encode_record, with_bad_crc

from .compare import code
from .side import COORDINATOR_WARMING, TXN_COORDINATOR_WARMING, Side

# Fixed record timestamps, so the brokers' answers carry the same ones.
T0 = 1_700_000_000_000
UNKNOWN_TOPIC_ID = "7d5f6c1e-0000-4000-8000-00000000d1ff"
MAX_MESSAGE_BYTES = 1_048_588  # Kafka's default message.max.bytes (and Sluice's)

Session = Callable[[Side], None]
SESSIONS: dict[str, Session] = {}
# Sessions whose answers do not depend on the kind of topic (run against one Sluice only).
KIND_FREE: set[str] = set()
# Sessions against the secured pair (record.py): SASL/PLAIN logins and an authorizer on both
# sides; kind-free.
SECURE: set[str] = set()


def session(kind_free: bool = False, secure: bool = False) -> Callable[[Session], Session]:
    def register(fn: Session) -> Session:
        name = fn.__name__.removeprefix("s_")
        SESSIONS[name] = fn
        if kind_free or secure:
            KIND_FREE.add(name)
        if secure:
            SECURE.add(name)
        return fn

    return register


def batch(n: int, ts: int = T0, **kw: Any) -> bytes:
    return build_batch(
        [Record(f"k{i}".encode(), f"v{i}".encode()) for i in range(n)], base_timestamp_ms=ts, **kw
    )


def timed_batch(timestamps: list[int]) -> bytes:
    """One batch whose records carry these timestamps (first = base)."""
    base = timestamps[0]
    payload = b"".join(
        encode_record(Record(b"k", f"v{i}".encode()), i, ts - base)
        for i, ts in enumerate(timestamps)
    )
    return build_raw_batch(
        payload,
        records_count=len(timestamps),
        base_timestamp_ms=base,
        max_timestamp_ms=max(timestamps),
    )


def topic_spec(name: str, partitions: int = 1, rf: int = 1, **configs: str) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": rf,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()],
    }


# ---------------------------------------------------------------------------------------------


@session(kind_free=True)
def s_api_versions(s: Side) -> None:
    resp = s.request(
        "api_versions",
        {"client_software_name": "sluice-differential", "client_software_version": "1"},
        version=3,
    )
    # Recorded as a table by API name, so a missing API or version shows up under its name.
    from kio.schema.index import api_key_map

    table = {
        api_key_map.get(a["api_key"], str(a["api_key"])): [a["min_version"], a["max_version"]]
        for a in resp["api_keys"]
    }
    s.steps["api_versions v3"] = {
        "error_code": resp["error_code"],
        "throttle_time": resp["throttle_time"],
        "api_keys": table,
        "supported_features": {f["name"]: f for f in resp["supported_features"]},
        "finalized_features": {f["name"]: f for f in resp["finalized_features"]},
        "finalized_features_epoch": "<epoch>" if resp["finalized_features_epoch"] >= 0 else -1,
        "zk_migration_ready": resp["zk_migration_ready"],
    }


@session()
def s_metadata(s: Side) -> None:
    t = "metadata-known"
    s.create_topic(t, partitions=2)

    def md(label: str, topics: list[dict[str, Any]] | None, auto: bool = False) -> None:
        s.call(
            label,
            "metadata",
            {
                "topics": topics,
                "allow_auto_topic_creation": auto,
                "include_topic_authorized_operations": True,
            },
        )

    md("known topic", [{"name": t}])
    md("unknown topic, auto-create asked (off on both)", [{"name": "metadata-unknown"}], True)
    md("invalid topic name", [{"name": "bad/name"}])
    md("empty topic name", [{"name": ""}])
    md("known and unknown", [{"name": t}, {"name": "metadata-unknown2"}])
    md("no topics (brokers only)", [])
    md("unknown topic id", [{"topic_id": UNKNOWN_TOPIC_ID, "name": None}])
    md("duplicate name", [{"name": t}, {"name": t}])


@session()
def s_create_topics(s: Side) -> None:
    def create(label: str, *topics: dict[str, Any], validate_only: bool = False) -> None:
        s.call(
            label,
            "create_topics",
            {"topics": list(topics), "timeout": 30_000, "validate_only": validate_only},
        )

    create("valid, 3 partitions", topic_spec("create-ok", 3))
    create("duplicate of an existing topic", topic_spec("create-ok", 3))
    create("same name twice in one request", topic_spec("create-twice"), topic_spec("create-twice"))
    create("invalid name (space)", topic_spec("bad name"))
    create("invalid name (.)", topic_spec("."))
    create("invalid name (..)", topic_spec(".."))
    create("name of 249 characters (the maximum)", topic_spec("c" * 249))
    create("name of 250 characters", topic_spec("d" * 250))
    create("empty name", topic_spec(""))
    create("zero partitions", topic_spec("create-p0", 0))
    create("negative partitions (-2)", topic_spec("create-pneg", -2))
    create("broker-default partitions and RF (-1, -1)", topic_spec("create-defaults", -1, -1))
    create("replication factor 0", topic_spec("create-rf0", 1, 0))
    create("replication factor 3 on one broker", topic_spec("create-rf3", 1, 3))
    create("unknown config", topic_spec("create-badcfg", 1, 1, **{"no.such.config": "1"}))
    create("bad config value", topic_spec("create-badval", 1, 1, **{"retention.ms": "abc"}))
    create(
        "null config value",
        {**topic_spec("create-nullcfg"), "configs": [{"name": "retention.ms", "value": None}]},
    )
    create(
        "valid configs",
        topic_spec("create-cfg", 1, 1, **{"cleanup.policy": "compact", "retention.ms": "3600000"}),
    )
    create("validate_only, valid", topic_spec("create-validate", 2), validate_only=True)
    create("validate_only, invalid", topic_spec("create-validate-bad", 0), validate_only=True)
    s.call(
        "validate_only did not create",
        "metadata",
        {
            "topics": [{"name": "create-validate"}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    create(
        "manual assignment",
        {
            **topic_spec("create-assign", -1, -1),
            "assignments": [{"partition_index": 0, "broker_ids": [s.node_id()]}],
        },
    )
    create(
        "assignment to an unknown broker",
        {
            **topic_spec("create-assign-bad", -1, -1),
            "assignments": [{"partition_index": 0, "broker_ids": [4242]}],
        },
    )
    create("no topics", validate_only=False)


def _produce(
    s: Side,
    label: str,
    topic: str,
    partition: int,
    records: bytes | None,
    acks: int = -1,
    timeout: int = 10_000,
) -> Any:
    return s.call(
        label,
        "produce",
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": timeout,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
        expect_response=acks != 0,
    )


def _list_offsets(s: Side, label: str, topic: str, parts: list[tuple[int, int]], **kw: Any) -> Any:
    return s.call(
        label,
        "list_offsets",
        {
            "replica_id": -1,
            "isolation_level": kw.get("isolation_level", 0),
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "timestamp": ts,
                            "current_leader_epoch": kw.get("epoch", -1),
                        }
                        for p, ts in parts
                    ],
                }
            ],
        },
    )


@session()
def s_produce(s: Side) -> None:
    t = "produce"
    s.create_topic(t, partitions=2)
    _produce(s, "acks=-1", t, 0, batch(3))
    _produce(s, "acks=1", t, 0, batch(2, T0 + 1))
    _produce(s, "acks=0", t, 1, batch(2, T0 + 2), acks=0)
    _list_offsets(s, "end offsets after the three produces", t, [(0, -1), (1, -1)])
    _produce(s, "unknown topic", "produce-unknown", 0, batch(1))
    _produce(s, "unknown partition", t, 7, batch(1))
    _produce(s, "negative partition", t, -1, batch(1))
    big = build_batch([Record(None, b"x" * (MAX_MESSAGE_BYTES + 10))], base_timestamp_ms=T0)
    _produce(s, "batch over message.max.bytes", t, 0, big)
    _produce(s, "corrupt batch (bad CRC)", t, 0, with_bad_crc(batch(2)))
    _produce(s, "truncated batch", t, 0, batch(2)[:-5])
    _produce(s, "empty records", t, 0, b"")
    _produce(s, "null records", t, 0, None)
    _produce(s, "acks=2 (invalid)", t, 0, batch(1), acks=2)
    _produce(s, "timeout 0", t, 0, batch(1, T0 + 3), timeout=0)
    _produce(
        s,
        "idempotent batch from an unknown producer id",
        t,
        1,
        batch(1, T0 + 4, producer_id=424242, producer_epoch=0, base_sequence=0),
    )
    _produce(
        s,
        "idempotent batch, sequence gap from an unknown producer id",
        t,
        1,
        batch(1, T0 + 5, producer_id=434343, producer_epoch=0, base_sequence=5),
    )
    _produce(
        s,
        "timestamp -1 records",
        t,
        0,
        batch(1, -1),
    )
    _list_offsets(s, "end offsets at the end", t, [(0, -1), (1, -1)])


def _fetch(
    s: Side,
    label: str,
    topic_id: str,
    parts: list[dict[str, Any]],
    *,
    max_bytes: int = 1 << 20,
    max_wait: int = 100,
    isolation_level: int = 0,
) -> Any:
    return s.call(
        label,
        "fetch",
        {
            "max_wait": max_wait,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": isolation_level,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {"partition_max_bytes": 1 << 20, "current_leader_epoch": -1, **p}
                        for p in parts
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )


@session()
def s_fetch(s: Side) -> None:
    t = "fetch"
    s.create_topic(t, partitions=2)
    s.produce(t, 0, batch(5))
    s.produce(t, 0, batch(3, T0 + 100))
    tid = s.topic_id(t)
    _fetch(s, "from 0", tid, [{"partition": 0, "fetch_offset": 0}])
    _fetch(s, "from 3 (inside the first batch)", tid, [{"partition": 0, "fetch_offset": 3}])
    _fetch(s, "from 5 (second batch)", tid, [{"partition": 0, "fetch_offset": 5}])
    _fetch(s, "at the high watermark", tid, [{"partition": 0, "fetch_offset": 8}])
    _fetch(s, "past the high watermark", tid, [{"partition": 0, "fetch_offset": 9}])
    _fetch(s, "far out of range", tid, [{"partition": 0, "fetch_offset": 1000}])
    _fetch(s, "negative offset", tid, [{"partition": 0, "fetch_offset": -5}])
    _fetch(s, "empty partition", tid, [{"partition": 1, "fetch_offset": 0}])
    _fetch(
        s,
        "partition_max_bytes 1",
        tid,
        [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1}],
    )
    _fetch(s, "max_bytes 1", tid, [{"partition": 0, "fetch_offset": 0}], max_bytes=1)
    _fetch(
        s,
        "two partitions, max_bytes 1",
        tid,
        [{"partition": 0, "fetch_offset": 0}, {"partition": 1, "fetch_offset": 0}],
        max_bytes=1,
    )
    _fetch(s, "unknown topic id", UNKNOWN_TOPIC_ID, [{"partition": 0, "fetch_offset": 0}])
    _fetch(s, "unknown partition", tid, [{"partition": 9, "fetch_offset": 0}])
    _fetch(
        s,
        "leader epoch from the future",
        tid,
        [{"partition": 0, "fetch_offset": 0, "current_leader_epoch": 99}],
    )
    _fetch(s, "read_committed", tid, [{"partition": 0, "fetch_offset": 0}], isolation_level=1)
    _fetch(
        s,
        "last_fetched_epoch ahead (divergence check)",
        tid,
        [{"partition": 0, "fetch_offset": 8, "last_fetched_epoch": 5}],
    )


@session()
def s_list_offsets(s: Side) -> None:
    t = "list-offsets"
    s.create_topic(t, partitions=2)
    s.produce(t, 0, timed_batch([T0, T0 + 10, T0 + 5]))
    s.produce(t, 0, timed_batch([T0 + 20, T0 + 30]))
    _list_offsets(s, "earliest", t, [(0, -2), (1, -2)])
    _list_offsets(s, "latest", t, [(0, -1), (1, -1)])
    _list_offsets(s, "max timestamp", t, [(0, -3), (1, -3)])
    _list_offsets(s, "earliest local", t, [(0, -4), (1, -4)])
    _list_offsets(s, "by timestamp: exact", t, [(0, T0 + 10)])
    _list_offsets(s, "by timestamp: between records", t, [(0, T0 + 6)])
    _list_offsets(s, "by timestamp: before all", t, [(0, T0 - 1000)])
    _list_offsets(s, "by timestamp: after all", t, [(0, T0 + 1000)])
    _list_offsets(s, "by timestamp on an empty partition", t, [(1, T0)])
    _list_offsets(s, "unknown partition", t, [(5, -1)])
    _list_offsets(s, "unknown topic", "list-offsets-unknown", [(0, -1)])
    _list_offsets(s, "read_committed latest", t, [(0, -1)], isolation_level=1)
    _list_offsets(s, "leader epoch from the future", t, [(0, -1)], epoch=99)
    _list_offsets(s, "same partition twice", t, [(0, -1), (0, -2)])
    _list_offsets(s, "unknown special timestamp -7", t, [(0, -7)])


@session()
def s_describe_configs(s: Side) -> None:
    t = "describe-configs"
    s.create_topic(t, configs={"retention.ms": "86400000", "cleanup.policy": "compact"})

    def describe(label: str, rtype: int, name: str, keys: list[str] | None, docs: bool) -> None:
        s.call(
            label,
            "describe_configs",
            {
                "resources": [
                    {"resource_type": rtype, "resource_name": name, "configuration_keys": keys}
                ],
                "include_synonyms": True,
                "include_documentation": docs,
            },
        )

    describe("topic, all keys", 2, t, None, False)
    describe("topic, named keys", 2, t, ["retention.ms", "segment.bytes", "no.such.key"], True)
    describe("unknown topic", 2, "describe-configs-unknown", None, False)
    describe("invalid topic name", 2, "bad/name", None, False)
    describe(
        "this broker, named keys",
        4,
        str(s.node_id()),
        ["num.partitions", "log.retention.ms", "auto.create.topics.enable", "message.max.bytes"],
        False,
    )
    describe("unknown broker", 4, "4242", ["num.partitions"], False)
    describe("broker id not a number", 4, "abc", None, False)
    describe("unknown resource type", 99, "x", None, False)


def find_transaction_coordinator(s: Side, transactional_id: str) -> None:
    s.call(
        f"find the coordinator of {transactional_id[:20]!r}",
        "find_coordinator",
        {"key_type": 1, "coordinator_keys": [transactional_id]},
        until=lambda r: all(
            code(c["error_code"]) not in COORDINATOR_WARMING for c in r["coordinators"]
        ),
    )


@session(kind_free=True)
def s_find_coordinator(s: Side) -> None:
    def find(label: str, key_type: int, keys: list[str], until: Any = None) -> None:
        s.call(
            label, "find_coordinator", {"key_type": key_type, "coordinator_keys": keys}, until=until
        )

    def settled(resp: Any) -> bool:
        return all(code(c["error_code"]) not in COORDINATOR_WARMING for c in resp["coordinators"])

    find("group", 0, ["differential-group"], settled)
    find("transaction", 1, ["differential-txn"], settled)
    find("two groups", 0, ["g-a", "g-b"], settled)
    find("empty group id", 0, [""])
    find("unknown key type", 5, ["x"])
    find("no keys", 0, [])


@session(kind_free=True)
def s_init_producer_id(s: Side) -> None:
    def init(label: str, txn: str | None, timeout: int, until: Any = None, **kw: Any) -> None:
        s.call(
            label,
            "init_producer_id",
            {"transactional_id": txn, "transaction_timeout": timeout, **kw},
            until=until,
        )

    def settled(resp: Any) -> bool:
        return code(resp["error_code"]) not in TXN_COORDINATOR_WARMING

    # As a client does first: Kafka creates its transaction state topic on this, and
    # answers InitProducerId NOT_COORDINATOR until then (whichever session runs first).
    find_transaction_coordinator(s, "differential-txn-ok")
    init("idempotent (no transactional id)", None, -1, settled)
    init("idempotent with a timeout", None, 60_000, settled)
    init("transactional", "differential-txn-ok", 60_000, settled)
    init("transactional again (epoch bump)", "differential-txn-ok", 60_000, settled)
    init("transaction timeout 0", "differential-txn-zero", 0, settled)
    init("transaction timeout over the maximum", "differential-txn-big", 1_000_000_000, settled)
    init("empty transactional id", "", 60_000, settled)
    init(
        "unknown producer id and epoch given",
        None,
        -1,
        producer_id=987654,
        producer_epoch=3,
    )


@session()
def s_delete_topics(s: Side) -> None:
    s.create_topic("delete-me")
    s.create_topic("delete-me-by-id")
    tid = s.topic_id("delete-me-by-id")

    def delete(label: str, topics: list[dict[str, Any]]) -> None:
        s.call(label, "delete_topics", {"topics": topics, "timeout": 30_000})

    delete("by name", [{"name": "delete-me", "topic_id": str(uuid.UUID(int=0))}])
    delete("unknown name", [{"name": "delete-unknown", "topic_id": str(uuid.UUID(int=0))}])
    delete("by id", [{"name": None, "topic_id": tid}])
    delete("unknown id", [{"name": None, "topic_id": UNKNOWN_TOPIC_ID}])
    delete("invalid name", [{"name": "bad/name", "topic_id": str(uuid.UUID(int=0))}])
    delete("nothing", [])

    def gone(resp: Any) -> bool:
        return all(code(t["error_code"]) != 0 for t in resp["topics"])

    s.call(
        "metadata after the deletes",
        "metadata",
        {
            "topics": [{"name": "delete-me"}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        until=gone,
    )


I64_MAX = 2**63 - 1


@session()
def s_hostile_values(s: Side) -> None:
    """Extreme but well-formed values, one per request, on a topic with data."""
    t = "hostile"
    s.create_topic(t)
    s.produce(t, 0, batch(2))
    tid = s.topic_id(t)
    _fetch(s, "fetch offset i64 max", tid, [{"partition": 0, "fetch_offset": I64_MAX}])
    _fetch(
        s,
        "fetch partition_max_bytes 0",
        tid,
        [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 0}],
    )
    _fetch(s, "fetch max_bytes 0", tid, [{"partition": 0, "fetch_offset": 0}], max_bytes=0)
    _list_offsets(s, "list offsets timestamp i64 max", t, [(0, I64_MAX)])
    _list_offsets(s, "list offsets partition -1", t, [(-1, -1)])
    _produce(s, "produce to an empty topic name", "", 0, batch(1))
    _produce(s, "produce to a 250-character topic name", "h" * 250, 0, batch(1))
    s.call(
        "metadata for a 250-character name",
        "metadata",
        {
            "topics": [{"name": "m" * 250}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    s.call(
        "describe configs of an empty topic name",
        "describe_configs",
        {
            "resources": [{"resource_type": 2, "resource_name": "", "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    s.call(
        "delete an empty topic name",
        "delete_topics",
        {
            "topics": [{"name": "", "topic_id": "00000000-0000-0000-0000-000000000000"}],
            "timeout": 30_000,
        },
    )
    s.call(
        "create with a retention.ms that overflows a long",
        "create_topics",
        {
            "topics": [topic_spec("hostile-overflow", 1, 1, **{"retention.ms": "9" * 30})],
            "timeout": 30_000,
            "validate_only": True,
        },
    )
    s.call(
        "create with an unknown and a valid config, validate_only",
        "create_topics",
        {
            "topics": [
                topic_spec("hostile-many", 1, 1, **{"no.such": "1", "retention.ms": "1000"})
            ],
            "timeout": 30_000,
            "validate_only": True,
        },
    )
    s.call(
        "find coordinator for a 10,000-character group id",
        "find_coordinator",
        {"key_type": 0, "coordinator_keys": ["g" * 10_000]},
        until=lambda r: all(
            code(c["error_code"]) not in COORDINATOR_WARMING for c in r["coordinators"]
        ),
    )
    find_transaction_coordinator(s, "x" * 1000)
    s.call(
        "init producer id for a 1,000-character transactional id",
        "init_producer_id",
        {"transactional_id": "x" * 1000, "transaction_timeout": 60_000},
        until=lambda r: code(r["error_code"]) not in TXN_COORDINATOR_WARMING,
    )


@session()
def s_idempotent_produce(s: Side) -> None:
    """An idempotent producer's sequence rules: a retried batch is a duplicate (acknowledged
    with its first offsets, stored once), a gap or an old epoch is refused."""
    t = "idempotent"
    s.create_topic(t)
    init = s.call(
        "init producer id",
        "init_producer_id",
        {"transactional_id": None, "transaction_timeout": -1},
        until=lambda r: code(r["error_code"]) not in COORDINATOR_WARMING,
    )
    pid, epoch = init["producer_id"], init["producer_epoch"]

    def idem(label: str, seq: int, n: int = 2, ep: int = epoch, ts: int = T0) -> None:
        _produce(
            s,
            label,
            t,
            0,
            batch(n, ts, producer_id=pid, producer_epoch=ep, base_sequence=seq),
        )

    idem("sequence 0", 0)
    idem("sequence 2", 2, ts=T0 + 1)
    idem("retry of sequence 2 (duplicate)", 2, ts=T0 + 1)
    idem("retry of sequence 0 (older duplicate)", 0)
    idem("sequence gap (6 after 3)", 6, ts=T0 + 2)
    idem("sequence 4 with an epoch from the future", 4, ep=epoch + 5, ts=T0 + 3)
    idem("sequence 4", 4, ts=T0 + 4)
    _list_offsets(s, "end offset: duplicates stored once", t, [(0, -1)])
    tid = s.topic_id(t)
    _fetch(s, "fetch everything", tid, [{"partition": 0, "fetch_offset": 0}])


@session()
def s_log_start_and_epochs(s: Side) -> None:
    """DeleteRecords moves the log start; OffsetForLeaderEpoch answers end offsets by epoch."""
    t = "log-start"
    s.create_topic(t, partitions=2)
    s.produce(t, 0, batch(5))

    def delete(label: str, parts: list[tuple[int, int]], topic: str = t) -> None:
        s.call(
            label,
            "delete_records",
            {
                "topics": [
                    {
                        "name": topic,
                        "partitions": [{"partition_index": p, "offset": o} for p, o in parts],
                    }
                ],
                "timeout": 10_000,
            },
        )

    delete("delete records before 2", [(0, 2)])
    delete("delete records before 1 (behind the log start)", [(0, 1)])
    delete("delete records beyond the high watermark", [(0, 9)])
    delete("delete records up to the high watermark (-1)", [(1, -1)])
    delete("delete records of an unknown partition", [(7, 0)])
    delete("delete records of an unknown topic", [(0, 0)], "log-start-unknown")
    _list_offsets(s, "earliest after the delete", t, [(0, -2), (1, -2)])
    _fetch(s, "fetch below the log start", s.topic_id(t), [{"partition": 0, "fetch_offset": 0}])

    def epochs(label: str, parts: list[dict[str, int]], topic: str = t) -> None:
        s.call(
            label,
            "offset_for_leader_epoch",
            {"replica_id": -1, "topics": [{"topic": topic, "partitions": parts}]},
        )

    epochs("end offset of epoch 0", [{"partition": 0, "leader_epoch": 0}])
    epochs("end offset of an epoch from the future", [{"partition": 0, "leader_epoch": 7}])
    epochs("end offset of epoch -1", [{"partition": 0, "leader_epoch": -1}])
    epochs(
        "current leader epoch from the future",
        [{"partition": 0, "leader_epoch": 0, "current_leader_epoch": 9}],
    )
    epochs("unknown partition", [{"partition": 7, "leader_epoch": 0}])
    epochs("unknown topic", [{"partition": 0, "leader_epoch": 0}], "log-start-unknown")


@session()
def s_create_partitions(s: Side) -> None:
    t = "partitions"
    s.create_topic(t)

    def grow(label: str, count: int, topic: str = t, validate_only: bool = False) -> None:
        s.call(
            label,
            "create_partitions",
            {
                "topics": [{"name": topic, "count": count, "assignments": None}],
                "timeout": 30_000,
                "validate_only": validate_only,
            },
        )

    grow("1 to 3, validate only", 3, validate_only=True)
    grow("1 to 3", 3)
    grow("3 to 3 (same count)", 3)
    grow("3 to 2 (fewer)", 2)
    grow("to 0", 0)
    grow("unknown topic", 2, "partitions-unknown")
    s.wait_leaders(t, 3)
    s.call(
        "metadata after growing",
        "metadata",
        {
            "topics": [{"name": t}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


@session(kind_free=True)
def s_describe_cluster(s: Side) -> None:
    s.call(
        "describe cluster with authorized operations",
        "describe_cluster",
        {"include_cluster_authorized_operations": True, "endpoint_type": 1},
    )
    s.call(
        "describe cluster without",
        "describe_cluster",
        {"include_cluster_authorized_operations": False, "endpoint_type": 1},
    )


@session()
def s_consumer_group_heartbeat(s: Side) -> None:
    """KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe: a member joins, gets every
    partition, heartbeats, leaves; the errors Kafka answers for bad epochs, unknown members
    and groups, bad requests."""
    t = "kip848-topic"
    s.create_topic(t, partitions=2)
    topic_id = s.topic_id(t)
    group = "kip848-group"
    s.call(
        "find the group's coordinator",
        "find_coordinator",
        {"key_type": 0, "coordinator_keys": [group]},
        until=lambda r: all(
            code(c["error_code"]) not in COORDINATOR_WARMING for c in r["coordinators"]
        ),
    )

    def beat(label: str, **fields: Any) -> Any:
        body = {
            "group_id": group,
            "member_id": "member-1",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": -1,
            "subscribed_topic_names": None,
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": None,
            **fields,
        }
        return s.call(
            label,
            "consumer_group_heartbeat",
            body,
            # Kafka answers NOT_COORDINATOR until it loaded the group's partition.
            until=lambda r: code(r["error_code"]) not in TXN_COORDINATOR_WARMING,
        )

    join = {"rebalance_timeout": 30_000, "subscribed_topic_names": [t], "topic_partitions": []}
    epoch = beat("join", **join)["member_epoch"]
    owned = [{"topic_id": topic_id, "partitions": [0, 1]}]
    beat("heartbeat with the owned partitions", member_epoch=epoch, topic_partitions=owned)
    beat("heartbeat, nothing changed", member_epoch=epoch)
    beat("an epoch from the future", member_epoch=epoch + 5, topic_partitions=owned)
    beat("an older epoch", member_epoch=epoch - 1, topic_partitions=owned)
    beat("unknown member", member_id="member-x", member_epoch=epoch)
    beat("unknown group", group_id="kip848-none", member_epoch=1)
    beat("unknown server assignor", member_id="member-2", server_assignor="nope", **join)
    beat("empty member id", member_id="", **join)
    beat("join without a subscription", member_id="member-2", rebalance_timeout=30_000,
         topic_partitions=[])  # fmt: skip
    beat("join with owned partitions", member_id="member-2", rebalance_timeout=30_000,
         subscribed_topic_names=[t], topic_partitions=owned)  # fmt: skip
    beat("invalid member epoch", member_id="member-2", member_epoch=-3)
    beat("an invalid regex", member_id="member-2", rebalance_timeout=30_000,
         subscribed_topic_regex="(", topic_partitions=[])  # fmt: skip
    second = beat("a second member joins", member_id="member-2", **join)["member_epoch"]
    beat("the first is asked to revoke", member_epoch=epoch, topic_partitions=owned)
    beat("the second waits for the partition", member_id="member-2", member_epoch=second,
         topic_partitions=[])  # fmt: skip
    s.call(
        "describe the group",
        "consumer_group_describe",
        {"group_ids": [group, "kip848-none"], "include_authorized_operations": False},
    )
    beat("the second leaves", member_id="member-2", member_epoch=-1)
    beat("leave", member_epoch=-1)
    beat("leave again", member_epoch=-1)
    s.call(
        "describe the emptied group",
        "consumer_group_describe",
        {"group_ids": [group], "include_authorized_operations": False},
    )
