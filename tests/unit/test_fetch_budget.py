"""FetchBudget: Kafka's size limits of one Fetch answer (ReplicaManager.readFromLog with
minOneMessage, KIP-74), here on diskless find results."""

from __future__ import annotations

from broker.logs.fetch_slots import FetchBudget
from storage.coordinator import BatchLocation, FindResult
from storage.transactions import AbortedTransaction


def result(*sizes: int, aborted: list[AbortedTransaction] | None = None) -> FindResult:
    batches = [BatchLocation("obj", 0, size, i * 10, i * 10 + 9) for i, size in enumerate(sizes)]
    return FindResult(0, 0, 100, batches, 100, aborted)


def kept(r: FindResult) -> list[int]:
    return [b.byte_size for b in r.batches]


def test_the_first_batch_of_the_answer_goes_whole_then_the_limits_hold() -> None:
    budget = FetchBudget(1000)
    # Larger than both limits: still returned, being the answer's first batch.
    assert kept(budget.keep(result(1500, 10), 1200)) == [1500]
    assert (budget.left, budget.min_one) == (0, False)
    assert kept(budget.keep(result(1), 1000)) == []


def test_each_partition_takes_what_fits_of_what_is_left() -> None:
    budget = FetchBudget(1000)
    assert kept(budget.keep(result(), 1000)) == []  # an empty partition changes nothing
    assert budget.min_one
    assert kept(budget.keep(result(300, 300, 300), 700)) == [300, 300]
    assert kept(budget.keep(result(500), 1000)) == []  # 400 left: the batch does not fit
    assert kept(budget.keep(result(400, 1), 1000)) == [400]
    assert budget.left == 0


def test_aborted_transactions_follow_the_batches_kept() -> None:
    aborted = [AbortedTransaction(7, 5), AbortedTransaction(8, 15)]
    budget = FetchBudget(100)
    trimmed = budget.keep(result(100, 100, aborted=aborted), 1000)
    assert kept(trimmed) == [100]
    assert trimmed.aborted == [AbortedTransaction(7, 5)]  # 8's first offset is past 9
    assert budget.keep(result(100, aborted=aborted), 1000).aborted == []
    # read_uncommitted: no list to trim.
    assert FetchBudget(0).keep(result(100, 100), 1000).aborted is None
