"""Transaction markers as consumers read them (kafka-python's record reader, a stock one)."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from protocol.control_batch import marker_batch, parse_marker
from protocol.records import parse_batches


@pytest.mark.parametrize("commit", [True, False])
def test_marker_is_a_valid_control_batch(commit: bool) -> None:
    data = marker_batch(4242, 7, commit, 1_700_000_000_123, coordinator_epoch=3)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (4242, 7, -1)
    [record] = list(batch)
    version, kind = struct.unpack(">hh", record.key)
    assert (version, kind) == (0, 1 if commit else 0)
    assert struct.unpack(">hi", record.value) == (0, 3)
    assert parse_marker(data) == (4242, 7, commit)


def test_marker_passes_the_brokers_own_framing_checks() -> None:
    data = marker_batch(1, 0, True, 5)
    [header] = parse_batches(memoryview(data), 1 << 20)
    assert header.is_control and header.is_transactional
    assert header.record_count == 1 and header.max_timestamp == 5
