"""Transaction sessions: the coordinator's answers to a producer's life, the unhappy paths
first (a transaction the coordinator aborted on timeout, EndTxn in every state, retries,
fenced epochs, KIP-360 re-initialisation), and the admin views of transactions.

Each session uses its own transactional ids and topics (named after it). Requests a client
retries on (CONCURRENT_TRANSACTIONS, coordinator loading) are resent until settled, as a
client would; everything else is recorded as first answered.
"""

from __future__ import annotations

import time
from typing import Any

from tests.e2e._batches import Record, build_raw_batch, encode_record

from .compare import code
from .sessions import T0, find_transaction_coordinator, session
from .sessions_groups import Member, errors, find_group_coordinator, offset_fetch
from .side import TXN_COORDINATOR_WARMING, Side

TRANSACTIONAL = 0x10  # record batch attribute bit 4
UNSTABLE = 88  # UNSTABLE_OFFSET_COMMIT
# Both brokers run their timeout sweep this often (record.py): a transaction whose timeout
# has passed is aborted within about this long.
ABORT_SWEEP_MS = 500
TIMEOUT_WAIT_S = 30.0


def settled(resp: Any) -> bool:
    """Answered with something a client would not simply resend."""
    if "error_code" in resp:
        return code(resp["error_code"]) not in TXN_COORDINATOR_WARMING
    return True


def txn_batch(pid: int, epoch: int, seq: int, n: int = 2, ts: int = T0) -> bytes:
    payload = b"".join(
        encode_record(Record(f"k{i}".encode(), f"v{i}".encode()), i) for i in range(n)
    )
    return build_raw_batch(
        payload,
        records_count=n,
        base_timestamp_ms=ts,
        attributes=TRANSACTIONAL,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


# Without an explicit version the sessions speak transaction version 1, as written: the
# newest versions before KIP-890 part 2 (s_txn_v2 asks for its own versions).
_TV1_MAX = {"produce": 11, "end_txn": 4, "txn_offset_commit": 4}


class Txn:
    """One transactional producer's requests, recorded under labels."""

    def __init__(self, s: Side, transactional_id: str, timeout_ms: int = 60_000) -> None:
        self.s = s
        self.id = transactional_id
        self.timeout_ms = timeout_ms
        self.pid = -1
        self.epoch = -1

    def _tv1(self, api: str, version: int | None) -> int:
        return min(self.s.version(api), _TV1_MAX[api]) if version is None else version

    def init(
        self, label: str, *, pid: int = -1, epoch: int = -1, version: int | None = None
    ) -> Any:
        resp = self.s.call(
            label,
            "init_producer_id",
            {
                "transactional_id": self.id,
                "transaction_timeout": self.timeout_ms,
                "producer_id": pid,
                "producer_epoch": epoch,
            },
            version=version,
            until=settled,
        )
        if resp is not None and code(resp["error_code"]) == 0:
            self.pid, self.epoch = resp["producer_id"], resp["producer_epoch"]
        return resp

    def add_partitions(
        self,
        label: str,
        topic: str,
        partitions: list[int],
        *,
        epoch: int | None = None,
        pid: int | None = None,
        version: int = 3,
        retry: bool = True,
    ) -> Any:
        return self.s.call(
            label,
            "add_partitions_to_txn",
            {
                "v3_and_below_transactional_id": self.id,
                "v3_and_below_producer_id": self.pid if pid is None else pid,
                "v3_and_below_producer_epoch": self.epoch if epoch is None else epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": partitions}],
            },
            version=version,
            until=_partitions_settled if retry else None,
        )

    def verify(
        self,
        label: str,
        topic: str,
        partitions: list[int],
        *,
        epoch: int | None = None,
        verify_only: bool = True,
    ) -> Any:
        """AddPartitionsToTxn v4 verify_only: what a partition leader asks (KIP-890)."""
        return self.s.call(
            label,
            "add_partitions_to_txn",
            {
                "transactions": [
                    {
                        "transactional_id": self.id,
                        "producer_id": self.pid,
                        "producer_epoch": self.epoch if epoch is None else epoch,
                        "verify_only": verify_only,
                        "topics": [{"name": topic, "partitions": partitions}],
                    }
                ]
            },
            version=4,
        )

    def produce(
        self,
        label: str,
        topic: str,
        partition: int,
        seq: int,
        *,
        epoch: int | None = None,
        version: int | None = None,
    ) -> Any:
        ep = self.epoch if epoch is None else epoch
        return self.s.call(
            label,
            "produce",
            {
                "transactional_id": self.id,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [
                    {
                        "name": topic,
                        "partition_data": [
                            {"index": partition, "records": txn_batch(self.pid, ep, seq)}
                        ],
                    }
                ],
            },
            version=self._tv1("produce", version),
        )

    def end(
        self,
        label: str,
        commit: bool,
        *,
        epoch: int | None = None,
        pid: int | None = None,
        transactional_id: str | None = None,
        version: int | None = None,
    ) -> Any:
        return self.s.call(
            label,
            "end_txn",
            {
                "transactional_id": self.id if transactional_id is None else transactional_id,
                "producer_id": self.pid if pid is None else pid,
                "producer_epoch": self.epoch if epoch is None else epoch,
                "committed": commit,
            },
            version=self._tv1("end_txn", version),
            until=settled,
        )

    def add_offsets(
        self, label: str, group: str, *, epoch: int | None = None, version: int | None = None
    ) -> Any:
        return self.s.call(
            label,
            "add_offsets_to_txn",
            {
                "transactional_id": self.id,
                "producer_id": self.pid,
                "producer_epoch": self.epoch if epoch is None else epoch,
                "group_id": group,
            },
            version=version,
            until=settled,
        )

    def commit_offsets(
        self,
        label: str,
        group: str,
        topic: str,
        offset: int,
        *,
        epoch: int | None = None,
        version: int | None = None,
        member: tuple[str, int] = ("", -1),
    ) -> Any:
        """TxnOffsetCommit; ``member``: the consumer's (member id, generation) (KIP-447)."""
        return self.s.call(
            label,
            "txn_offset_commit",
            {
                "transactional_id": self.id,
                "group_id": group,
                "producer_id": self.pid,
                "producer_epoch": self.epoch if epoch is None else epoch,
                "generation_id": member[1],
                "member_id": member[0],
                "group_instance_id": None,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": offset,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            },
            version=self._tv1("txn_offset_commit", version),
            until=lambda r: all(
                code(p["error_code"]) not in TXN_COORDINATOR_WARMING
                for t in r["topics"]
                for p in t["partitions"]
            ),
        )

    def describe(self, label: str, *ids: str) -> Any:
        return self.s.call(
            label, "describe_transactions", {"transactional_ids": list(ids or [self.id])}
        )

    def state(self) -> str:
        resp = self.s.request("describe_transactions", {"transactional_ids": [self.id]})
        return str(resp["transaction_states"][0]["transaction_state"])

    def wait_ended(self) -> None:
        """Wait (not recorded) until an ended transaction's markers are written: Kafka
        answers EndTxn before (PrepareCommit/PrepareAbort meanwhile), as Sluice does for
        classic partitions."""
        self.wait_state("CompleteCommit", "CompleteAbort")

    def wait_state(self, *states: str) -> None:
        """Wait (not recorded) until the coordinator shows one of ``states``."""
        deadline = time.monotonic() + TIMEOUT_WAIT_S
        while self.state() not in states:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.s.name}: {self.id} never reached {states}")
            time.sleep(0.1)


def _partitions_settled(resp: Any) -> bool:
    return all(
        code(p["partition_error_code"]) not in TXN_COORDINATOR_WARMING
        for t in resp["results_by_topic_v3_and_below"]
        for p in t["results_by_partition"]
    )


def _committed_offsets(s: Side, label: str, topic: str) -> None:
    s.call(
        label,
        "list_offsets",
        {
            "replica_id": -1,
            "isolation_level": 1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )


@session()
def s_txn_timeout(s: Side) -> None:
    """A transaction the coordinator aborts on timeout (the producer was cut off), then
    everything that producer sends with its old epoch, then its re-initialisation."""
    t = "txn-timeout"
    s.create_topic(t)
    find_transaction_coordinator(s, "diff-txn-timeout")
    p = Txn(s, "diff-txn-timeout", timeout_ms=1000)
    p.init("init (timeout 1 s)")
    old = p.epoch
    p.add_partitions("add partition 0", t, [0])
    p.produce("produce in the transaction", t, 0, 0)
    p.wait_state("CompleteAbort")
    p.describe("describe after the timeout abort")
    _committed_offsets(s, "last stable offset after the timeout abort", t)
    p.end("end commit with the old epoch", True, epoch=old)
    p.end("end commit with the old epoch, EndTxn v1", True, epoch=old, version=1)
    p.end("end abort with the old epoch", False, epoch=old)
    p.add_partitions("add partitions with the old epoch", t, [0], epoch=old, retry=False)
    p.add_offsets("add offsets with the old epoch", "txn-timeout-group", epoch=old)
    p.commit_offsets("txn offset commit with the old epoch", "txn-timeout-group", t, 1, epoch=old)
    p.commit_offsets(
        "txn offset commit with the old epoch, v3", "txn-timeout-group", t, 1, epoch=old, version=3
    )
    p.produce("produce with the old epoch", t, 0, 2, epoch=old)
    p.init("re-init with the old epoch (KIP-360)", pid=p.pid, epoch=old)
    p.init("re-init with the current epoch (KIP-360)", pid=p.pid, epoch=old + 1)
    p.init("the same re-init retried", pid=p.pid, epoch=old + 1)
    p.describe("describe after the re-init")
    p.init("re-init with an epoch long fenced", pid=p.pid, epoch=old)
    p.init("re-init with an epoch long fenced, InitProducerId v3", pid=p.pid, epoch=old, version=3)
    p.add_partitions("a new transaction after the re-init", t, [0])
    p.produce("produce in it", t, 0, 0)
    p.init("re-init with the current epoch while it is open (KIP-360)", pid=p.pid, epoch=p.epoch)
    p.describe("describe after that re-init")
    _committed_offsets(s, "last stable offset at the end", t)


@session()
def s_txn_end_states(s: Side) -> None:
    """EndTxn in every state a producer can meet it in: nothing begun, retried, the other
    outcome after an end, wrong ids and epochs; then a second producer fencing the first."""
    t = "txn-end"
    s.create_topic(t)
    find_transaction_coordinator(s, "diff-txn-end")
    p = Txn(s, "diff-txn-end")
    p.init("init")
    p.end("abort with no transaction begun (Empty)", False)
    p.end("commit with no transaction begun (Empty)", True)
    p.add_partitions("add partition 0", t, [0])
    p.add_partitions("add partition 0 again", t, [0])
    p.add_partitions("add an unknown partition", t, [0, 5], retry=False)
    p.add_partitions("add a partition of an unknown topic", "txn-end-unknown", [0], retry=False)
    p.produce("produce", t, 0, 0)
    p.verify("verify the added partition (v4 verify_only)", t, [0])
    s.create_topic("txn-end-other")
    p.produce("produce to a partition not added to the transaction", "txn-end-other", 0, 0)
    for v in (10, 9):
        p.produce(f"the same, Produce v{v}", "txn-end-other", 0, 0, version=v)
    p.end("commit", True)
    p.end("commit retried", True)
    p.end("abort after the commit (the other outcome)", False)
    p.verify("verify after the commit", t, [0])
    p.verify("add by a v4 batch (not verify_only)", t, [0], verify_only=False)
    p.verify("verify after the v4 add", t, [0])
    p.end("commit the v4-added transaction", True)
    p.add_partitions("begin a second transaction", t, [0])
    p.produce("produce in the second transaction", t, 0, 2)
    p.end("abort", False)
    p.end("abort retried", False)
    p.end("commit after the abort", True)
    p.end("end with an epoch from the future", True, epoch=p.epoch + 3)
    p.end("end with an epoch from the future, EndTxn v1", True, epoch=p.epoch + 3, version=1)
    p.add_partitions(
        "add with an epoch from the future, AddPartitionsToTxn v1",
        t,
        [0],
        epoch=p.epoch + 3,
        version=1,
        retry=False,
    )
    p.add_offsets("add offsets with an epoch from the future", "txn-end-group", epoch=p.epoch + 3)
    p.add_offsets(
        "add offsets with an epoch from the future, AddOffsetsToTxn v1",
        "txn-end-group",
        epoch=p.epoch + 3,
        version=1,
    )
    p.end("end with another producer id", True, pid=p.pid + 1000)
    p.end("end an unknown transactional id", True, transactional_id="diff-txn-end-unknown")
    p.end("end with an empty transactional id", True, transactional_id="")
    nameless = Txn(s, "")
    nameless.pid, nameless.epoch = p.pid, p.epoch
    nameless.add_partitions("add with an empty transactional id", t, [0], retry=False)
    nameless.add_offsets("add offsets with an empty transactional id", "txn-end-group")
    p.add_partitions("add with another producer id", t, [0], pid=p.pid + 1000, retry=False)
    p.add_partitions("add with an epoch from the future", t, [0], epoch=p.epoch + 3, retry=False)
    _committed_offsets(s, "last stable offset", t)
    # A second producer with the same id while a transaction is open: it aborts and fences.
    p.add_partitions("begin a third transaction", t, [0])
    p.produce("produce in the third transaction", t, 0, 4)
    first = p.epoch
    q = Txn(s, "diff-txn-end")
    first_answer = s.call(
        "a second producer's init, its first answer",
        "init_producer_id",
        {"transactional_id": q.id, "transaction_timeout": q.timeout_ms},
    )
    settled_label = "a second producer's init, once settled (fences the first)"
    if code(first_answer["error_code"]) in TXN_COORDINATOR_WARMING:
        q.init(settled_label)  # the client's retry
    else:  # answered at once: that is the settled answer
        s.steps[settled_label] = s.steps["a second producer's init, its first answer"]
        q.pid, q.epoch = first_answer["producer_id"], first_answer["producer_epoch"]
    p.end("the fenced producer's commit", True, epoch=first)
    p.add_partitions("the fenced producer's add partitions", t, [0], epoch=first, retry=False)
    p.produce("the fenced producer's produce", t, 0, 6, epoch=first)
    q.describe("describe after the fence")
    _committed_offsets(s, "last stable offset after the fence", t)


@session(kind_free=True)
def s_txn_offsets(s: Side) -> None:
    """Offsets in a transaction (AddOffsetsToTxn, TxnOffsetCommit) and OffsetFetch meanwhile."""
    t = "txn-offsets"
    s.create_topic(t)
    group = "txn-offsets-group"
    find_transaction_coordinator(s, "diff-txn-offsets")
    find_group_coordinator(s, group)
    p = Txn(s, "diff-txn-offsets")
    p.init("init")
    p.commit_offsets("txn offset commit before add offsets", group, t, 1)
    p.commit_offsets("txn offset commit before add offsets, v3", group, t, 1, version=3)
    p.commit_offsets("txn offset commit before add offsets, v2", group, t, 1, version=2)
    p.add_offsets("add offsets", group)
    p.add_offsets("add offsets again", group)
    p.commit_offsets("txn offset commit", group, t, 5)
    p.commit_offsets("txn offset commit of an unknown topic", group, "txn-offsets-unknown", 5)

    def fetch(label: str, require_stable: bool) -> None:
        offset_fetch(s, label, group, t, [0], require_stable)

    def fetch_settled(label: str) -> None:
        # Kafka writes the markers of an ended transaction's offsets after answering EndTxn:
        # UNSTABLE_OFFSET_COMMIT (retriable) meanwhile, which a client retries.
        offset_fetch(s, label, group, t, [0], True, until=lambda r: UNSTABLE not in errors(r))

    fetch("offset fetch while pending", False)
    fetch("offset fetch while pending, require_stable", True)
    p.end("commit", True)
    fetch_settled("offset fetch after the commit")
    p.add_offsets("add offsets, second transaction", group)
    p.commit_offsets("txn offset commit, second transaction", group, t, 9)
    p.end("abort", False)
    fetch_settled("offset fetch after the abort")
    p.add_offsets("add offsets with an empty group id", "")
    # KIP-447: the consumer's group membership, checked by the group coordinator.
    m = Member(s, group, t)
    m.join("a consumer joins the group")
    m.join("it joins with its member id")
    m.sync("it syncs")
    p.add_offsets("add offsets, third transaction", group)
    member = (m.member_id, m.generation)
    p.commit_offsets("txn offset commit as the member", group, t, 11, member=member)
    p.commit_offsets("txn offset commit, wrong generation", group, t, 12, member=(m.member_id, 99))
    p.commit_offsets(
        "txn offset commit, unknown member", group, t, 12, member=("unknown-member", 1)
    )
    p.end("commit the third", True)
    fetch_settled("offset fetch after the third")
    m.leave("the consumer leaves")


@session(kind_free=True)
def s_txn_admin(s: Side) -> None:
    """DescribeTransactions and ListTransactions, with their filters."""
    t = "txn-admin"
    s.create_topic(t)
    find_transaction_coordinator(s, "diff-txn-admin")
    p = Txn(s, "diff-txn-admin")
    p.init("init")
    p.describe("describe, Empty")
    p.add_partitions("add partition 0", t, [0])
    p.describe("describe, Ongoing")
    p.describe("describe an unknown and an empty id", "diff-txn-admin-unknown", "")

    def listing(label: str, **body: Any) -> None:
        s.call(
            label,
            "list_transactions",
            {"state_filters": [], "producer_id_filters": [], "duration_filter": -1, **body},
        )

    listing("list by producer id", producer_id_filters=[p.pid])
    listing(
        "list by producer id and state Ongoing",
        producer_id_filters=[p.pid],
        state_filters=["Ongoing"],
    )
    listing(
        "list by producer id and state Empty", producer_id_filters=[p.pid], state_filters=["Empty"]
    )
    listing(
        "list with an unknown state filter",
        producer_id_filters=[p.pid],
        state_filters=["Ongoing", "NoSuchState"],
    )
    listing("list ongoing for over an hour", producer_id_filters=[p.pid], duration_filter=3_600_000)
    listing("list ongoing for over 0 ms", producer_id_filters=[p.pid], duration_filter=0)
    listing("list an unknown producer id", producer_id_filters=[987_654_321])
    p.end("commit", True)
    p.wait_ended()
    p.describe("describe, CompleteCommit")
    listing(
        "list by producer id and state CompleteCommit",
        producer_id_filters=[p.pid],
        state_filters=["CompleteCommit"],
    )


@session()
def s_txn_v2(s: Side) -> None:
    """Transaction version 2 (KIP-890 part 2), as Kafka 4.x clients use it: Produce v12
    adds the partition itself (no AddPartitionsToTxn), EndTxn v5 bumps the epoch and answers
    it; retries with the old epoch, the other outcome, a late batch of the ended
    transaction, an end with nothing ongoing, TxnOffsetCommit v5 without AddOffsetsToTxn."""
    t, group = "txn-v2", "txn-v2-group"
    s.create_topic(t)
    find_transaction_coordinator(s, "diff-txn-v2")
    find_group_coordinator(s, group)
    p = Txn(s, "diff-txn-v2")
    p.init("init")

    def went_on(answer: Any) -> None:
        # The epoch an EndTxn v5 answered is the one to go on with.
        if isinstance(answer, dict) and str(answer.get("error_code", "")).startswith("none"):
            p.epoch = answer["producer_epoch"]

    p.produce("produce v12 without AddPartitionsToTxn", t, 0, 0, version=12)
    first = p.epoch
    done = p.end("commit (EndTxn v5)", True, version=5)
    p.end("commit retried with the old epoch", True, version=5)
    p.end("abort retried with the old epoch (the other outcome)", False, version=5)
    went_on(done)
    p.produce("a late batch of the ended transaction", t, 0, 1, epoch=first, version=12)
    p.end("commit with the new epoch, nothing ongoing", True, version=5)
    went_on(p.end("abort with the new epoch, nothing ongoing", False, version=5))
    p.end("an epoch two behind", True, epoch=p.epoch - 2, version=5)
    p.produce("produce v12 at the newest epoch", t, 0, 0, version=12)
    p.commit_offsets("offsets v5 without AddOffsetsToTxn", group, t, 1, version=5)
    went_on(p.end("commit (EndTxn v5) with offsets", True, version=5))
    p.commit_offsets("offsets v5 with nothing ongoing at the new epoch", group, t, 1, version=5)
    p.end("abort the transaction the offsets began", False, version=5)
    _committed_offsets(s, "last stable offset", t)


@session()
def s_txn_sequence_reused(s: Side) -> None:
    """A batch of an aborted transaction written, then its sequence numbers used again by the
    producer's next transaction (same epoch): what librdkafka sends when it purged a record
    whose request failed in transport ("possibly persisted") while aborting, and reuses its
    sequence in the next transaction (seen in the nemesis: the new record was answered as a
    duplicate of the aborted one, a committed transaction missing a record)."""
    t = "txn-seq-reused"
    s.create_topic(t)
    find_transaction_coordinator(s, "diff-txn-seq-reused")
    p = Txn(s, "diff-txn-seq-reused")
    p.init("init")
    p.add_partitions("add partition 0", t, [0])
    p.produce("produce seq 0 in the first transaction", t, 0, 0)
    p.end("abort", False)
    p.wait_ended()
    p.add_partitions("add partition 0 in the second transaction", t, [0])
    p.produce("seq 0 again in the second transaction", t, 0, 0)
    p.produce("seq 2 in the second transaction", t, 0, 2)
    p.end("commit", True)
    p.wait_ended()
    _committed_offsets(s, "last stable offset", t)
    p.add_partitions("add partition 0 in the third transaction", t, [0])
    p.produce("seq 2 again in the third transaction (a committed batch's)", t, 0, 2)
    p.produce("seq 4 in the third transaction", t, 0, 4)
    p.end("commit the third", True)
