"""This machine's own limits, measured in the same run as the broker figures.

Absolute MiB/s mean little on a shared 2-core box, so the broker's figures are printed as
fractions of what the machine does without a broker in the way: loopback TCP bounds what
any broker can receive, fsync'd 8 MiB writes bound the local-directory object store, and
raw PUTs to the same S3 server, of the size the broker's objects had and with as many in
flight as the broker had, bound the diskless write path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .stats import MiB, percentile


def loopback_tcp_mib_s(seconds: float = 1.0) -> float:
    """Raw bytes over a 127.0.0.1 TCP connection, one sender thread, one receiver."""
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(1)
        port = lsock.getsockname()[1]
        chunk = b"\x00" * MiB
        stop = threading.Event()

        def send() -> None:
            with socket.create_connection(("127.0.0.1", port)) as s:
                while not stop.is_set():
                    s.sendall(chunk)

        t = threading.Thread(target=send, daemon=True)
        t.start()
        conn, _ = lsock.accept()
        buf = bytearray(4 * MiB)
        view = memoryview(buf)
        total = 0
        start = time.perf_counter()
        with conn:
            while (elapsed := time.perf_counter() - start) < seconds:
                total += conn.recv_into(view)
            stop.set()
            # Drain so the sender's sendall returns and the thread ends.
            conn.settimeout(1.0)
            with contextlib.suppress(OSError):
                while conn.recv_into(view):
                    pass
        t.join(2)
        return total / MiB / elapsed


def fsync_write_mib_s(directory: Path, seconds: float = 1.0, size: int = 8 * MiB) -> float:
    """Write+fsync+rename 8 MiB objects, as a local-directory object store PUT would."""
    d = directory / f"fsync-probe-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    payload = os.urandom(size)
    total = 0
    n = 0
    start = time.perf_counter()
    try:
        while (elapsed := time.perf_counter() - start) < seconds or n < 2:
            tmp = d / f"{n}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, d / f"{n}.obj")
            dfd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            total += size
            n += 1
        return total / MiB / elapsed
    finally:
        shutil.rmtree(d, ignore_errors=True)


def wal_flush_ms(directory: Path, seconds: float = 1.0) -> tuple[float, float]:
    """(p50, p99) ms of an 8 KiB append + fdatasync to one file, as PostgreSQL flushes its
    WAL at each commit (wal_sync_method=fdatasync, Linux's default): the floor of a commit's
    latency, and of the time it holds its locks."""
    path = directory / f"wal-probe-{uuid.uuid4().hex[:6]}"
    page = os.urandom(8192)
    times: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or len(times) < 10:
            began = time.perf_counter()
            os.write(fd, page)
            os.fdatasync(fd)
            times.append(time.perf_counter() - began)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    times.sort()
    return percentile(times, 0.5) * 1000, percentile(times, 0.99) * 1000


@dataclass(frozen=True)
class S3Target:
    endpoint_url: str
    access_key: str
    secret_key: str = field(repr=False)
    bucket: str
    region: str = "us-east-1"


@dataclass(frozen=True)
class PutResult:
    size: int
    concurrency: int
    puts: int
    mib_s: float
    p50_ms: float
    p99_ms: float


def raw_put(
    s3: S3Target, size: int, concurrency: int, seconds: float = 2.0, min_puts: int = 12
) -> PutResult:
    """PUTs of ``size`` bytes, ``concurrency`` at a time, back to back for ``seconds``
    (and at least ``min_puts``), with aiobotocore, then deleted again. The client is
    configured as the broker's (unsigned payload, no SDK checksum), so what is measured is
    the store and the network path, not SHA-256 in the client."""
    return asyncio.run(_raw_put(s3, size, concurrency, seconds, min_puts))


async def _raw_put(
    s3: S3Target, size: int, concurrency: int, seconds: float, min_puts: int
) -> PutResult:
    from aiobotocore.config import AioConfig
    from aiobotocore.session import get_session

    config = AioConfig(
        retries={"total_max_attempts": 1, "mode": "standard"},
        max_pool_connections=max(concurrency, 1) + 2,
        s3={"addressing_style": "path", "payload_signing_enabled": False},
        request_checksum_calculation="when_required",
    )
    body = os.urandom(size)
    prefix = f"bench-raw-{uuid.uuid4().hex[:8]}/"
    latencies: list[float] = []
    keys: list[str] = []
    async with get_session().create_client(
        "s3",
        endpoint_url=s3.endpoint_url,
        region_name=s3.region,
        aws_access_key_id=s3.access_key,
        aws_secret_access_key=s3.secret_key,
        config=config,
    ) as client:
        # One PUT per connection first: connection set-up is not what is measured.
        warm = [f"{prefix}warm-{i}" for i in range(concurrency)]
        await asyncio.gather(*(client.put_object(Bucket=s3.bucket, Key=k, Body=body) for k in warm))
        keys += warm
        start = time.perf_counter()
        deadline = start + seconds

        async def worker(w: int) -> None:
            n = 0
            while time.perf_counter() < deadline or len(latencies) < min_puts:
                key = f"{prefix}{w}-{n}"
                t0 = time.perf_counter()
                await client.put_object(Bucket=s3.bucket, Key=key, Body=body)
                latencies.append(time.perf_counter() - t0)
                keys.append(key)
                n += 1

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - start
        for i in range(0, len(keys), 1000):
            await client.delete_objects(
                Bucket=s3.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )
    latencies.sort()
    return PutResult(
        size=size,
        concurrency=concurrency,
        puts=len(latencies),
        mib_s=len(latencies) * size / MiB / elapsed,
        p50_ms=percentile(latencies, 0.5) * 1000,
        p99_ms=percentile(latencies, 0.99) * 1000,
    )


def raw_put_at(
    s3: S3Target, size: int, in_flight: float, seconds: float
) -> tuple[float, float, float]:
    """Raw PUT throughput at a fractional mean number of PUTs in flight (the broker's, by
    Little's law), interpolated between the two whole concurrencies around it. Returns
    (MiB/s, the concurrency it stands for, MiB written)."""
    low = max(1, int(in_flight))
    frac = max(0.0, in_flight - low)
    at_low = raw_put(s3, size, low, seconds)
    written = at_low.puts * size / MiB
    if frac < 0.05:
        return at_low.mib_s, float(low), written
    at_high = raw_put(s3, size, low + 1, seconds)
    written += at_high.puts * size / MiB
    return at_low.mib_s + frac * (at_high.mib_s - at_low.mib_s), low + frac, written
