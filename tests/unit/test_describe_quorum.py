"""DescribeQuorum's answer from the controllers' Raft statuses (broker/metadata/describe_quorum.py):
what ``kafka-metadata-quorum describe`` shows."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.metadata.describe_quorum import answer

NOW = 1_700_000_000_000


def status(node: int, role: str, term: int, last: int, commit: int, **extra: Any) -> dict[str, Any]:
    return {
        "node_id": node,
        "role": role,
        "term": term,
        "leader": None,
        "commit_index": commit,
        "last_index": last,
        "voters": [1, 2, 3],
        "follower_match": {},
        **extra,
    }


def test_the_leader_reports_its_followers_and_an_unreachable_voter_is_unknown() -> None:
    statuses = [
        ("https://127.0.0.1:9001", status(1, "follower", 4, 40, 38)),
        ("https://127.0.0.1:9002", status(2, "leader", 4, 42, 40, follower_match={"1": 40})),
        ("https://127.0.0.1:9003", None),  # did not answer
    ]
    partition, nodes = answer(statuses, NOW)
    assert partition["error_code"] == 0
    assert (partition["leader_id"], partition["leader_epoch"], partition["high_watermark"]) == (
        2,
        4,
        40,
    )
    ends = {v["replica_id"]: v["log_end_offset"] for v in partition["current_voters"]}
    # Voter 3 is a voter although it did not answer (the leader's configuration says so);
    # the leader has not heard from it: -1, Kafka's "unknown".
    assert ends == {1: 40, 2: 42, 3: -1}
    caught_up = {
        v["replica_id"]: v["last_caught_up_timestamp"] for v in partition["current_voters"]
    }
    assert caught_up == {1: -1, 2: NOW, 3: -1}
    assert partition["observers"] == []
    assert {n["node_id"]: n["listeners"] for n in nodes} == {
        1: [{"name": "HTTPS", "host": "127.0.0.1", "port": 9001}],
        2: [{"name": "HTTPS", "host": "127.0.0.1", "port": 9002}],
    }


def test_a_deposed_leader_that_has_not_noticed_is_not_reported() -> None:
    statuses = [
        ("http://h:1", status(1, "leader", 3, 10, 10)),
        ("http://h:2", status(2, "leader", 5, 12, 12, follower_match={"1": 10, "3": 12})),
        ("http://h:3", status(3, "follower", 5, 12, 12)),
    ]
    partition, _ = answer(statuses, NOW)
    assert (partition["leader_id"], partition["leader_epoch"]) == (2, 5)


def test_no_leader_is_an_error_not_a_made_up_answer() -> None:
    statuses = [("http://h:1", status(1, "candidate", 7, 10, 9)), ("http://h:2", None)]
    partition, nodes = answer(statuses, NOW)
    assert partition["error_code"] == int(ErrorCode.not_leader_or_follower)
    assert partition["leader_id"] == -1 and partition["current_voters"] == []
    assert nodes == []
