"""Sessions of the cluster administration APIs a Kafka broker forwards to its controller:
UnregisterBroker (``kafka-cluster unregister``), UpdateFeatures (``kafka-features
upgrade|downgrade|disable``), with what ApiVersions then finalizes, and DeleteTopics with no
time to act (timeout 0).

The feature session changes the cluster's transaction.version and sets it back to 2 (both
brokers' bootstrap level) before it ends, so the sessions after it see the level they
expect. No session unregisters the broker under test: both oracles are one broker.
"""

from __future__ import annotations

import time
from typing import Any

from .compare import code
from .sessions import UNKNOWN_TOPIC_ID, session, topic_spec
from .side import Side

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
TV = "transaction.version"
# Produce, EndTxn, TxnOffsetCommit: KIP-890 part 2's versions (transaction version 2).
TV2_APIS = {0: "produce", 26: "end_txn", 28: "txn_offset_commit"}
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@session(kind_free=True)
def s_unregister_broker(s: Side) -> None:
    s.call("an id never registered", "unregister_broker", {"broker_id": 9999})
    s.call("a negative id", "unregister_broker", {"broker_id": -1})


def _update(
    s: Side,
    label: str,
    updates: list[tuple[str, int, int]],
    *,
    validate_only: bool = False,
    version: int | None = None,
) -> Any:
    return s.call(
        label,
        "update_features",
        {
            "timeout": 30_000,
            "feature_updates": [
                {"feature": name, "max_version_level": level, "upgrade_type": kind}
                for name, level, kind in updates
            ],
            "validate_only": validate_only,
        },
        version=version,
    )


def _levels(s: Side, label: str, start: dict[str, Any] | None = None) -> dict[str, Any]:
    """ApiVersions v4 as far as transaction.version goes: its supported range, its finalized
    level (absent when disabled), EndTxn's range and whether transaction version 2's APIs
    (their ranges differ: Produce v13 is not served, known.py) kept the ranges of ``start``."""
    resp = s.request(
        "api_versions",
        {"client_software_name": "sluice-differential", "client_software_version": "1"},
        version=4,
    )
    supported = {f["name"]: f for f in resp["supported_features"]}
    finalized = {f["name"]: f for f in resp["finalized_features"]}
    ranges = {
        name: [a["min_version"], a["max_version"]]
        for a in resp["api_keys"]
        for key, name in TV2_APIS.items()
        if a["api_key"] == key
    }
    s.steps[label] = {
        "supported": supported.get(TV, "<absent>"),
        "finalized": finalized.get(TV, "<absent>"),
        "epoch known": resp["finalized_features_epoch"] >= 0,
        "end_txn": ranges.get("end_txn"),
        "TV2 API ranges as at start": start is None or ranges == start,
    }
    return ranges


@session(kind_free=True)
def s_update_features(s: Side) -> None:
    start = _levels(s, "levels at start")
    _update(s, "validate only: downgrade to 1", [(TV, 1, SAFE_DOWNGRADE)], validate_only=True)
    _levels(s, "levels after validate only", start)
    _update(s, "upgrade to the finalized level", [(TV, 2, UPGRADE)])
    _update(s, "downgrade as an upgrade", [(TV, 1, UPGRADE)])
    _update(s, "upgrade as a downgrade", [(TV, 2, SAFE_DOWNGRADE)])
    _update(s, "level above the supported range", [(TV, 3, UPGRADE)])
    _update(s, "negative level", [(TV, -1, SAFE_DOWNGRADE)])
    _update(s, "unknown feature", [("no.such.feature", 1, UPGRADE)])
    _update(s, "unknown upgrade type", [(TV, 1, 7)])
    _update(s, "one good and one bad update", [(TV, 1, SAFE_DOWNGRADE), ("no.such", 1, UPGRADE)])
    _levels(s, "levels after refused updates", start)
    _update(s, "no updates", [])
    _update(s, "v1: validate only", [(TV, 1, SAFE_DOWNGRADE)], validate_only=True, version=1)
    _update(s, "v1: refused", [(TV, 5, UPGRADE)], version=1)
    s.call(
        "v0: downgrade without allow_downgrade",
        "update_features",
        {
            "timeout": 30_000,
            "feature_updates": [{"feature": TV, "max_version_level": 1, "allow_downgrade": False}],
        },
        version=0,
    )
    # The same feature twice: the last update counts (Kafka collects them in a map).
    _update(s, "the same feature twice", [(TV, 1, SAFE_DOWNGRADE), (TV, 2, UPGRADE)])
    _levels(s, "levels after the same feature twice", start)

    _update(s, "v1: safe downgrade to 1", [(TV, 1, SAFE_DOWNGRADE)], version=1)
    _levels(s, "levels at transaction version 1", start)
    _update(s, "unsafe downgrade to 0 (disable)", [(TV, 0, UNSAFE_DOWNGRADE)])
    _levels(s, "levels when disabled", start)
    _update(s, "upgrade back to 2", [(TV, 2, UPGRADE)])
    _levels(s, "levels at the end", start)


@session()
def s_delete_topics_timeout_zero(s: Side) -> None:
    """DeleteTopics whose timeout has passed when it arrives: every topic of the request,
    existing or not, named or by id, is answered REQUEST_TIMED_OUT and none is deleted (a
    request with no topic to look up is answered as ever)."""
    t = "delete-timeout-zero"
    s.create_topic(t)
    tid = s.topic_id(t)

    def delete(label: str, topics: list[dict[str, Any]], timeout: int = 0) -> None:
        s.call(label, "delete_topics", {"topics": topics, "timeout": timeout})

    named = {"name": t, "topic_id": ZERO_UUID}
    unknown = {"name": "delete-timeout-unknown", "topic_id": ZERO_UUID}
    delete("an existing topic", [named])
    delete("an unknown topic", [unknown])
    delete("an existing and an unknown topic", [named, unknown])
    delete("by id", [{"name": None, "topic_id": tid}])
    delete("an unknown id", [{"name": None, "topic_id": UNKNOWN_TOPIC_ID}])
    delete("a negative timeout", [named], timeout=-1)
    delete("nothing", [])

    def listed(resp: Any) -> bool:
        return all(code(t["error_code"]) == 0 for t in resp["topics"])

    s.call(
        "metadata: the topic is still there",
        "metadata",
        {
            "topics": [{"name": t}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        until=listed,
    )


@session()
def s_create_timeout_zero(s: Side) -> None:
    """CreateTopics and CreatePartitions whose timeout has passed when they arrive (0 and
    -1): a new topic, an existing one, validate_only; then whether anything was made."""
    t = "create-timeout-zero"
    s.create_topic(t)

    def create(label: str, name: str, timeout: int = 0, validate_only: bool = False) -> None:
        s.call(
            label,
            "create_topics",
            {"topics": [topic_spec(name)], "timeout": timeout, "validate_only": validate_only},
        )

    create("a new topic", "create-timeout-zero-new")
    create("a new topic, validate only", "create-timeout-zero-validated", validate_only=True)
    create("an existing topic", t)
    create("a new topic, timeout -1", "create-timeout-zero-negative", timeout=-1)

    def grow(label: str, count: int, timeout: int = 0, validate_only: bool = False) -> None:
        s.call(
            label,
            "create_partitions",
            {
                "topics": [{"name": t, "count": count, "assignments": None}],
                "timeout": timeout,
                "validate_only": validate_only,
            },
        )

    grow("partitions 1 to 2, validate only", 2, validate_only=True)
    grow("partitions 1 to 2", 2)
    grow("partitions to 3, timeout -1", 3, timeout=-1)
    for timeout in (0, 30_000):
        # A name given twice: nothing for the controller to do, so no timeout either.
        s.call(
            f"partitions of the same topic twice, timeout {timeout}",
            "create_partitions",
            {
                "topics": [{"name": t, "count": 4, "assignments": None}] * 2,
                "timeout": timeout,
                "validate_only": False,
            },
        )
    create("another new topic, alone", "create-timeout-zero-twice")
    s.call(
        "the same new topic twice, timeout 0",
        "create_topics",
        {"topics": [topic_spec("create-timeout-zero-twice")] * 2, "timeout": 0},
    )
    time.sleep(2.0)  # whatever a timed-out request still made is there by now
    names = [t, "create-timeout-zero-new", "create-timeout-zero-validated"]
    s.call(
        "metadata: what was made",
        "metadata",
        {
            "topics": [{"name": n} for n in [*names, "create-timeout-zero-negative"]],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
