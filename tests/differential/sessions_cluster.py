"""The sessions where the cluster's size matters, against three brokers on each side
(cluster.py): replication factor 3 and min.insync.replicas, Metadata's replicas, ISR, leader
epochs and offline replicas, preferred leader election, partition reassignment, log dirs, and
a stopped broker (acks=all refused below min.insync.replicas, OffsetForLeaderEpoch after the
leader moved).

Topics are placed by hand (replicas [1, 2, 3]: broker 1 the preferred leader) so both sides
place them alike, except diskless ones, which take no placement (their side creates them
without). Requests for a partition go to its leader (``s.via``), as a client's would.
Every session leaves the cluster with three brokers but ``stopped_broker``, which stops
broker 1 (the next side's first session starts it again: ``ClusterSide.ensure_up``), so it
runs last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cluster import ClusterSide
from .sessions import T0, batch

ClusterSession = Callable[[ClusterSide], None]
CLUSTER_SESSIONS: dict[str, ClusterSession] = {}
# The core set CI runs (the rest: SLUICE_TEST_DIFFERENTIAL_CLUSTER=all).
CLUSTER_CORE: set[str] = set()


def cluster_session(core: bool = True) -> Callable[[ClusterSession], ClusterSession]:
    def register(fn: ClusterSession) -> ClusterSession:
        name = "cluster_" + fn.__name__.removeprefix("s_")
        CLUSTER_SESSIONS[name] = fn
        if core:
            CLUSTER_CORE.add(name)
        return fn

    return register


def _metadata(s: ClusterSide, label: str, *topics: str) -> Any:
    return s.call(
        label,
        "metadata",
        {
            "topics": [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


def _produce(s: ClusterSide, label: str, topic: str, records: bytes, acks: int = -1) -> Any:
    with s.via(s.leader(topic)):
        return s.call(
            label,
            "produce",
            {
                "transactional_id": None,
                "acks": acks,
                "timeout": 5_000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": records}]}
                ],
            },
        )


def _epochs(s: ClusterSide, label: str, topic: str, node: int, **partition: int) -> Any:
    with s.via(node):
        return s.call(
            label,
            "offset_for_leader_epoch",
            {"replica_id": -1, "topics": [{"topic": topic, "partitions": [partition]}]},
        )


def _elect(
    s: ClusterSide, label: str, election_type: int, parts: list[tuple[str, list[int]]] | None
) -> Any:
    return s.call(
        label,
        "elect_leaders",
        {
            "election_type": election_type,
            "topic_partitions": None
            if parts is None
            else [{"topic": t, "partitions": ps} for t, ps in parts],
            "timeout": 10_000,
        },
    )


def _reassign(
    s: ClusterSide, label: str, parts: list[tuple[str, int, list[int] | None]], **kw: Any
) -> Any:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, replicas in parts:
        by_topic.setdefault(topic, []).append({"partition_index": partition, "replicas": replicas})
    return s.call(
        label,
        "alter_partition_reassignments",
        {
            "timeout": 10_000,
            "allow_replication_factor_change": True,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
        **kw,
    )


def _list_reassignments(
    s: ClusterSide, label: str, topics: list[tuple[str, list[int]]] | None, **kw: Any
) -> Any:
    return s.call(
        label,
        "list_partition_reassignments",
        {
            "timeout": 10_000,
            "topics": None
            if topics is None
            else [{"name": t, "partition_indexes": ps} for t, ps in topics],
        },
        **kw,
    )


def _no_reassignment(resp: Any) -> bool:
    return code(resp["error_code"]) == 0 and not resp["topics"]


def code(value: Any) -> int:
    from .compare import code as _code

    return _code(value)


# ---------------------------------------------------------------------------------------------


@cluster_session()
def s_metadata(s: ClusterSide) -> None:
    """Replicas, ISR, leaders and leader epochs of a topic placed across the three racks;
    the brokers with their racks; replication factors the cluster can and cannot meet."""
    t = s.create(
        "rf3", assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]], **{"min.insync.replicas": "2"}
    )
    _metadata(s, "rf3 topic", t)
    _metadata(s, "brokers only")
    s.call(
        "describe cluster",
        "describe_cluster",
        {"include_cluster_authorized_operations": False, "endpoint_type": 1},
    )

    def create(label: str, name: str, partitions: int, rf: int, configs: dict[str, str]) -> None:
        s.call(
            label,
            "create_topics",
            {
                "topics": [
                    {
                        "name": s.topic(name),
                        "num_partitions": partitions,
                        "replication_factor": rf,
                        "assignments": [],
                        "configs": [
                            {"name": k, "value": v}
                            for k, v in {**configs, **s.kind_configs}.items()
                        ],
                    }
                ],
                "timeout": 30_000,
                "validate_only": True,
            },
        )

    create("replication factor 3 of 3 brokers", "rf3-new", 3, 3, {})
    create("replication factor 4 of 3 brokers", "rf4", 1, 4, {})
    create(
        "min.insync.replicas 3 with replication factor 3",
        "mir3",
        1,
        3,
        {"min.insync.replicas": "3"},
    )
    create(
        "min.insync.replicas 4 with replication factor 3",
        "mir4",
        1,
        3,
        {"min.insync.replicas": "4"},
    )
    create("min.insync.replicas 0", "mir0", 1, 3, {"min.insync.replicas": "0"})
    # Every node answers Metadata alike (the same leaders, the same epochs).
    for node in (1, 2, 3):
        with s.via(node):
            _metadata(s, f"rf3 topic from broker {node}", t)
    with s.via(2):
        s.call(
            "describe the rf3 topic's configs",
            "describe_configs",
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": t,
                        "configuration_keys": [
                            "min.insync.replicas",
                            "unclean.leader.election.enable",
                        ],
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )


@cluster_session()
def s_elect_leaders(s: ClusterSide) -> None:
    """A reassignment puts broker 2 first (the preferred leader) while broker 1 leads; a
    preferred election moves the leadership and bumps the leader epoch; OffsetForLeaderEpoch
    then answers for both epochs."""
    t = s.create("elect", assignment=[[1, 2, 3]])
    _produce(s, "produce 3 records under epoch 0", t, batch(3))
    _elect(s, "preferred election while the preferred leader leads", 0, [(t, [0])])
    _elect(s, "unclean election while the leader is alive", 1, [(t, [0])])
    _elect(s, "election of an unknown partition", 0, [(t, [7])])
    _elect(s, "election of an unknown topic", 0, [(s.topic("elect-unknown"), [0])])
    _elect(s, "election type 2 (invalid)", 2, [(t, [0])])
    _reassign(s, "reorder the replicas: 2 first", [(t, 0, [2, 1, 3])])
    _list_reassignments(s, "reassignments until done", [(t, [0])], until=_no_reassignment)
    s.wait_isr(t, lambda p: p["replica_nodes"] == [2, 1, 3] and len(p["isr_nodes"]) == 3)
    _metadata(s, "after the reorder: broker 1 still leads", t)
    _elect(s, "preferred election moves the leadership to broker 2", 0, [(t, [0])])
    s.wait_isr(t, lambda p: p["leader_id"] == 2)
    _metadata(s, "after the election", t)
    _elect(s, "a second preferred election", 0, [(t, [0])])
    _produce(s, "produce 2 records under the new epoch", t, batch(2, T0 + 1))
    _epochs(s, "epoch 0 from the new leader", t, 2, partition=0, leader_epoch=0)
    _epochs(s, "the current epoch from the new leader", t, 2, partition=0, leader_epoch=1)
    _epochs(
        s, "a stale current_leader_epoch", t, 2, partition=0, leader_epoch=0, current_leader_epoch=0
    )
    _epochs(s, "from the old leader, now a follower", t, 1, partition=0, leader_epoch=0)
    with s.via(2):
        s.call(
            "list offsets with the stale epoch",
            "list_offsets",
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": t,
                        "partitions": [
                            {"partition_index": 0, "timestamp": -1, "current_leader_epoch": 0}
                        ],
                    }
                ],
            },
        )


@cluster_session()
def s_reassignment(s: ClusterSide) -> None:
    """AlterPartitionReassignments and ListPartitionReassignments: shrink, grow and move
    replicas, and every refusal."""
    t = s.create("reassign", assignment=[[1, 2, 3], [1, 2, 3]])
    _produce(s, "produce", t, batch(4))
    _list_reassignments(s, "none in progress (all topics)", None)
    _list_reassignments(s, "none in progress (the topic)", [(t, [0, 1])])
    _list_reassignments(s, "list an unknown partition", [(t, [9])])
    _list_reassignments(s, "list an unknown topic", [(s.topic("reassign-unknown"), [0])])
    _reassign(s, "shrink partition 0 to [3, 2]", [(t, 0, [3, 2])])
    _list_reassignments(s, "after the shrink, until done", [(t, [0])], until=_no_reassignment)
    s.wait_isr(t, lambda p: p["partition_index"] != 0 or p["replica_nodes"] == [3, 2])
    _metadata(s, "after the shrink", t)
    _reassign(s, "move partition 1 to [2, 3, 1]", [(t, 1, [2, 3, 1])])
    _list_reassignments(s, "after the move, until done", [(t, [1])], until=_no_reassignment)
    s.wait_isr(t, lambda p: len(p["isr_nodes"]) == len(p["replica_nodes"]))
    _metadata(s, "after the move", t)
    _reassign(s, "grow partition 0 back to [1, 2, 3]", [(t, 0, [1, 2, 3])])
    _list_reassignments(s, "after the growth, until done", [(t, [0])], until=_no_reassignment)
    s.wait_isr(t, lambda p: len(p["isr_nodes"]) == 3)
    _metadata(s, "after the growth", t)
    _reassign(s, "a duplicate replica", [(t, 0, [1, 1, 2])])
    _reassign(s, "an unknown broker", [(t, 0, [1, 2, 99])])
    _reassign(s, "no replicas", [(t, 0, [])])
    _reassign(s, "a negative broker id", [(t, 0, [1, -1, 2])])
    _reassign(s, "cancel when none is in progress", [(t, 0, None)])
    _reassign(s, "an unknown partition", [(t, 9, [1, 2, 3])])
    _reassign(s, "an unknown topic", [(s.topic("reassign-unknown"), 0, [1, 2, 3])])
    _reassign(s, "two partitions, one refused", [(t, 0, [1, 2, 3]), (t, 1, [1, 1])])
    _metadata(s, "unchanged after the refusals", t)


@cluster_session()
def s_describe_log_dirs(s: ClusterSide) -> None:
    """Every broker describes the replicas it holds: sizes, lags, future logs."""
    t = s.create("logdirs", assignment=[[1, 2], [2, 3]])
    _produce(s, "produce", t, batch(5))
    s.wait_isr(t, lambda p: len(p["isr_nodes"]) == 2)
    for node in (1, 2, 3):
        with s.via(node):
            s.call(
                f"broker {node}: the topic",
                "describe_log_dirs",
                {"topics": [{"topic": t, "partitions": [0, 1]}]},
                until=lambda r: all(
                    p["partition_size"] > 0 or p["partition_index"] == 1
                    for d in r["results"]
                    for tp in d["topics"]
                    for p in tp["partitions"]
                ),
            )
            s.call(
                f"broker {node}: an unknown topic",
                "describe_log_dirs",
                {"topics": [{"topic": s.topic("logdirs-unknown"), "partitions": [0]}]},
            )
            s.call(
                f"broker {node}: an unknown partition",
                "describe_log_dirs",
                {"topics": [{"topic": t, "partitions": [5]}]},
            )


@cluster_session()
def s_stopped_broker(s: ClusterSide) -> None:
    """Broker 1, the leader, stops (SIGTERM: a controlled shutdown on both sides). Its
    replicas go offline, the leadership moves to broker 2 with a new leader epoch, the ISR
    shrinks to two: acks=all below min.insync.replicas 3 is refused (NOT_ENOUGH_REPLICAS),
    above min.insync.replicas 2 accepted; OffsetForLeaderEpoch answers the old epoch's end."""
    t3 = s.create("isr3", assignment=[[1, 2, 3]], **{"min.insync.replicas": "3"})
    t2 = s.create("isr2", assignment=[[1, 2, 3]], **{"min.insync.replicas": "2"})
    _produce(s, "min ISR 3, acks=all, all three up", t3, batch(2))
    _produce(s, "min ISR 2, acks=all, all three up", t2, batch(2))
    _metadata(s, "before the stop", t3, t2)
    s.stop_node(1)
    for t in (t3, t2):
        s.wait_isr(t, lambda p: p["leader_id"] != 1 and 1 not in p["isr_nodes"])
    _metadata(s, "after the stop", t3, t2)
    _produce(s, "min ISR 3, acks=all, two in the ISR", t3, batch(1, T0 + 1))
    _produce(s, "min ISR 3, acks=1, two in the ISR", t3, batch(1, T0 + 2), acks=1)
    _produce(s, "min ISR 2, acks=all, two in the ISR", t2, batch(1, T0 + 3))
    leader = s.leader(t3)
    # The acks=1 records replicated (not recorded): isr2's high watermark passes its record,
    # and the followers fetch both partitions from the same leader in the same requests.
    s.wait_high_watermark(t2, 3)
    _epochs(s, "epoch 0 from the new leader", t3, leader, partition=0, leader_epoch=0)
    _epochs(s, "the new epoch", t3, leader, partition=0, leader_epoch=1)
    _epochs(
        s,
        "a stale current_leader_epoch",
        t3,
        leader,
        partition=0,
        leader_epoch=0,
        current_leader_epoch=0,
    )
    with s.via(leader):
        s.call(
            "end offsets from the new leader",
            "list_offsets",
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {"name": t, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                    for t in (t3, t2)
                ],
            },
        )
    _elect(s, "preferred election while the preferred leader is down", 0, [(t3, [0])])
    _reassign(s, "reassign onto the stopped broker", [(t2, 0, [2, 3, 1])])
    _list_reassignments(s, "reassignments with a broker down", [(t2, [0])])


@cluster_session()
def s_stock_admin(s: ClusterSide) -> None:
    """confluent-kafka's AdminClient (librdkafka) through the recording proxy: what it sent
    for each call is its own choice (versions, batching, retries), what both brokers answered
    it is recorded off the wire."""
    from confluent_kafka import ElectionType, TopicCollection, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

    name = s.topic("stock")
    kind = dict(s.kind_configs)

    clients: list[AdminClient] = []  # kept: a client destroyed fails its futures (_DESTROY)

    def admin(bootstrap: str) -> AdminClient:
        clients.append(AdminClient({"bootstrap.servers": bootstrap, "client.id": "differential"}))
        return clients[-1]

    def create(bootstrap: str) -> Any:
        if s.name == "diskless":  # no manual placement (INVALID_REQUEST): as the others' RF
            topic = NewTopic(name, 2, 3, config=kind)
        else:
            # librdkafka: the partition count given with an assignment (not -1).
            topic = NewTopic(name, 2, replica_assignment=[[1, 2, 3], [2, 3, 1]], config=kind)
        return admin(bootstrap).create_topics([topic])[name].result(30)

    s.stock("create an RF=3 topic", {"create_topics"}, create, name)
    s.wait_leaders(name, 2)
    s.wait_isr(name, lambda p: len(p["isr_nodes"]) == 3)

    def describe(bootstrap: str) -> Any:
        d = admin(bootstrap).describe_topics(TopicCollection([name]))[name].result(30)
        return [
            (p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
            for p in d.partitions
        ]

    s.stock("describe the topic", {"describe_topic_partitions", "metadata"}, describe, name)

    def elect(bootstrap: str) -> Any:
        result = admin(bootstrap).elect_leaders(
            ElectionType.PREFERRED, [TopicPartition(name, 0), TopicPartition(name, 7)]
        )
        # By partition, the error's name (its text is free, as error_message).
        return {str(tp.partition): err and err.name() for tp, err in result.result(30).items()}

    s.stock("preferred election, one unknown partition", {"elect_leaders"}, elect, name)

    def configs(bootstrap: str) -> Any:
        resource = ConfigResource(ResourceType.TOPIC, name)
        got = admin(bootstrap).describe_configs([resource])[resource].result(30)
        return {k: got[k].value for k in ("min.insync.replicas", "cleanup.policy")}

    s.stock("topic configs", {"describe_configs"}, configs, name)
