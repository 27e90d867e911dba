"""ElectLeaders at the broker: what Apache Kafka answers before the controller decides
(found by the three-broker differential sessions, tests/differential/sessions_cluster.py)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.admin import elect_leaders
from common.acl import AclBinding
from tests.unit.test_authorization_handlers import PRINCIPAL, FakeBroker, call

E = ErrorCode
# ALTER on the cluster: allowed to elect.
ALTER_CLUSTER = AclBinding(4, "kafka-cluster", 3, PRINCIPAL, "*", 7, 3)


async def elect(election_type: int, partitions: Any) -> Any:
    return await call(
        elect_leaders.elect_leaders,
        FakeBroker(ALTER_CLUSTER),  # its controller fails the test if asked
        43,
        2,
        {"election_type": election_type, "topic_partitions": partitions},
    )


async def test_an_unknown_election_type_is_an_invalid_request_of_the_whole_request() -> None:
    # Kafka 4.4: INVALID_REQUEST at the top and for every partition named, "Unknown election
    # type 2" (Sluice answered the partitions only, with the top-level error NONE).
    answer = await elect(2, [{"topic": "orders", "partitions": [0, 1]}])
    assert answer.error_code == E.invalid_request
    (topic,) = answer.replica_election_results
    assert [(p.partition_id, p.error_code, p.error_message) for p in topic.partition_result] == [
        (0, E.invalid_request, "Unknown election type 2"),
        (1, E.invalid_request, "Unknown election type 2"),
    ]
    # Every partition asked for (null): the top-level error alone.
    answer = await elect(-1, None)
    assert answer.error_code == E.invalid_request and answer.replica_election_results == ()
