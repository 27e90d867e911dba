"""The append path: buffer → one object for many partitions → one commit → answers.

Validated batches from every connection go into one buffer, and a flush uploads the whole
buffer as one object and then makes one coordinator call that assigns offsets to all its
batches. When to flush is the group-commit policy (``produce.commit.mode``):

- adaptive (default): an idle broker flushes at once (``produce.commit.min.ms`` after the
  first batch, 0 by default), so a lone producer waits about one PUT plus one commit. While
  the pipeline is busy, new batches gather in the buffer and are flushed the moment it frees:
  objects grow with the load, with one upload at a time at moderate load. Busy means an
  upload in flight, or two objects not committed yet. Commits are serial (in flush order),
  so the next upload may overlap the commit before it, but objects started faster than
  commits end would only queue behind each other's commits: when commit_file is slower
  than a PUT (a loaded database, small objects), objects grow instead.
- fixed: every buffer waits ``produce.commit.interval.ms`` from its first batch.

In both modes no batch waits longer than ``produce.commit.interval.ms`` (or one period of
an explicit PUT budget set below one object per interval), and a buffer holding
``produce.buffer.max.bytes`` is flushed at once (uploads may then overlap). Commits
happen strictly in flush order, so a producer's pipelined requests keep their sequence order.

The PUT budget (``produce.objects.per.second.max``, resolved by BrokerConfig: 5 per second on
S3 by default, none on the embedded store) is a token bucket: a quiet broker has a burst of
objects saved up, so the first batch after a quiet period is still written at once; under
steady load objects go out at the budget's rate and gather what arrives in between. A full
buffer is written at once whatever the budget says: past budget x buffer size per second
(40 MiB/s at the defaults) the broker keeps up with its producers and spends more PUTs, each
of a full object, rather than holding back acknowledgements without bound.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.partition_log import PartitionAppend, PartitionResult
from broker.server.metrics import METRICS
from protocol.records import TRANSACTIONAL_BIT, stamp_log_append_time
from storage.coordinator import (
    BatchCoordinator,
    BatchToCommit,
    CommitResult,
    CoordinatorUnavailable,
)
from storage.objects import ObjectStore, ObjectStoreError, new_data_key
from storage.objects.block_cache import BlockCache
from storage.outage import OutageLog

log = logging.getLogger(__name__)

ADAPTIVE = "adaptive"
FIXED = "fixed"
COMMIT_MODES = (ADAPTIVE, FIXED)


class FlushFailed(Exception):
    # The object store or the batch coordinator did not take the flush (after their own
    # retries): an outage, logged as one (storage.outage).
    dependency_outage = True

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


class _Buffer:
    __slots__ = ("appends", "retry_keys", "size", "waiters")

    def __init__(self) -> None:
        self.appends: list[PartitionAppend] = []
        self.size = 0
        # (future, number of appends it covers) in submission order
        self.waiters: list[tuple[asyncio.Future[list[PartitionResult]], int]] = []
        # (index in appends, its _retry_key, the future its retries wait on): the
        # idempotent producers' appends, see Appender.submit
        self.retry_keys: list[tuple[int, tuple[object, ...], asyncio.Future[PartitionResult]]] = []


CommitListener = Callable[[Sequence[tuple[UUID, int, int]]], None]

# A commit whose answer was lost is resolved (Appender._resolve) before the next one runs:
# its producers are answered within RESOLVE_ANSWER_S (REQUEST_TIMED_OUT if still open then:
# they retry, and the retry is judged after the resolution), and the resolution is given up
# after RESOLVE_GIVE_UP_S of a coordinator that does not answer.
RESOLVE_ANSWER_S = 5.0
RESOLVE_GIVE_UP_S = 120.0
# How long a storage failure of a producer's batch explains a sequence gap of its later ones
# (_gap_error): its requests in flight then, at most the clients' request timeout.
GAP_MEMORY_S = 30.0

# Objects a quiet broker may write back to back before the budget's rate applies: the first
# batch after a quiet period, and one more request arriving right behind it, go out at once.
PUT_BURST = 2


class PutBudget:
    """A token bucket of PUTs: ``rate`` per second, at most ``burst`` saved up; rate 0 is
    no budget. Times are event-loop times."""

    __slots__ = ("_at", "_burst", "_rate", "_tokens")

    def __init__(self, rate: float, burst: int = PUT_BURST) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._at = float("-inf")

    def _level(self, now: float) -> float:
        return min(self._burst, self._tokens + (now - self._at) * self._rate)

    def ready_at(self, now: float) -> float:
        """The earliest time from ``now`` on at which an object is within budget."""
        if self._rate <= 0:
            return now
        missing = 1.0 - self._level(now)
        return now if missing <= 0 else now + missing / self._rate

    def spend(self, now: float) -> None:
        """An object was written (a full buffer's too: it takes a token when there is one,
        and is never delayed nor run into debt for lack of one)."""
        if self._rate > 0:
            self._tokens = max(0.0, self._level(now) - 1.0)
            self._at = now


_TIMED_OUT = PartitionResult(int(ErrorCode.request_timed_out))


def _within(
    committed: asyncio.Future[list[PartitionResult]], count: int, timeout_ms: int
) -> asyncio.Future[list[PartitionResult]]:
    """``committed``'s results, or ``count`` REQUEST_TIMED_OUT ones once ``timeout_ms``
    has passed, whichever comes first."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[list[PartitionResult]] = loop.create_future()

    def timed_out() -> None:
        if not answer.done():
            answer.set_result([_TIMED_OUT] * count)

    timer = loop.call_later(max(timeout_ms, 0) / 1000, timed_out)

    def done(f: asyncio.Future[list[PartitionResult]]) -> None:
        timer.cancel()
        if answer.done():
            return
        if f.cancelled():
            answer.cancel()
        elif (exc := f.exception()) is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(f.result())

    committed.add_done_callback(done)
    return answer


class Appender:
    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        cache: BlockCache,
        node_id: int,
        commit_interval_ms: int,
        buffer_max_bytes: int,
        on_commit: CommitListener,
        commit_mode: str = ADAPTIVE,
        commit_min_ms: int = 0,
        objects_per_second_max: float = 0,
    ) -> None:
        if commit_mode not in COMMIT_MODES:
            raise ValueError(
                f"produce.commit.mode must be one of {', '.join(COMMIT_MODES)}, not {commit_mode!r}"
            )
        self._store = store
        self._outage = OutageLog("diskless produce (uploads and batch commits)", log)
        self._coordinator = coordinator
        self._cache = cache
        self._node_id = node_id
        self._adaptive = commit_mode == ADAPTIVE
        self._interval = commit_interval_ms / 1000
        self._min_wait = min(commit_min_ms, commit_interval_ms) / 1000
        self._budget = PutBudget(objects_per_second_max)
        self._max_bytes = buffer_max_bytes
        self._on_commit = on_commit
        self._buffer = _Buffer()
        self._buffer_started = 0.0  # loop time of the first batch in the buffer
        self._timer: asyncio.Handle | None = None
        self._timer_when = 0.0
        self._uploading = 0  # flushes whose upload has not ended
        self._uncommitted = 0  # flushes whose commit has not ended
        self._previous_commit: asyncio.Future[None] | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._resolutions: set[asyncio.Future[object]] = set()  # _resolve tasks still running
        # (topic, partition, producer id) -> loop time: a batch of that producer failed here
        # with a storage error (the flush's upload or commit), so its later batches are
        # refused for a gap this broker made; see _gap_error.
        self._storage_failed: dict[tuple[UUID, int, int], float] = {}
        # An idempotent producer's batches buffered or in a flush not yet answered, by
        # _retry_key: a retry of them (the producer's request timed out, it sent them again)
        # waits for their answer instead of being written a second time (see submit).
        self._unanswered: dict[tuple[object, ...], asyncio.Future[PartitionResult]] = {}

    def submit(
        self, appends: list[PartitionAppend], timeout_ms: int | None = None
    ) -> asyncio.Future[list[PartitionResult]]:
        """Queue a request's partitions; the future resolves after their commit, or with
        REQUEST_TIMED_OUT for each once ``timeout_ms`` has passed (an acks=all request's
        timeout, as Kafka answers a produce whose replication outlasts it). The commit goes
        on: its outcome is unknown to the producer, which retries; a retry is committed
        after it and answered as its duplicate if it was committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[PartitionResult]] = loop.create_future()
        if not appends:
            future.set_result([])
            return future
        # A retry while the first attempt is still unanswered is not written again: it is
        # answered as the first is (Kafka too answers a retry of a batch it has appended
        # with that append's offsets, once replicated). Under overload, when requests wait
        # longer than the producers' request timeout, every retry written again would make
        # the next objects larger and the commits slower: a queue that feeds itself.
        buffer = self._buffer
        retried: list[tuple[int, asyncio.Future[PartitionResult]]] = []
        fresh = []
        for i, append in enumerate(appends):
            if append.batches[0].producer_id < 0:
                fresh.append(append)
                continue
            key = _retry_key(append)
            earlier = self._unanswered.get(key)
            if earlier is None:
                registered: asyncio.Future[PartitionResult] = loop.create_future()
                self._unanswered[key] = registered
                buffer.retry_keys.append((len(buffer.appends) + len(fresh), key, registered))
                fresh.append(append)
            else:
                retried.append((i, earlier))
        if fresh:
            if not buffer.appends:
                self._buffer_started = loop.time()
            buffer.appends.extend(fresh)
            for append in fresh:
                buffer.size += len(append.records)
            buffer.waiters.append((future, len(fresh)))
            if buffer.size >= self._max_bytes:
                self._flush_at(loop.time(), full=True)
            elif self._adaptive and self._pipeline_free():
                self._flush_at(self._buffer_started + self._min_wait)
            else:
                self._flush_at(self._buffer_started + self._interval)
        else:
            future.set_result([])
        if retried:
            future = _merged(future, retried, len(appends))
        return future if timeout_ms is None else _within(future, len(appends), timeout_ms)

    def _flush_at(self, when: float, full: bool = False) -> None:
        """Flush at loop time ``when`` (or at the earlier time already planned), no sooner
        than the PUT budget allows unless the buffer is ``full``. A time already past still
        waits for the next loop iteration, so batches that arrived in the same one share
        the object."""
        loop = asyncio.get_running_loop()
        if not full:
            when = max(when, self._budget.ready_at(loop.time()))
        if self._timer is not None:
            if self._timer_when <= when:
                return
            self._timer.cancel()
        # (uvloop answers call_at for a time already past with a plain Handle, which has
        # no when(): the planned time is kept here.)
        self._timer = loop.call_at(when, self._on_timer)
        self._timer_when = when

    def _on_timer(self) -> None:
        self._timer = None
        if not self._buffer.appends:
            return
        now = asyncio.get_running_loop().time()
        if self._buffer.size < self._max_bytes:
            # A full buffer's flush may have taken the token this one was planned for.
            ready = self._budget.ready_at(now)
            if ready > now + 0.001:
                self._flush_at(ready)
                return
        self._flush()

    def _pipeline_free(self) -> bool:
        """Adaptive: whether a new object may start now. No upload in flight, and at most
        one earlier object still to commit (this upload overlaps its commit)."""
        return not self._uploading and self._uncommitted <= 1

    def _upload_ended(self) -> None:
        self._uploading -= 1
        self._pipeline_moved()

    def _commit_ended(self) -> None:
        self._uncommitted -= 1
        self._pipeline_moved()

    def _pipeline_moved(self) -> None:
        if self._adaptive and self._buffer.appends and self._pipeline_free():
            # What gathered meanwhile goes now: it has waited for the pipeline already.
            self._flush_at(self._buffer_started)

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        buffer, self._buffer = self._buffer, _Buffer()
        if not buffer.appends:
            return
        self._budget.spend(asyncio.get_running_loop().time())
        self._uploading += 1
        self._uncommitted += 1
        previous = self._previous_commit
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._previous_commit = done
        task = asyncio.create_task(self._upload_and_commit(buffer, previous, done))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)
        task.add_done_callback(lambda _t: self._forget_unanswered(buffer))

    async def _upload_and_commit(
        self,
        buffer: _Buffer,
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None],
    ) -> None:
        ended = False

        def upload_ended() -> None:  # exactly once per flush, however _write ends
            nonlocal ended
            if not ended:
                ended = True
                self._upload_ended()

        resolving: list[asyncio.Future[object]] = []
        try:
            results = await self._write(buffer, previous, upload_ended, resolving)
            self._outage.succeeded()
        except FlushFailed as exc:
            self._outage.failed(exc)
            log.debug("flush of %d bytes failed: %s", buffer.size, exc)
            results = [PartitionResult(int(exc.error))] * len(buffer.appends)
            if exc.error == ErrorCode.kafka_storage_error:
                self._note_storage_failure(buffer.appends)
        except Exception:
            log.exception("flush of %d bytes failed", buffer.size)
            results = [PartitionResult(int(ErrorCode.kafka_storage_error))] * len(buffer.appends)
            # Answered as a storage error, so remembered as one: the producers' next
            # batches, sent before they heard, must not be refused for the gap (_gap_error).
            self._note_storage_failure(buffer.appends)
        finally:
            upload_ended()
            if resolving:
                # The next commit waits until this one's outcome is known (see _resolve).
                def resolved(_f: object) -> None:
                    done.set_result(None)
                    self._commit_ended()

                resolving[0].add_done_callback(resolved)
            else:
                done.set_result(None)
                self._commit_ended()
        for index, key, registered in buffer.retry_keys:
            if self._unanswered.get(key) is registered:
                del self._unanswered[key]
            if not registered.done():
                registered.set_result(results[index])
        pos = 0
        for future, count in buffer.waiters:
            if not future.done():
                future.set_result(results[pos : pos + count])
            pos += count

    async def _write(
        self,
        buffer: _Buffer,
        previous: asyncio.Future[None] | None,
        upload_ended: Callable[[], None],
        resolving: list[asyncio.Future[object]],
    ) -> list[PartitionResult]:
        now_ms = int(time.time() * 1000)
        chunks: list[bytes | memoryview | bytearray] = []
        to_commit: list[BatchToCommit] = []
        position = 0
        for append in buffer.appends:
            for batch in append.batches:
                data: bytes | memoryview | bytearray = append.records[
                    batch.offset : batch.offset + batch.size
                ]
                if append.log_append_time:
                    data = stamp_log_append_time(data, now_ms)
                chunks.append(data)
                to_commit.append(
                    BatchToCommit(
                        topic_id=append.topic_id,
                        partition=append.partition,
                        byte_offset=position,
                        byte_size=batch.size,
                        record_count=batch.record_count,
                        max_timestamp=batch.max_timestamp,
                        timestamp_type=1 if append.log_append_time else 0,
                        producer_id=batch.producer_id,
                        producer_epoch=batch.producer_epoch,
                        base_sequence=batch.base_sequence,
                        transactional=bool(batch.attributes & TRANSACTIONAL_BIT),
                    )
                )
                position += batch.size
        key = new_data_key()
        started = time.perf_counter()
        try:
            try:
                await self._store.put(key, chunks)
            finally:
                upload_ended()
            # The PUT alone: waiting for the previous flush's commit is not upload time.
            METRICS.upload_seconds.observe(time.perf_counter() - started)
        except ObjectStoreError as exc:
            # Nothing was acknowledged; producers retry (the error is retriable).
            raise FlushFailed(ErrorCode.kafka_storage_error, f"upload failed: {exc}") from exc
        finally:
            if previous is not None:
                await previous  # commits stay in flush order, failed or not
        self._cache.put_object(key, chunks)
        started = time.perf_counter()
        try:
            committed = await self._coordinator.commit_file(
                key, position, self._node_id, to_commit, now_ms
            )
        except CoordinatorUnavailable as exc:
            if not exc.outcome_unknown:
                await self._discard_uncommitted(key)
                raise FlushFailed(ErrorCode.kafka_storage_error, f"commit failed: {exc}") from exc
            task = asyncio.ensure_future(self._resolve(key, position, to_commit, now_ms))
            self._resolutions.add(task)
            task.add_done_callback(self._resolutions.discard)
            try:
                committed = await asyncio.wait_for(asyncio.shield(task), RESOLVE_ANSWER_S)
            except TimeoutError:
                resolving.append(task)
                raise FlushFailed(
                    ErrorCode.request_timed_out, f"commit outcome unknown: {exc}"
                ) from exc
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise  # this flush is cancelled, not only the resolution (close)
                committed = None
            if committed is None:
                raise FlushFailed(
                    ErrorCode.request_timed_out, f"commit outcome unknown: {exc}"
                ) from exc
        METRICS.commit_seconds.observe(time.perf_counter() - started)
        METRICS.produced_bytes.inc(position)
        return self._per_partition(buffer.appends, committed)

    async def _resolve(
        self, key: str, size: int, batches: list[BatchToCommit], now_ms: int
    ) -> list[CommitResult] | None:
        """The outcome of a commit whose answer was lost: asked of the coordinator until it
        answers (committed: each batch's answer then; never committed: committed now, the
        object is still there). None once RESOLVE_GIVE_UP_S has passed.

        Until then the next flush's commit waits (commits stay in flush order). Without
        that, a later request of the same producer could be committed while an earlier
        one's fate is open, and be refused OUT_OF_ORDER_SEQUENCE_NUMBER because a request
        between them failed: librdkafka then bumps its epoch and sends again, with new
        sequence numbers, every record not yet acknowledged, the earlier request's too,
        which a duplicate check can then no longer catch (a duplicate record in the log,
        seen by the long nemesis run). Resolved first, the earlier request is acknowledged
        or certainly absent before anything after it is judged."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + RESOLVE_GIVE_UP_S
        delay = 0.05
        while True:
            try:
                found = await self._coordinator.commit_outcome(key, batches)
                if found is None:
                    found = await self._coordinator.commit_file(
                        key, size, self._node_id, batches, now_ms
                    )
                    log.warning("commit of %s had not happened; committed now", key)
                else:
                    log.warning("commit of %s had happened; its answers recovered", key)
                return found
            except CoordinatorUnavailable as exc:
                if loop.time() >= give_up:
                    log.warning(
                        "commit outcome of %s still unknown after %.0f s; keeping the "
                        "object: %s", key, RESOLVE_GIVE_UP_S, exc,
                    )  # fmt: skip
                    return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _discard_uncommitted(self, key: str) -> None:
        """Delete an object whose commit certainly did not happen. One whose
        outcome is unknown is resolved instead (:meth:`_resolve`); given up, it stays (an
        orphan at worst)."""
        self._cache.invalidate(key)
        try:
            await self._store.delete_many([key])
        except ObjectStoreError:
            log.warning("could not delete uncommitted object %s; it is left orphaned", key)

    def _per_partition(
        self, appends: list[PartitionAppend], committed: list[CommitResult]
    ) -> list[PartitionResult]:
        """Fold batch results into one result per partition append (Kafka answers per
        partition: the first batch's base offset, the first error)."""
        out: list[PartitionResult] = []
        advanced: list[tuple[UUID, int, int]] = []
        pos = 0
        for append in appends:
            results = committed[pos : pos + len(append.batches)]
            pos += len(append.batches)
            first = results[0]
            error = next((r.error for r in results if r.error), 0)
            if error:
                error = self._gap_error(append, error)
                out.append(PartitionResult(error, log_start_offset=first.log_start_offset))
                continue
            if self._storage_failed:  # no key built per append on the usual path
                self._storage_failed.pop(_producer_key(append), None)
            last = results[-1]
            batches = append.batches
            METRICS.topics.produced(
                append.topic_id,
                sum(b.record_count for b in batches),
                sum(b.size for b in batches),
            )
            advanced.append(
                (
                    append.topic_id,
                    append.partition,
                    last.base_offset + append.batches[-1].record_count,
                )
            )
            out.append(
                PartitionResult(0, first.base_offset, first.log_append_time, first.log_start_offset)
            )
        if advanced:
            self._on_commit(advanced)
        return out

    def _forget_unanswered(self, buffer: _Buffer) -> None:
        """A flush that ended without answering (cancelled at close): its retries are not
        left waiting for an answer that will not come."""
        for _index, key, registered in buffer.retry_keys:
            if self._unanswered.get(key) is registered:
                del self._unanswered[key]
            registered.cancel()  # nothing if answered

    def _note_storage_failure(self, appends: list[PartitionAppend]) -> None:
        now = asyncio.get_running_loop().time()
        for stale in [k for k, at in self._storage_failed.items() if now - at > GAP_MEMORY_S]:
            del self._storage_failed[stale]
        for append in appends:
            if append.batches and append.batches[0].producer_id >= 0:
                self._storage_failed[_producer_key(append)] = now

    def _gap_error(self, append: PartitionAppend, error: int) -> int:
        """The answer to a batch the coordinator refused OUT_OF_ORDER_SEQUENCE_NUMBER.

        A producer keeps up to five requests in flight. When one of its batches fails here
        with a storage error (an upload or commit that failed: not written), its next ones,
        sent before it heard, reach the coordinator with a gap before them. Kafka never
        answers those OUT_OF_ORDER_SEQUENCE_NUMBER: a log that failed to append is offline
        and refuses the later requests with a storage error too. librdkafka takes such an
        OUT_OF_ORDER_SEQUENCE_NUMBER for "the earlier request was lost" and bumps its epoch,
        sending again under new sequence numbers every record it holds as unacknowledged,
        including ones a request that timed out may still have written: duplicates (long
        run #5's). Answered KAFKA_STORAGE_ERROR instead, the later batch is retried after
        the failed one, with the same sequence numbers, in order."""
        if error != ErrorCode.out_of_order_sequence_number:
            return error
        at = self._storage_failed.get(_producer_key(append))
        if at is None or asyncio.get_running_loop().time() - at > GAP_MEMORY_S:
            return error
        return int(ErrorCode.kafka_storage_error)

    async def close(self) -> None:
        """Flush what is buffered and wait for in-flight flushes. A commit outcome still
        being resolved is given up (the object stays): shutting down does not wait for
        the coordinator to come back."""
        for task in list(self._resolutions):
            task.cancel()
        self._flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)


def _retry_key(append: PartitionAppend) -> tuple[object, ...]:
    """What makes a partition's batches in a request the same as an earlier request's: the
    producer, its epoch and sequence numbers, and each batch's CRC (bytes 17-20 of its
    header: it covers everything after it, so a batch that differs in any record differs
    here)."""
    batches = append.batches
    first, last = batches[0], batches[-1]
    records = append.records
    return (
        append.topic_id,
        append.partition,
        first.producer_id,
        first.producer_epoch,
        first.base_sequence,
        last.base_sequence + last.record_count,
        b"".join(bytes(records[b.offset + 17 : b.offset + 21]) for b in batches),
    )


def _merged(
    fresh: asyncio.Future[list[PartitionResult]],
    retried: list[tuple[int, asyncio.Future[PartitionResult]]],
    count: int,
) -> asyncio.Future[list[PartitionResult]]:
    """One request's answers, in its order: its ``retried`` appends (position, the earlier
    request's answer) and the ``fresh`` ones (buffered now, in order)."""

    async def merge() -> list[PartitionResult]:
        new = iter(await fresh)
        at = dict(retried)
        out = []
        for i in range(count):
            earlier = at.get(i)
            out.append(next(new) if earlier is None else await asyncio.shield(earlier))
        return out

    return asyncio.ensure_future(merge())


def _producer_key(append: PartitionAppend) -> tuple[UUID, int, int]:
    pid = append.batches[0].producer_id if append.batches else -1
    return (append.topic_id, append.partition, pid)
