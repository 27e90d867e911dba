"""The comparison machinery itself, without brokers: what it normalises, what it still
reports, and how known.py's patterns match."""

from __future__ import annotations

from .compare import Difference, diff, normalise
from .known import BUGS, INTENDED, Known


def differences(kafka: object, sluice: object) -> list[Difference]:
    return list(diff(normalise(kafka), normalise(sluice)))


def test_node_ids_hosts_and_random_ids_are_normalised_but_their_absence_is_not() -> None:
    kafka = {"node_id": 1, "host": "a", "port": 1, "topic_id": "6f1c-1", "leader_id": 1}
    sluice = {"node_id": 0, "host": "b", "port": 2, "topic_id": "0aa1-2", "leader_id": 0}
    assert differences(kafka, sluice) == []
    assert differences({"leader_id": 1}, {"leader_id": -1}) == [
        Difference("leader_id", "<node>", -1)
    ]


def test_a_changed_field_is_reported_with_its_path() -> None:
    kafka = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0}]}]}
    sluice = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 3}]}]}
    assert differences(kafka, sluice) == [Difference("topics[t].partitions[0].error_code", 0, 3)]


def test_named_entries_compare_by_name_in_any_order_and_a_missing_one_shows() -> None:
    kafka = {"configs": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]}
    sluice = {"configs": [{"name": "b", "value": "2"}, {"name": "c", "value": "3"}]}
    assert differences(kafka, sluice) == [
        Difference("configs[a]", {"name": "a", "value": "1"}, "<absent>"),
        Difference("configs[c]", "<absent>", {"name": "c", "value": "3"}),
    ]


def test_a_repeated_entry_is_its_own_difference() -> None:
    kafka = {"topics": [{"name": "t"}]}
    sluice = {"topics": [{"name": "t"}, {"name": "t"}]}
    assert differences(kafka, sluice) == [Difference("topics[t]#2", "<absent>", {"name": "t"})]


def test_patterns_match_brackets_literally() -> None:
    known = Known("fetch", "*", "*partitions[0].high_watermark", "r")
    path = "responses[0].partitions[0].high_watermark"
    assert known.matches("fetch", "classic", "far out of range", path)
    assert not known.matches("fetch", "classic", "x", "responses[0].partitions[1].high_watermark")
    assert not known.matches("produce", "classic", "x", path)
    assert not Known("fetch", "*", "*", "r", ("diskless",)).matches("fetch", "classic", "x", path)


def test_every_entry_has_a_reason_and_a_unique_id() -> None:
    entries = [*INTENDED, *BUGS]
    assert all(k.reason.strip() for k in entries)
    assert len({k.id for k in BUGS}) == len(BUGS)
