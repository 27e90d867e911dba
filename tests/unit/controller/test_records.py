"""Metadata records: stable, versioned JSON encoding, never pickle."""

from __future__ import annotations

import json
import uuid

import pytest

from common.acl import AclBinding
from controller.records import (
    RECORD_TYPES,
    AccessControlEntry,
    BrokerDynamicConfig,
    BrokerEpochCounter,
    ClientQuota,
    DecodeError,
    FeatureLevel,
    FenceBroker,
    Partition,
    PartitionChange,
    PartitionSealed,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveTopic,
    RemoveUserScramCredential,
    SealedLogSize,
    TieringPartitionDisabled,
    Topic,
    TopicConfig,
    TopicMigration,
    TopicTiering,
    UnfenceBroker,
    UnregisterBroker,
    UserScramCredential,
    decode,
    decode_batch,
    encode,
    encode_batch,
)

TID = uuid.UUID("00000000-0000-0000-0000-00000000002a")

SAMPLES = [
    RegisterBroker(1, uuid.UUID(int=7), 12, "broker-1", 9092, "az-a", fenced=True),
    RegisterBroker(2, uuid.UUID(int=8), 13, "broker-2", 9093, None, fenced=False),
    UnregisterBroker(1, 12),
    FenceBroker(1, 12),
    UnfenceBroker(1, 12),
    BrokerEpochCounter(99),
    Topic("orders", TID),
    TopicConfig(TID, "retention.ms", "1000"),
    TopicConfig(TID, "retention.ms", None),
    Partition(TID, 0, (1, 2, 3), (1, 3), 1, 4, 9, (3,), (2,)),
    Partition(TID, 1, (1,), (), -1),
    PartitionChange(TID, 0, leader=3, isr=(3,)),
    PartitionChange(TID, 0, replicas=(1, 2), adding_replicas=(), removing_replicas=()),
    PartitionChange(TID, 0, leader=-1, isr=()),
    RemoveTopic(TID),
    # authentication
    RegisterBroker(3, uuid.UUID(int=9), 14, "b3", 9092, None, True, ("SASL_SSL://b3:9093",)),
    UserScramCredential("alice", "SCRAM-SHA-512", "c2FsdA==", "c3RvcmVk", "c2VydmVy", 4096),
    RemoveUserScramCredential("alice", "SCRAM-SHA-512"),
]
# Authorization: ACLs and client quotas.
SAMPLES += [
    AccessControlEntry.of(uuid.UUID(int=9), AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)),
    RemoveAccessControlEntry(uuid.UUID(int=9)),
    ClientQuota(("client-id", "user"), (None, "alice"), "producer_byte_rate", "1024.0"),
    ClientQuota(("user",), ("alice",), "producer_byte_rate", None),
    BrokerDynamicConfig("", "leader.replication.throttled.rate", "1000"),
    BrokerDynamicConfig("2", "follower.replication.throttled.rate", None),
]
# Tiered storage (KIP-950 disablement).
SAMPLES += [
    TopicTiering(TID, "DISABLING", 2, "delete"),
    TieringPartitionDisabled(TID, 0, 2),
]
# Feature levels (UpdateFeatures).
SAMPLES += [FeatureLevel("transaction.version", 1), FeatureLevel("transaction.version", 0)]
SAMPLES += [
    TopicMigration(TID, "TO_DISKLESS", "SEALING", 1),
    PartitionSealed(TID, 3, 1, 12345, 678),
    SealedLogSize(TID, 3, 1, 90),
]


def test_every_record_type_has_a_sample() -> None:
    assert {type(r) for r in SAMPLES} == set(RECORD_TYPES.values())


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_round_trip(record: object) -> None:
    data = encode(record)  # type: ignore[arg-type]
    assert decode(data) == record
    # Stable bytes: encoding is a function of the record alone.
    assert encode(decode(data)) == data


def test_batch_round_trip_keeps_order() -> None:
    assert decode_batch(encode_batch(SAMPLES)) == SAMPLES
    assert decode_batch(encode_batch([])) == []


def test_encoding_is_tagged_versioned_json_with_string_uuids() -> None:
    obj = json.loads(encode(Topic("orders", TID, 3, False)))
    assert obj == {
        "t": "Topic",
        "v": 1,
        "name": "orders",
        "topic_id": str(TID),
        "replication_factor": 3,
        "legacy": False,
    }


def test_a_topic_record_from_before_the_creation_fields_still_decodes() -> None:
    # Bytes as an earlier release wrote them: no replication_factor, no legacy.
    old = b'{"name":"orders","t":"Topic","topic_id":"%s","v":1}' % str(TID).encode()
    assert decode(old) == Topic("orders", TID, None, None)
    obj = json.loads(encode(PartitionChange(TID, 3, leader=2)))
    assert obj["isr"] is None and obj["leader"] == 2


def test_an_acl_entry_written_before_acl_bindings_were_shared_still_decodes() -> None:
    # Bytes as an earlier release wrote them into metadata logs and snapshots.
    old = (
        b'{"acl_id":"00000000-0000-0000-0000-000000000009","host":"*","operation":3,'
        b'"pattern_type":3,"permission":3,"principal":"User:alice","resource_name":"orders",'
        b'"resource_type":2,"t":"AccessControlEntry","v":1}'
    )
    entry = decode(old)
    assert entry == AccessControlEntry.of(
        uuid.UUID(int=9), AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)
    )
    assert encode(entry) == old


def test_unknown_fields_are_ignored_and_missing_defaults_filled() -> None:
    # A newer minor change may add a field; an older writer may lack a defaulted one.
    obj = {
        "t": "Partition",
        "v": 1,
        "topic_id": str(TID),
        "partition": 0,
        "replicas": [1],
        "isr": [1],
        "leader": 1,
        "future_field": {"x": 1},
    }
    assert decode(json.dumps(obj).encode()) == Partition(TID, 0, (1,), (1,), 1)


@pytest.mark.parametrize(
    "obj",
    [
        {"t": "NoSuchRecord", "v": 1},
        {"t": "Topic", "v": 2, "name": "a", "topic_id": str(TID)},  # newer than this reader
        {"t": "Topic", "v": 0, "name": "a", "topic_id": str(TID)},
        {"t": "Topic", "name": "a", "topic_id": str(TID)},
        {"t": "Topic", "v": 1, "name": "a"},  # missing required field
        {"t": "Topic", "v": 1, "name": 5, "topic_id": str(TID)},
        {"t": "Topic", "v": 1, "name": "a", "topic_id": "not-a-uuid"},
        {"t": "FenceBroker", "v": 1, "node_id": True, "broker_epoch": 1},  # bool is not int
        {"t": "FenceBroker", "v": 1, "node_id": "1", "broker_epoch": 1},
        {
            "t": "Partition",
            "v": 1,
            "topic_id": str(TID),
            "partition": 0,
            "replicas": "1",
            "isr": [],
            "leader": -1,
        },
        {
            "t": "Partition",
            "v": 1,
            "topic_id": str(TID),
            "partition": 0,
            "replicas": [1.5],
            "isr": [],
            "leader": -1,
        },
        {
            "t": "RegisterBroker",
            "v": 1,
            "node_id": 1,
            "incarnation_id": str(TID),
            "broker_epoch": 1,
            "host": "h",
            "port": 1,
            "fenced": "yes",
        },
        ["not", "an", "object"],
    ],
)
def test_malformed_records_raise_decode_error(obj: object) -> None:
    with pytest.raises(DecodeError):
        decode(json.dumps(obj).encode())


@pytest.mark.parametrize(
    "data", [b"", b"\xff\xfe", b"{", b"[]", b'{"v": 2, "records": []}', b'{"v": 1}']
)
def test_malformed_batches_raise_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_batch(data)
