"""The payloads of NOTIFY 'sluice_logs' (storage/postgres/notify.py): "topic_id:partition"
lines, each payload within NOTIFY's limit, several for a long list, and one empty payload
("maybe any partition") past MAX_PAYLOADS. The database side is
tests/integration/test_postgres_notify.py."""

from __future__ import annotations

from uuid import uuid4

from storage.partition_key import PartitionKey
from storage.postgres.notify import (
    MAX_PAYLOAD_BYTES,
    MAX_PAYLOADS,
    decode_payload,
    encode_payloads,
)


def test_a_long_list_is_split_within_notifys_limit() -> None:
    keys = [PartitionKey(uuid4(), p) for p in range(400)]
    payloads = encode_payloads(keys + keys[:10])  # repeats are named once
    assert len(payloads) > 1, "400 partitions do not fit one payload"
    assert all(0 < len(p.encode()) <= MAX_PAYLOAD_BYTES for p in payloads)
    decoded = [k for p in payloads for k in decode_payload(p) or []]
    assert sorted(decoded, key=str) == sorted(keys, key=str)


def test_nothing_is_no_payload_and_too_much_is_maybe_any_partition() -> None:
    assert encode_payloads([]) == []
    # A line is 38-42 bytes: this many lines need more than MAX_PAYLOADS payloads.
    many = [PartitionKey(uuid4(), 0) for _ in range(MAX_PAYLOADS * MAX_PAYLOAD_BYTES // 38)]
    assert encode_payloads(many) == [""]
    assert decode_payload("") is None
    # Just under the cap: still named one by one.
    fewer = many[: (MAX_PAYLOADS - 1) * (MAX_PAYLOAD_BYTES // 39)]
    assert "" not in encode_payloads(fewer)
