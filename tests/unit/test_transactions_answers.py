"""What the transactional APIs answer a client, per request version, where Apache Kafka 4.4's
answers were found to differ (the differential sessions txn_end_states, txn_offsets,
txn_admin and txn_timeout, tests/differential/sessions_txn.py): an empty transactional id,
what is not in the transaction (KIP-890's TRANSACTION_ABORTABLE), a fenced TxnOffsetCommit,
the fields of a DescribeTransactions entry. The coordinator's state behind them is the
contract suite's (test_transactions_contract.py); here it is a stand-in giving each answer."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.transactions import transactions_handler as transactions
from broker.transactions.txn_coordinator import TransactionCoordinator
from storage.catalog import Topic
from storage.transactions import (
    COMPLETE_COMMIT,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    TransactionState,
)
from tests.unit._handlers import request_and_context, settled

E = ErrorCode
TOPIC = Topic("orders", uuid.UUID(int=7), 3)


class Untouchable:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"storage used: {name}")


class Topics:
    async def ensure(self, wanted: Any) -> None:
        list(wanted)

    def get(self, name: str) -> Topic | None:
        return TOPIC if name == TOPIC.name else None

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return TOPIC if topic_id == TOPIC.topic_id else None


class Groups:
    def owns(self, group_id: str) -> bool:
        return True

    async def is_share_group(self, group_id: str) -> bool:
        return False


class StubTransactions:
    """The coordinator's answers: ``error`` for every change; nothing held in a transaction;
    ``states`` for DescribeTransactions."""

    def __init__(self, error: int = NONE, states: dict[str, TransactionState] | None = None):
        self.error = error
        self.states = states or {}

    async def commit_offsets(self, *args: Any) -> int:
        return self.error

    async def verify(self, *args: Any) -> tuple[int, set[Any]]:
        return self.error, set()

    async def get(self, ids: list[str]) -> list[TransactionState | None]:
        return [self.states.get(i) for i in ids]


class Broker:
    def __init__(self, txns: Any) -> None:
        self.authorizer = None  # no authorizer: every request allowed
        self.topics = Topics()
        self.transactions = txns
        self.coordinator = Untouchable()
        self.groups = type("G", (), {"coordinator": Groups()})()
        self.config = BrokerConfig()


async def answer(handler: Any, broker: Broker, key: int, version: int, data: dict) -> Any:
    request, ctx = request_and_context(key, version, data, "User:ANONYMOUS", "unit")
    return await settled(await handler(broker, ctx, request))


def txn_offset_commit(version: int) -> dict[str, Any]:
    return {
        "transactional_id": "tx",
        "group_id": "g",
        "producer_id": 1,
        "producer_epoch": 0,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 5,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }


async def test_txn_offset_commit_of_a_group_not_in_the_transaction_is_abortable_from_v4() -> None:
    broker = Broker(StubTransactions(INVALID_TXN_STATE))
    for version, expected in ((2, E.invalid_txn_state), (3, E.invalid_txn_state)):
        got = await answer(
            transactions.txn_offset_commit, broker, 28, version, txn_offset_commit(version)
        )
        assert got.topics[0].partitions[0].error_code == expected, version
    got = await answer(transactions.txn_offset_commit, broker, 28, 4, txn_offset_commit(4))
    assert got.topics[0].partitions[0].error_code == E.transaction_abortable


async def test_a_fenced_txn_offset_commit_is_invalid_producer_epoch_at_every_version() -> None:
    broker = Broker(StubTransactions(PRODUCER_FENCED))
    for version in (2, 3, 4):
        got = await answer(
            transactions.txn_offset_commit, broker, 28, version, txn_offset_commit(version)
        )
        assert got.topics[0].partitions[0].error_code == E.invalid_producer_epoch, version


async def test_verifying_a_partition_not_in_the_transaction_is_abortable() -> None:
    broker = Broker(StubTransactions(NONE))
    got = await answer(
        transactions.add_partitions_to_txn,
        broker,
        24,
        4,
        {
            "transactions": [
                {
                    "transactional_id": "tx",
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "verify_only": True,
                    "topics": [{"name": "orders", "partitions": [0]}],
                }
            ]
        },
    )
    [txn] = got.results_by_transaction
    assert txn.topic_results[0].results_by_partition[0].partition_error_code == (
        E.transaction_abortable
    )


async def test_an_empty_transactional_id_is_an_invalid_request_and_reads_nothing() -> None:
    coordinator = TransactionCoordinator(
        Untouchable(),  # type: ignore[arg-type]
        Untouchable(),  # type: ignore[arg-type]
        1,
        lambda: [],
        900_000,
        10_000,
    )
    broker = Broker(coordinator)
    got = await answer(
        transactions.end_txn,
        broker,
        26,
        4,
        {"transactional_id": "", "producer_id": 1, "producer_epoch": 0, "committed": True},
    )
    assert got.error_code == E.invalid_request
    got = await answer(
        transactions.add_offsets_to_txn,
        broker,
        25,
        4,
        {"transactional_id": "", "producer_id": 1, "producer_epoch": 0, "group_id": "g"},
    )
    assert got.error_code == E.invalid_request
    got = await answer(
        transactions.add_partitions_to_txn,
        broker,
        24,
        3,
        {
            "v3_and_below_transactional_id": "",
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": "orders", "partitions": [0]}],
        },
    )
    result = got.results_by_topic_v3_and_below[0].results_by_partition[0]
    assert result.partition_error_code == E.invalid_request


async def test_describe_transactions_entries_as_kafka_fills_them() -> None:
    ended = TransactionState("done", 42, 3, COMPLETE_COMMIT, 60_000, 1_700_000_000_000, 1)
    broker = Broker(StubTransactions(states={"done": ended}))
    got = await answer(
        transactions.describe_transactions,
        broker,
        65,
        0,
        {"transactional_ids": ["done", "unknown", ""]},
    )
    done, unknown, empty = got.transaction_states
    # An ended transaction still shows when it began.
    assert (done.error_code, done.transaction_state, done.producer_epoch) == (
        E.none,
        COMPLETE_COMMIT,
        3,
    )
    assert done.transaction_start_time.timestamp() * 1000 == 1_700_000_000_000
    # Refused entries carry the schema's zeros, an empty id is an invalid request.
    assert unknown.error_code == E.transactional_id_not_found
    assert empty.error_code == E.invalid_request
    for entry in (unknown, empty):
        assert (entry.producer_id, entry.producer_epoch) == (0, 0)
        assert entry.transaction_start_time.timestamp() == 0


class EndingTransactions(StubTransactions):
    """EndTxn's two coordinator calls: up to v4 ``end``, from v5 ``end_tv2``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def end(self, *args: Any) -> int:
        self.calls.append("end")
        return NONE

    async def end_tv2(self, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
        self.calls.append("end_tv2")
        return NONE, pid, epoch + 1


async def test_end_txn_v5_bumps_the_epoch_and_answers_the_new_one() -> None:
    """KIP-890 part 2: EndTxn v5 ends with an epoch bump and answers the producer id and
    epoch to go on with; v4 ends without one (its answer has no such fields)."""
    txns = EndingTransactions()
    broker = Broker(txns)
    request = {"transactional_id": "tx", "producer_id": 9, "producer_epoch": 3, "committed": True}
    got = await answer(transactions.end_txn, broker, 26, 5, request)
    assert (got.error_code, got.producer_id, got.producer_epoch) == (E.none, 9, 4)
    got = await answer(transactions.end_txn, broker, 26, 4, request)
    assert got.error_code == E.none
    assert txns.calls == ["end_tv2", "end"]


class AddingTransactions(StubTransactions):
    """Records the groups added to the transaction; offsets commit only once added."""

    def __init__(self, add_error: int = NONE) -> None:
        super().__init__()
        self.add_error = add_error
        self.added: list[str] = []

    async def add(
        self, tid: str, pid: int, epoch: int, partitions: Any = (), groups: Any = ()
    ) -> int:
        if self.add_error == NONE:
            self.added.extend(groups)
        return self.add_error

    async def commit_offsets(self, tid: str, pid: int, epoch: int, group: str, rows: Any) -> int:
        return NONE if group in self.added else INVALID_TXN_STATE


async def test_txn_offset_commit_v5_adds_the_group_to_the_transaction_itself() -> None:
    """KIP-890 part 2: a TV2 client sends no AddOffsetsToTxn; TxnOffsetCommit v5 adds the
    group (as Kafka's group coordinator does); v4 does not (the group must be added)."""
    txns = AddingTransactions()
    broker = Broker(txns)
    got = await answer(transactions.txn_offset_commit, broker, 28, 4, txn_offset_commit(4))
    assert got.topics[0].partitions[0].error_code == E.transaction_abortable
    got = await answer(transactions.txn_offset_commit, broker, 28, 5, txn_offset_commit(5))
    assert got.topics[0].partitions[0].error_code == E.none
    assert txns.added == ["g"]
    # A refused add is the answer: a fenced producer's commit is INVALID_PRODUCER_EPOCH.
    fenced = Broker(AddingTransactions(PRODUCER_FENCED))
    got = await answer(transactions.txn_offset_commit, fenced, 28, 5, txn_offset_commit(5))
    assert got.topics[0].partitions[0].error_code == E.invalid_producer_epoch
