"""Object store on S3 or an S3-compatible server (MinIO, SeaweedFS), via aiobotocore.

Retries are ours, not botocore's: botocore is told to try once, and every operation
gets a bounded number of attempts, each under its own deadline, with full-jitter
exponential backoff between them. The worst case is therefore bounded and known
(``S3Config.worst_case_s``), which the append path relies on: producers wait for put().
Not-found answers are never retried.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import aiohttp.payload
import crc32c
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore import exceptions as boto

from storage.objects import (
    Chunks,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    StoredObject,
)
from storage.outage import OutageLog

log = logging.getLogger(__name__)

T = TypeVar("T")

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404"})
# Codes that mean "try again" whatever their HTTP status (several are 400s).
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
        # The body arrived different from what put() checksummed: damaged on the way.
        "BadDigest",
    }
)
_TRANSIENT_STATUS = frozenset({408, 429})
# S3's limit of keys per DeleteObjects request.
MAX_DELETE_BATCH = 1000


@dataclass(frozen=True, kw_only=True)
class S3Config:
    endpoint_url: str | None = None  # None: AWS S3 itself
    region: str = "us-east-1"
    bucket: str
    access_key: str | None = None  # None: botocore's credential chain (env, profile, role)
    secret_key: str | None = field(default=None, repr=False)
    path_style: bool = False  # MinIO and SeaweedFS need path-style addressing
    key_prefix: str = ""  # "a/b" stores key k at "a/b/k"
    # Deadline of one attempt, an 8 MiB PUT included. With 3 attempts the worst case
    # is ~30 s, about a producer's request.timeout.ms: it hears back before giving up.
    op_timeout_s: float = 10.0
    max_attempts: int = 3
    create_bucket: bool = False  # dev and tests; production buckets are provisioned
    # Brokers check at start that the bucket answers, so a wrong endpoint, bucket or
    # credential fails the start with a clear error instead of the first produce.
    verify_on_start: bool = False
    connect_timeout_s: float = 5.0
    backoff_base_s: float = 0.1
    backoff_max_s: float = 5.0
    max_connections: int = 64  # concurrent ranged GETs of the fetch path share the pool
    delete_batch: int = MAX_DELETE_BATCH

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.op_timeout_s <= 0:
            raise ValueError("max_attempts must be >= 1 and op_timeout_s > 0")
        if not 1 <= self.delete_batch <= MAX_DELETE_BATCH:
            raise ValueError(f"delete_batch must be in 1..{MAX_DELETE_BATCH}")

    @property
    def worst_case_s(self) -> float:
        """Upper bound of one operation's time with every attempt timing out."""
        backoff = sum(self.backoff_cap(a) for a in range(1, self.max_attempts))
        return self.max_attempts * self.op_timeout_s + backoff

    def backoff_cap(self, attempt: int) -> float:
        """Longest pause after failed attempt number ``attempt`` (1-based)."""
        return min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))


class _Transient(Exception):
    """A failure reported inside a 200 answer (DeleteObjects' per-key errors)."""


class _ChunksPayload(aiohttp.payload.Payload):
    """An upload body made of the flush's buffers, written to the connection one by one.

    aiohttp takes a Payload as it is (aiobotocore passes the body through), so the
    buffers reach the transport without being joined or re-read. ``read`` and
    ``__len__`` are what botocore asks of a body (validation, Content-Length); with
    payload signing and botocore's checksums off nothing else reads it.
    """

    def __init__(self, views: list[memoryview], size: int) -> None:
        super().__init__(views, content_type="application/octet-stream")
        self._views = views
        self._size = size
        self._autoclose = True
        self._read_pos = 0

    def __len__(self) -> int:
        return self._size

    def read(self, amount: int = -1) -> bytes:
        # Not used on the upload path; correct anyway should a botocore handler read.
        data = b"".join(self._views)[self._read_pos :]
        if amount >= 0:
            data = data[:amount]
        self._read_pos += len(data)
        return data

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._views).decode(encoding, errors)

    async def write(self, writer: Any) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer: Any, content_length: int | None) -> None:
        remaining = self._size if content_length is None else content_length
        for piece in _coalesced(self._views):
            if remaining <= 0:
                return
            if len(piece) > remaining:
                piece = piece[:remaining]
            remaining -= len(piece)
            # write() drains (waits) whenever the transport's buffer is above its
            # high-water mark: the views are referenced, not copied, meanwhile.
            await writer.write(piece)


# Each write to the transport may be a send() of its own. Record data arrives as one
# buffer per partition and request (16 KiB for a Java producer's default batch.size):
# measured on weed mini (noisy, shared machine), 8 MiB sent as 16 KiB writes cost
# ~0.9-1.0 ms of client CPU per MiB, as 256 KiB writes ~0.6-0.85 ms. So small buffers
# are joined into pieces of this size (a copy, ~0.1 ms/MiB); large ones go as they are.
_COALESCE_BYTES = 256 * 1024


def _coalesced(views: list[memoryview]) -> Iterator[bytes | memoryview]:
    group: list[memoryview] = []
    size = 0
    for view in views:
        if len(view) >= _COALESCE_BYTES:
            if group:
                yield b"".join(group) if len(group) > 1 else group[0]
                group, size = [], 0
            yield view
            continue
        group.append(view)
        size += len(view)
        if size >= _COALESCE_BYTES:
            yield b"".join(group)
            group, size = [], 0
    if group:
        yield b"".join(group) if len(group) > 1 else group[0]


class ObjectStoreUnreachable(ObjectStoreError):
    """The store did not answer (refused, reset, timed out) or answered 5xx / SlowDown on
    every attempt: an outage, as opposed to a refusal (no such bucket, access denied)."""


class S3ObjectStore(ObjectStore):
    def __init__(self, config: S3Config) -> None:
        self.config = config
        prefix = config.key_prefix.strip("/")
        self._prefix = f"{prefix}/" if prefix else ""
        self._stack: AsyncExitStack | None = None
        self._client: Any = None
        # Counters: requests sent (attempts, not operations) and retries.
        self.puts = 0
        self.gets = 0
        self.deletes = 0
        self.retries = 0
        self.bytes_put = 0
        self.bytes_got = 0
        # One WARNING when requests start failing, one INFO when one succeeds again; each
        # failed attempt in between is a DEBUG line (an outage fails hundreds a second).
        self._outage = OutageLog("object store requests", log)
        # Set when the bucket could not be checked at start because the store was down.
        self._start_check: asyncio.Task[None] | None = None

    def object_key(self, key: str) -> str:
        """The key in the bucket for a store key (with the configured prefix)."""
        return self._prefix + key

    async def start(self) -> None:
        if self._client is not None:
            return
        c = self.config
        aio_config = AioConfig(
            connect_timeout=min(c.connect_timeout_s, c.op_timeout_s),
            read_timeout=c.op_timeout_s,
            # Ours are the retries that count (bounded, logged); botocore tries once.
            retries={"total_max_attempts": 1, "mode": "standard"},
            max_pool_connections=c.max_connections,
            s3={
                "addressing_style": "path" if c.path_style else "auto",
                # UNSIGNED-PAYLOAD: the body is covered by the CRC32C put() sends
                # instead of a SHA-256 botocore would compute over it (~0.8 ms/MiB).
                # Over https this is what botocore does for uploads by default too.
                "payload_signing_enabled": False,
            },
            # Checksums are computed by put() itself (CRC32C, in C, over the chunks);
            # botocore's own would read the body once more in Python-sized pieces.
            request_checksum_calculation="when_required",
        )
        _quiet_abandoned_body_writes(asyncio.get_running_loop())
        stack = AsyncExitStack()
        self._client = await stack.enter_async_context(
            get_session().create_client(
                "s3",
                region_name=c.region,
                endpoint_url=c.endpoint_url,
                aws_access_key_id=c.access_key,
                aws_secret_access_key=c.secret_key,
                config=aio_config,
            )
        )
        self._stack = stack
        check = self._ensure_bucket if c.create_bucket else self._verify_bucket
        if not (c.create_bucket or c.verify_on_start):
            return
        try:
            await check()
        except ObjectStoreUnreachable as exc:
            # The store is down, not misconfigured: a broker that refused to start now
            # would stay down after the store came back (and classic topics need no store).
            # Start; requests fail retriably until the store answers; check until it does.
            log.warning(
                "S3 bucket %r at %s not reachable at start (%s); starting anyway and"
                " checking again until it is",
                c.bucket,
                c.endpoint_url or "AWS",
                exc,
            )
            self._start_check = asyncio.create_task(self._check_until_reachable(check))
        except BaseException:
            await self.close()
            raise

    async def _check_until_reachable(self, check: Callable[[], Awaitable[None]]) -> None:
        rounds = 0
        while True:
            rounds += 1
            delay = self.config.backoff_cap(rounds)
            await asyncio.sleep(random.uniform(delay / 2, delay))
            try:
                await check()
            except ObjectStoreUnreachable:
                continue
            except ObjectStoreError as exc:
                # Reachable now, and the answer is a refusal: say so loudly, every time the
                # operator would look (the produce path will report it too).
                log.error("S3 bucket %r is not usable: %s", self.config.bucket, exc)
                return
            log.info("S3 bucket %r reachable; its check at start passed", self.config.bucket)
            return

    async def close(self) -> None:
        task, self._start_check = self._start_check, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    # -- operations ------------------------------------------------------------------

    async def put(self, key: str, chunks: Chunks) -> None:
        # The flush's buffers go to the socket as they are: no joined copy of the body.
        # Measured (8 MiB from 128 chunks, weed mini) with bytes as the body, botocore
        # wrapped it in a BytesIO, read it whole for the SHA-256 payload signature and
        # again for a CRC32 checksum, and aiohttp copied it in 64 KiB reads: ~2.5 ms of
        # CPU per MiB, most of the broker's produce budget. Now the payload is unsigned
        # and its integrity is a CRC32C (C, ~0.05 ms/MiB) the server verifies.
        views = [v for v in (memoryview(c).cast("B") for c in chunks) if len(v)]
        size = sum(len(v) for v in views)
        crc = 0
        for view in views:
            crc = crc32c.crc32c(view, crc)
        checksum = base64.b64encode(crc.to_bytes(4, "big")).decode()
        name = self.object_key(key)
        # Retrying a PUT whose first attempt did land (timed out waiting for the answer)
        # writes the same bytes again: harmless, keys are never reused for other data.

        async def attempt() -> None:
            self.puts += 1
            # A fresh payload per attempt: an aborted attempt may have sent part of one.
            body: Any = _ChunksPayload(views, size) if size else b""
            await self._c().put_object(
                Bucket=self.config.bucket, Key=name, Body=body, ChecksumCRC32C=checksum
            )

        await self._retrying("put", key, attempt)
        self.bytes_put += size

    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"bad range {offset}+{length}")
        if length == 0:
            return b""
        name = self.object_key(key)

        async def attempt() -> bytes:
            self.gets += 1
            try:
                response = await self._c().get_object(
                    Bucket=self.config.bucket,
                    Key=name,
                    Range=f"bytes={offset}-{offset + length - 1}",
                )
            except boto.ClientError as exc:
                # A range starting at or past the end (an empty object included): the
                # object exists, there are just no bytes there.
                if _status(exc) == 416 or _code(exc) == "InvalidRange":
                    return b""
                raise
            async with response["Body"] as stream:
                data: bytes = await stream.read()
            if "ContentRange" not in response:
                # A server that ignored the Range header sent the whole object.
                data = data[offset : offset + length]
            return data

        data = await self._retrying("get", key, attempt)
        self.bytes_got += len(data)
        return data

    async def delete_many(self, keys: Sequence[str]) -> None:
        step = self.config.delete_batch
        for start in range(0, len(keys), step):
            await self._delete_batch(keys[start : start + step])

    async def _delete_batch(self, keys: Sequence[str]) -> None:
        pending = {self.object_key(k) for k in keys}

        async def attempt() -> None:
            self.deletes += 1
            response = await self._c().delete_objects(
                Bucket=self.config.bucket,
                Delete={"Objects": [{"Key": k} for k in sorted(pending)], "Quiet": True},
            )
            errors = [e for e in response.get("Errors", ()) if e.get("Code") not in _NOT_FOUND]
            # Already gone is what we wanted; the rest is sent again by the next attempt.
            pending.intersection_update(e.get("Key") for e in errors)
            if errors:
                first = errors[0]
                message = (
                    f"{len(errors)} keys not deleted, e.g. {first.get('Key')}: "
                    f"{first.get('Code')} {first.get('Message')}"
                )
                if any(e.get("Code") in _TRANSIENT_CODES for e in errors):
                    raise _Transient(message)
                raise ObjectStoreError(f"S3 delete: {message}")  # AccessDenied etc.

        await self._retrying("delete", f"{len(keys)} keys", attempt)

    async def list_objects(self) -> AsyncIterator[list[StoredObject]]:
        prefix = self._prefix
        token: str | None = None
        while True:

            async def attempt(token: str | None = token) -> dict[str, Any]:
                kwargs: dict[str, Any] = {"Bucket": self.config.bucket, "Prefix": prefix}
                if token:
                    kwargs["ContinuationToken"] = token
                return dict(await self._c().list_objects_v2(**kwargs))

            page = await self._retrying("list", prefix or "/", attempt)
            yield [
                StoredObject(
                    item["Key"][len(prefix) :],
                    int(item["Size"]),
                    int(item["LastModified"].timestamp() * 1000),
                )
                for item in page.get("Contents", ())
            ]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    # -- machinery -------------------------------------------------------------------

    def _c(self) -> Any:
        if self._client is None:
            raise ObjectStoreError("S3 object store is not started")
        return self._client

    async def _verify_bucket(self) -> None:
        c = self.config

        async def attempt() -> None:
            await self._c().head_bucket(Bucket=c.bucket)

        try:
            await self._retrying("check bucket", c.bucket, attempt)
        except ObjectStoreUnreachable:
            raise
        except ObjectStoreError as exc:
            raise ObjectStoreError(
                f"S3 bucket {c.bucket!r} at {c.endpoint_url or 'AWS'} is not usable: {exc}"
            ) from exc

    async def _ensure_bucket(self) -> None:
        c = self.config

        async def attempt() -> None:
            kwargs: dict[str, Any] = {"Bucket": c.bucket}
            if c.region != "us-east-1":  # S3 rejects us-east-1 as a LocationConstraint
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": c.region}
            try:
                await self._c().create_bucket(**kwargs)
            except boto.ClientError as exc:
                if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                    raise

        await self._retrying("create bucket", c.bucket, attempt)

    async def _retrying(self, op: str, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        c = self.config
        for number in range(1, c.max_attempts + 1):
            started = time.monotonic()
            try:
                async with asyncio.timeout(c.op_timeout_s):
                    result = await attempt()
                self._outage.succeeded(started)
                return result
            except boto.ClientError as exc:
                code, status = _code(exc), _status(exc)
                if code in _NOT_FOUND:
                    raise ObjectNotFound(what) from exc
                if not (code in _TRANSIENT_CODES or status in _TRANSIENT_STATUS or status >= 500):
                    raise ObjectStoreError(f"S3 {op} {what}: {code} (HTTP {status})") from exc
                reason = f"{code} (HTTP {status})"
                error: Exception = exc
            except TimeoutError as exc:
                reason = f"timed out after {time.monotonic() - started:.1f} s"
                error = exc
            except (
                boto.ConnectionError,  # refused, connect timeout, DNS
                boto.HTTPClientError,  # reset/closed mid-request, read timeout, body cut off
                boto.IncompleteReadError,  # body shorter than its Content-Length
                aiohttp.ClientError,
                OSError,
                _Transient,
            ) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                error = exc
            except boto.BotoCoreError as exc:  # bad parameters, no credentials: retrying won't help
                raise ObjectStoreError(f"S3 {op} {what}: {exc}") from exc
            self._outage.failed(ObjectStoreUnreachable(f"S3 {op} {what}: {reason}"), started)
            if number == c.max_attempts:
                raise ObjectStoreUnreachable(
                    f"S3 {op} {what} failed after {number} attempts: {reason}"
                ) from error
            self.retries += 1
            # Full jitter: concurrent callers hitting the same outage spread out.
            delay = random.uniform(0, c.backoff_cap(number))
            log.debug(
                "S3 %s %s failed (attempt %d of %d): %s; retrying in %.2f s",
                op,
                what,
                number,
                c.max_attempts,
                reason,
                delay,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")


def _quiet_abandoned_body_writes(loop: asyncio.AbstractEventLoop) -> None:
    """aiohttp sends a request's body in a task of its own; when the server closes the
    connection first (an S3 error answered before the body, a reset, a restart) that task
    fails and nobody awaits it, so asyncio logs "Task exception was never retrieved" with a
    traceback at ERROR, once per request in flight. The request itself fails and is retried
    and logged by ``_retrying``: that task's failure is the same event told twice."""
    if loop.get_exception_handler() is not None:
        return  # someone chose a handler; leave it alone

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        task, exc = context.get("future"), context.get("exception")
        coro = getattr(task, "get_coro", lambda: None)()
        if isinstance(exc, aiohttp.ClientError | OSError) and getattr(
            coro, "__qualname__", ""
        ).endswith("write_bytes"):
            log.debug("request body not sent: %s", exc)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def _code(exc: boto.ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: boto.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
