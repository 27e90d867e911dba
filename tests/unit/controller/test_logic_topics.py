"""CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs and reassignments."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from kio.schema.errors import ErrorCode

from common.topic_names import topic_name_error as check_topic_name
from controller.logic_config import ControllerConfig
from controller.records import PartitionChange
from controller.requests import (
    AlterTopicConfigs,
    ConfigOp,
    NewPartitions,
    NewTopic,
    OngoingReassignment,
    OpType,
    Reassignment,
)

from .harness import SESSION_MS, Cluster, uuids

THREE_RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}


def strict(configs: Mapping[str, str | None]) -> None:
    """A stand-in for common.topic_config_validation.validate."""
    for key, value in configs.items():
        if key not in ("retention.ms", "cleanup.policy", "diskless.enable"):
            raise ValueError(f"Unknown topic config name: {key}")
        if key == "retention.ms" and value is not None and not value.lstrip("-").isdigit():
            raise ValueError(f"Invalid value {value!r} for configuration {key}")


def cluster(**kwargs: object) -> Cluster:
    c = Cluster(ControllerConfig(new_uuid=uuids(), validate_configs=strict, **kwargs))  # type: ignore[arg-type]
    c.start(THREE_RACKS)
    return c


# --- create ------------------------------------------------------------------------------


def test_create_topic_records_and_result() -> None:
    c = cluster()
    outcome = c.logic.create_topics(
        c.image, [NewTopic("orders", 3, configs={"retention.ms": "1000"})]
    )
    (result,) = outcome.response
    assert result.error_code == ErrorCode.none and result.topic_id is not None
    assert result.configs == {"retention.ms": "1000"}
    # Nothing changes before commit: the logic never mutates the image.
    assert c.image.topic("orders") is None
    c.commit(outcome)
    topic = c.image.topic("orders")
    assert topic is not None and topic.topic_id == result.topic_id
    assert topic.configs == {"retention.ms": "1000"} and topic.diskless
    assert all(p.leader_epoch == 0 and p.partition_epoch == 0 for p in topic.partitions.values())


def test_default_partitions_and_validate_only() -> None:
    c = cluster(default_partitions=4)
    outcome = c.logic.create_topics(c.image, [NewTopic("t")], validate_only=True)
    (result,) = outcome.response
    assert outcome.records == [] and result.error_code == ErrorCode.none
    assert result.num_partitions == 4 and result.topic_id is None
    assert c.create("t", -1).num_partitions == 4


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (NewTopic("bad name", 1), ErrorCode.invalid_topic_exception),
        (NewTopic("", 1), ErrorCode.invalid_topic_exception),
        (NewTopic("..", 1), ErrorCode.invalid_topic_exception),
        (NewTopic("x" * 250, 1), ErrorCode.invalid_topic_exception),
        (NewTopic("t", 0), ErrorCode.invalid_partitions),
        (NewTopic("t", -5), ErrorCode.invalid_partitions),
        (NewTopic("t", 10_001), ErrorCode.invalid_partitions),
        (NewTopic("t", 1, replication_factor=2), ErrorCode.invalid_replication_factor),
        (NewTopic("t", 1, assignments={0: [1]}), ErrorCode.invalid_request),
        (NewTopic("t", 1, configs={"nope": "1"}), ErrorCode.invalid_config),
        (NewTopic("t", 1, configs={"retention.ms": "soon"}), ErrorCode.invalid_config),
        (NewTopic("t", 1, configs={"retention.ms": None}), ErrorCode.invalid_config),
        (NewTopic("t", 1, configs={"diskless.enable": "false"}), ErrorCode.invalid_config),
    ],
)
def test_create_validation(topic: NewTopic, code: ErrorCode) -> None:
    c = cluster()
    outcome = c.logic.create_topics(c.image, [topic])
    (result,) = outcome.response
    assert result.error_code == code and result.error_message
    assert outcome.records == []


def test_existing_duplicate_and_colliding_names() -> None:
    c = cluster()
    c.create("a.b", 1)
    results = c.commit(
        c.logic.create_topics(
            c.image,
            [
                NewTopic("a.b", 1),
                NewTopic("a_b", 1),
                NewTopic("d", 1),
                NewTopic("d", 1),
                NewTopic("x.y", 1),
                NewTopic("x_y", 1),
                NewTopic("ok", 1),
            ],
        )
    )
    codes = [r.error_code for r in results]
    assert codes == [
        ErrorCode.topic_already_exists,
        ErrorCode.invalid_topic_exception,  # collides with a.b
        ErrorCode.invalid_request,  # duplicate in the request
        ErrorCode.invalid_request,
        ErrorCode.none,
        ErrorCode.invalid_topic_exception,  # collides with x.y, created just before
        ErrorCode.none,
    ]
    assert {t.name for t in c.image.topics.values()} == {"a.b", "x.y", "ok"}


def test_check_topic_name() -> None:
    assert check_topic_name("good.name_-1") is None
    assert check_topic_name("x" * 249) is None
    assert check_topic_name("é") is not None


# --- delete ------------------------------------------------------------------------------


def test_delete_topics_by_name_and_id() -> None:
    c = cluster()
    c.create("a", 2)
    b_id = c.create("b", 2).topic_id
    results = c.commit(c.logic.delete_topics(c.image, ["a", b_id, "missing", c.config.new_uuid()]))
    assert [r.error_code for r in results] == [
        ErrorCode.none,
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
    ]
    assert results[1].name == "b" and results[0].topic_id is not None
    assert c.image.topics == {}
    # The name is free again; the new topic gets a new id.
    assert c.create("a", 1).topic_id != results[0].topic_id


def test_delete_duplicates_in_one_request() -> None:
    c = cluster()
    c.create("a", 1)
    outcome = c.logic.delete_topics(c.image, ["a", "a"])
    assert [r.error_code for r in outcome.response] == [ErrorCode.invalid_request] * 2
    assert outcome.records == []
    topic_id = c.image.topic("a").topic_id  # type: ignore[union-attr]
    outcome = c.logic.delete_topics(c.image, ["a", topic_id])
    assert [r.error_code for r in outcome.response] == [ErrorCode.invalid_request] * 2
    assert outcome.records == []


# --- create partitions -------------------------------------------------------------------


def test_create_partitions() -> None:
    c = cluster()
    c.create("t", 2)
    results = c.commit(
        c.logic.create_partitions(
            c.image,
            [NewPartitions("t", 5), NewPartitions("missing", 3)],
        )
    )
    assert [r.error_code for r in results] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert sorted(c.partitions("t")) == [0, 1, 2, 3, 4]
    for count, code in [
        (5, ErrorCode.invalid_partitions),
        (3, ErrorCode.invalid_partitions),
        (10_001, ErrorCode.invalid_partitions),
    ]:
        (r,) = c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", count)]))
        assert r.error_code == code and r.error_message
    outcome = c.logic.create_partitions(c.image, [NewPartitions("t", 8)], validate_only=True)
    assert outcome.records == [] and outcome.response[0].error_code == ErrorCode.none
    dup = c.logic.create_partitions(c.image, [NewPartitions("t", 8), NewPartitions("t", 9)])
    assert [r.error_code for r in dup.response] == [ErrorCode.invalid_request] * 2


def test_new_partitions_elect_alive_leaders() -> None:
    c = cluster()
    c.create("t", 1)
    c.advance(SESSION_MS + 1, heartbeating=[2, 3, 4, 5, 6])  # 1 is fenced
    c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 13)]))
    for index, p in c.partitions("t").items():
        # A fenced broker may be a replica (and in the diskless ISR), never a new leader.
        assert p.leader in p.isr and p.isr == p.replicas
        assert index == 0 or p.leader != 1


# --- configs -----------------------------------------------------------------------------


def alter(c: Cluster, name: str, *ops: ConfigOp, validate_only: bool = False) -> object:
    (result,) = c.commit(
        c.logic.alter_configs(c.image, [AlterTopicConfigs(name, ops)], validate_only)
    )
    return result


def test_incremental_alter_configs() -> None:
    c = cluster()
    c.create("t", 1, configs={"retention.ms": "5"})
    assert alter(c, "t", ConfigOp("retention.ms", OpType.SET, "7")).error_code == 0
    assert c.image.topic("t").configs == {"retention.ms": "7"}  # type: ignore[union-attr]
    alter(c, "t", ConfigOp("cleanup.policy", OpType.APPEND, "compact"))
    assert c.image.topic("t").configs["cleanup.policy"] == "delete,compact"  # type: ignore[union-attr]
    alter(c, "t", ConfigOp("cleanup.policy", OpType.SUBTRACT, "delete"))
    assert c.image.topic("t").configs["cleanup.policy"] == "compact"  # type: ignore[union-attr]
    alter(c, "t", ConfigOp("cleanup.policy", OpType.SUBTRACT, "compact"))
    assert "cleanup.policy" not in c.image.topic("t").configs  # type: ignore[union-attr]
    alter(c, "t", ConfigOp("retention.ms", OpType.DELETE))
    assert c.image.topic("t").configs == {}  # type: ignore[union-attr]


def test_alter_configs_errors_and_validate_only() -> None:
    c = cluster()
    c.create("t", 1)
    cases = [
        (
            ("missing", ConfigOp("retention.ms", OpType.SET, "1")),
            ErrorCode.unknown_topic_or_partition,
        ),
        (("t", ConfigOp("nope", OpType.SET, "1")), ErrorCode.invalid_config),
        (("t", ConfigOp("retention.ms", OpType.SET, "x")), ErrorCode.invalid_config),
        (("t", ConfigOp("retention.ms", OpType.SET, None)), ErrorCode.invalid_config),
        (("t", ConfigOp("retention.ms", OpType.APPEND, "1")), ErrorCode.invalid_config),
        (("t", ConfigOp("retention.ms", 9, "1")), ErrorCode.invalid_request),
        (("t", ConfigOp("diskless.enable", OpType.SET, "false")), ErrorCode.invalid_config),
        (
            (
                "t",
                ConfigOp("retention.ms", OpType.SET, "1"),
                ConfigOp("retention.ms", OpType.DELETE),
            ),
            ErrorCode.invalid_request,
        ),
    ]
    for (name, *ops), code in cases:
        result = alter(c, name, *ops)
        assert result.error_code == code, (ops, result)  # type: ignore[attr-defined]
    assert c.image.topic("t").configs == {}  # type: ignore[union-attr]
    result = alter(c, "t", ConfigOp("retention.ms", OpType.SET, "1"), validate_only=True)
    assert result.error_code == ErrorCode.none  # type: ignore[attr-defined]
    assert c.image.topic("t").configs == {}  # type: ignore[union-attr]
    dup = c.logic.alter_configs(c.image, [AlterTopicConfigs("t", []), AlterTopicConfigs("t", [])])
    assert [r.error_code for r in dup.response] == [ErrorCode.invalid_request] * 2


def test_unchanged_values_produce_no_records() -> None:
    c = cluster()
    c.create("t", 1, configs={"retention.ms": "5"})
    outcome = c.logic.alter_configs(
        c.image,
        [
            AlterTopicConfigs(
                "t",
                [
                    ConfigOp("retention.ms", OpType.SET, "5"),
                    ConfigOp("cleanup.policy", OpType.DELETE),
                ],
            )
        ],
    )
    assert outcome.records == [] and outcome.response[0].error_code == ErrorCode.none


# --- reassignments ------------------------------------------------------------------------


def reassign(c: Cluster, *requests: Reassignment) -> list[object]:
    return c.commit(c.logic.alter_partition_reassignments(c.image, requests))


def test_reassignment_to_alive_brokers_completes_at_once() -> None:
    c = cluster()
    c.create("t", 2)
    p = c.partitions("t")[0]
    target = (6, 5)
    (result,) = reassign(c, Reassignment("t", 0, target))
    assert result.error_code == ErrorCode.none  # type: ignore[attr-defined]
    q = c.partitions("t")[0]
    assert q.replicas == target and q.isr == target and not q.reassigning
    if p.leader not in target:
        assert q.leader == 6 and q.leader_epoch == p.leader_epoch + 1
    assert c.logic.list_partition_reassignments(c.image) == []
    # The other partition is untouched.
    assert c.partitions("t")[1].partition_epoch == 0


def test_reassignment_keeps_a_leader_that_stays() -> None:
    c = cluster()
    c.create("t", 1)
    p = c.partitions("t")[0]
    others = [b for b in THREE_RACKS if b not in p.replicas]
    reassign(c, Reassignment("t", 0, (others[0], p.leader)))
    q = c.partitions("t")[0]
    assert q.leader == p.leader and q.leader_epoch == p.leader_epoch
    assert q.replicas == (others[0], p.leader)


def test_reassignment_to_a_fenced_broker_stays_pending_and_can_be_cancelled() -> None:
    c = cluster()
    c.create("t", 1)
    original = c.partitions("t")[0].replicas
    spare = next(b for b in THREE_RACKS if b not in original)
    c.advance(SESSION_MS + 1, heartbeating=[b for b in THREE_RACKS if b != spare])
    assert c.image.brokers[spare].fenced
    target = (spare, *original[1:])
    reassign(c, Reassignment("t", 0, target))
    p = c.partitions("t")[0]
    assert p.replicas == (*target, original[0])
    assert p.adding_replicas == (spare,) and p.removing_replicas == (original[0],)
    assert p.leader == original[0] and p.isr == p.replicas
    assert c.logic.list_partition_reassignments(c.image) == [
        OngoingReassignment("t", 0, p.replicas, (spare,), (original[0],))
    ]
    assert c.logic.list_partition_reassignments(c.image, {"t": [0, 7], "nope": [0]}) == (
        c.logic.list_partition_reassignments(c.image)
    )
    # A new target while one is in progress starts from the original replicas.
    reassign(c, Reassignment("t", 0, (spare, original[0])))
    p = c.partitions("t")[0]
    assert p.original_replicas == original and p.target_replicas == (spare, original[0])
    (result,) = reassign(c, Reassignment("t", 0, None))
    assert result.error_code == ErrorCode.none  # type: ignore[attr-defined]
    p = c.partitions("t")[0]
    assert p.replicas == original and not p.reassigning and p.isr == original
    (result,) = reassign(c, Reassignment("t", 0, None))
    assert result.error_code == ErrorCode.no_reassignment_in_progress  # type: ignore[attr-defined]


def test_a_second_reassignment_replaces_the_first() -> None:
    c = cluster()
    c.create("t", 1)
    original = c.partitions("t")[0].replicas
    first, second = [b for b in THREE_RACKS if b not in original][:2]
    c.advance(SESSION_MS + 1, heartbeating=[b for b in THREE_RACKS if b not in (first, second)])
    reassign(c, Reassignment("t", 0, (first, *original[1:])))
    reassign(c, Reassignment("t", 0, (second, *original[1:])))
    p = c.partitions("t")[0]
    # The first target's new replica is dropped, not "removed": it never was an original one.
    assert p.replicas == (second, *original[1:], original[0])
    assert p.adding_replicas == (second,) and p.removing_replicas == (original[0],)
    reassign(c, Reassignment("t", 0, None))
    # As in KRaft, a cancel restores the original replica set; their order is the one kept
    # during the reassignment (target first), so the preferred leader may differ.
    assert c.partitions("t")[0].replicas == (*original[1:], original[0])


def test_reassignment_validation() -> None:
    c = cluster()
    c.create("t", 1)
    cases = [
        (Reassignment("missing", 0, (1,)), ErrorCode.unknown_topic_or_partition),
        (Reassignment("t", 3, (1,)), ErrorCode.unknown_topic_or_partition),
        (Reassignment("t", 0, ()), ErrorCode.invalid_replica_assignment),
        (Reassignment("t", 0, (1, 1)), ErrorCode.invalid_replica_assignment),
        (Reassignment("t", 0, (1, 99)), ErrorCode.invalid_replica_assignment),
    ]
    for request, code in cases:
        outcome = c.logic.alter_partition_reassignments(c.image, [request])
        assert outcome.response[0].error_code == code and outcome.records == []
    dup = c.logic.alter_partition_reassignments(
        c.image, [Reassignment("t", 0, (1,)), Reassignment("t", 0, (2,))]
    )
    assert [r.error_code for r in dup.response] == [ErrorCode.invalid_request] * 2


def test_reassignment_to_the_same_replicas_is_a_no_op() -> None:
    c = cluster()
    c.create("t", 1)
    p = c.partitions("t")[0]
    outcome = c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, p.replicas)])
    assert outcome.records == [] and outcome.response[0].error_code == ErrorCode.none
    # A reordering changes the preferred leader (replicas) but not the current leader.
    reordered = (*p.replicas[1:], p.replicas[0])
    outcome = c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, reordered)])
    topic_id = c.image.topic("t").topic_id  # type: ignore[union-attr]
    assert outcome.records == [PartitionChange(topic_id, 0, isr=reordered, replicas=reordered)]


def test_no_config_alteration_a_client_can_send_raises() -> None:
    # Every key the broker knows, every operation, odd values, on a diskless and a classic
    # topic: the logic answers each with a result (an error code or none), never raises,
    # which the controller's HTTP API would turn into an error instead of a Kafka answer.
    from common import topic_config_keys, topic_config_validation

    c = Cluster(
        ControllerConfig(
            new_uuid=uuids(), validate_configs=topic_config_validation.validate, classic_topics=True
        )
    )
    c.start(THREE_RACKS)
    c.create("d", 1)
    classic = {"diskless.enable": "false", "unclean.leader.election.enable": "true"}
    c.create("k", 1, replication_factor=3, configs=classic)
    values = (None, "", "true", "false", "-1", "0", "x", "1.5", "9" * 30, "delete,compact")
    for name in ("d", "k", "missing"):
        for key in sorted(topic_config_keys.KEYS):
            for op in (*OpType, 7):
                for value in values:
                    request = [AlterTopicConfigs(name, [ConfigOp(key, op, value)])]
                    (result,) = c.logic.alter_configs(c.image, request, True).response
                    assert isinstance(result.error_code, ErrorCode), (name, key, op, value)
