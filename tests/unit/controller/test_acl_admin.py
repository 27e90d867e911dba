"""ACLs and client quotas in the metadata image: the controller's decisions (create is
idempotent, delete by filter), the records they commit, snapshots and all-or-nothing batches."""

from __future__ import annotations

import uuid

import pytest

from common.acl import AclBinding, AclFilter
from controller.acl_admin import (
    AclDeletionResult,
    QuotaAlteration,
    QuotaOp,
    alter_client_quotas,
    create_acls,
    delete_acls,
)
from controller.image import ImageError, MetadataImage
from controller.records import (
    AccessControlEntry,
    ClientQuota,
    RemoveAccessControlEntry,
    decode_batch,
    encode_batch,
)
from controller.wire import from_json, to_json

READ_ORDERS = AclBinding(2, "orders", 3, "User:alice", "*", 3, 3)
WRITE_PREFIX = AclBinding(2, "ord", 4, "User:bob", "*", 4, 3)
ALL = AclFilter(1, None, 1, None, None, 1, 1)


def commit(image: MetadataImage, outcome):  # type: ignore[no-untyped-def]
    # As the controllers and brokers do: one entry, encoded, applied all or nothing.
    image.apply_batch(decode_batch(encode_batch(outcome.records)))
    return outcome.response


def test_create_is_idempotent_and_checks_each_acl() -> None:
    image = MetadataImage()
    bad = AclBinding(2, "orders", 2, "User:alice", "*", 3, 3)  # pattern MATCH
    results = commit(image, create_acls(image, [READ_ORDERS, bad, READ_ORDERS, WRITE_PREFIX]))
    assert [r.error_code for r in results] == [0, 42, 0, 0]
    assert "pattern" in (results[1].error_message or "")
    assert len(image.acls) == 2
    again = create_acls(image, [READ_ORDERS])
    assert again.records == [] and again.response[0].error_code == 0


def test_delete_by_filter_answers_with_what_it_removed() -> None:
    image = MetadataImage()
    commit(image, create_acls(image, [READ_ORDERS, WRITE_PREFIX]))
    by_bob = AclFilter(1, None, 1, "User:bob", None, 1, 1)
    results = commit(image, delete_acls(image, [by_bob, ALL]))
    assert results[0].deleted == [WRITE_PREFIX]
    # Each filter answers with every ACL it matched, even one an earlier filter removed.
    assert sorted(results[1].deleted, key=str) == sorted([READ_ORDERS, WRITE_PREFIX], key=str)
    assert image.acls == {}
    assert commit(image, delete_acls(image, [ALL]))[0].deleted == []
    invalid = delete_acls(image, [AclFilter(0, None, 1, None, None, 1, 1)])
    assert invalid.response[0].error_code == 42


def test_acls_and_quotas_survive_a_snapshot() -> None:
    image = MetadataImage()
    commit(image, create_acls(image, [READ_ORDERS, WRITE_PREFIX]))
    commit(
        image,
        alter_client_quotas(
            image,
            [
                QuotaAlteration(["user"], ["alice"], [QuotaOp("producer_byte_rate", 1024, False)]),
                QuotaAlteration(
                    ["user", "client-id"],
                    [None, "app"],
                    [QuotaOp("consumer_byte_rate", 2048.5, False)],
                ),
            ],
            validate_only=False,
        ),
    )
    copy = MetadataImage.from_records(decode_batch(encode_batch(image.snapshot())))
    assert copy == image and copy.acls == image.acls
    assert copy.quotas == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("client-id", "app"), ("user", None)): {"consumer_byte_rate": 2048.5},
    }


def test_quota_changes_and_refusals() -> None:
    image = MetadataImage()
    alice = (("user", "alice"),)

    def alter(*ops: QuotaOp, types=("user",), names=("alice",), validate=False):  # type: ignore[no-untyped-def]
        return commit(
            image,
            alter_client_quotas(
                image, [QuotaAlteration(list(types), list(names), list(ops))], validate
            ),
        )[0]

    assert alter(QuotaOp("producer_byte_rate", 100, False), validate=True).error_code == 0
    assert image.quotas == {}
    alter(QuotaOp("producer_byte_rate", 100, False), QuotaOp("request_percentage", 50, False))
    assert image.quotas[alice] == {"producer_byte_rate": 100.0, "request_percentage": 50.0}
    alter(QuotaOp("producer_byte_rate", 0, True))
    assert image.quotas[alice] == {"request_percentage": 50.0}
    alter(QuotaOp("request_percentage", 0, True))
    assert image.quotas == {}
    assert alter(QuotaOp("bogus_rate", 1, False)).error_code == 40  # INVALID_CONFIG
    assert alter(QuotaOp("producer_byte_rate", -5, False)).error_code == 40
    # KIP-612: an ip entity (alone) takes only connection_creation_rate.
    rate = QuotaOp("connection_creation_rate", 5, False)
    assert (
        alter(QuotaOp("producer_byte_rate", 1, False), types=("ip",), names=(None,)).error_code
        == 40
    )
    assert alter(rate, types=("ip",), names=("not-an-ip",)).error_code == 42
    assert alter(rate, types=("ip", "user"), names=("10.0.0.1", "a")).error_code == 42
    assert alter(rate).error_code == 40  # not a user quota
    assert alter(rate, types=("ip",), names=("10.0.0.1",)).error_code == 0
    assert alter(rate, types=("ip",), names=(None,)).error_code == 0
    assert image.quotas.pop((("ip", "10.0.0.1"),)) == {"connection_creation_rate": 5.0}
    assert image.quotas.pop((("ip", None),)) == {"connection_creation_rate": 5.0}
    assert (
        alter(
            QuotaOp("producer_byte_rate", 1, False), types=("user", "user"), names=("a", "b")
        ).error_code
        == 42
    )
    assert image.quotas == {}


def test_a_batch_with_a_bad_acl_record_changes_nothing() -> None:
    image = MetadataImage()
    acl_id = uuid.uuid4()
    image.apply_batch([AccessControlEntry.of(acl_id, AclBinding(2, "t", 3, "User:a", "*", 3, 3))])
    before = image.acls
    with pytest.raises(ImageError):
        image.apply_batch(
            [
                RemoveAccessControlEntry(acl_id),
                ClientQuota(("user",), ("a",), "producer_byte_rate", "10.0"),
                RemoveAccessControlEntry(acl_id),  # gone already
            ]
        )
    assert image.acls == before and image.quotas == {}


def test_acls_and_filters_travel_between_broker_and_controller_as_json() -> None:
    # The broker-controller wire format: flat objects with Kafka's field names.
    assert to_json([READ_ORDERS]) == [
        {
            "resource_type": 2,
            "resource_name": "orders",
            "pattern_type": 3,
            "principal": "User:alice",
            "host": "*",
            "operation": 3,
            "permission": 3,
        }
    ]
    assert from_json(AclBinding, to_json(READ_ORDERS)) == READ_ORDERS
    assert from_json(AclFilter, to_json(ALL)) == ALL
    answer = AclDeletionResult(0, None, [READ_ORDERS, WRITE_PREFIX])
    assert from_json(AclDeletionResult, to_json(answer)) == answer


def test_a_stored_acl_entry_is_its_acl_with_an_id() -> None:
    image = MetadataImage()
    commit(image, create_acls(image, [READ_ORDERS]))
    (entry,) = image.acls.values()
    assert entry.binding() == READ_ORDERS and entry.acl_id in image.acls
