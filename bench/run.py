"""Throughput/latency benchmark of `sluice dev` with a stock client, against this machine's limits.

    .venv/bin/python -m bench.run            # 256 MiB per run, ~3 min
    .venv/bin/python -m bench.run --quick    # ~20 s smoke run
    bench/run --mib 64 --batch-sizes 16384   # the wrapper script passes arguments through

Starts the broker as a subprocess on a free port in a temp dir with its default configs (so the
produce commit interval is the real one), produces 1 KiB records with confluent-kafka into a
6-partition topic, then consumes them back. Every figure is the median of --repeats runs.

Why the machine baselines: absolute MiB/s mean little on a shared 2-core box. Loopback TCP bounds
what any broker can receive here, and fsync'd 8 MiB writes bound what the local-directory object
store can persist, so produce/consume are also printed as a fraction of those, from the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

MiB = 1024 * 1024
RECORD_SIZE = 1024
PARTITIONS = 6
CLK_TCK = os.sysconf("SC_CLK_TCK")
QUEUE_KIB = 32 * 1024


# ---------------------------------------------------------------- broker process


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sluice_command() -> list[str]:
    script = Path(sys.executable).with_name("sluice")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from sluice.cli import main; sys.exit(main())"]


class Broker:
    def __init__(self, workdir: Path, options: dict[str, str]) -> None:
        self.port = free_port()
        self.data_dir = workdir / "data"
        self.log_path = workdir / "broker.log"
        cmd = [
            *sluice_command(),
            "dev",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        for k, v in options.items():
            cmd += ["-o", f"{k}={v}"]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"broker exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit(
                        f"broker not listening after 20 s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.05)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        # utime and stime are fields 14 and 15 of /proc/PID/stat; the command name (field 2)
        # may contain spaces, so split after its closing parenthesis.
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def log_tail(self, n: int = 4000) -> str:
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


# ---------------------------------------------------------------- machine baselines


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


# ---------------------------------------------------------------- produce / consume


@dataclass
class RunResult:
    produced_mib: float
    produce_s: float
    consume_s: float
    first_record_ms: float
    p50_ms: float
    p99_ms: float
    produce_cpu_s: float
    consume_cpu_s: float
    truncated: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def in_mib_s(self) -> float:
        return self.produced_mib / self.produce_s

    @property
    def out_mib_s(self) -> float:
        return self.produced_mib / self.consume_s

    @property
    def cpu_s_per_mib(self) -> float:
        return (self.produce_cpu_s + self.consume_cpu_s) / self.produced_mib


def create_topic(bootstrap: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    fut = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])[
        name
    ]
    fut.result(30)
    del admin
    return name


def percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    idx = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[idx]


def produce_run(
    broker: Broker, topic: str, mib: int, batch_size: int, budget_s: float
) -> tuple[int, float, list[float], list[str], bool]:
    n = mib * MiB // RECORD_SIZE
    payload = os.urandom(RECORD_SIZE)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 5,
            "batch.size": batch_size,
            "acks": "all",
            # 1 MiB batches plus framing must fit the client's own request limit.
            "message.max.bytes": 2 * MiB,
            # A bounded client buffer, the Java producer's 32 MiB buffer.memory default. With
            # librdkafka's own default (1 GiB) the whole run is queued at once, so "latency"
            # would mostly measure time spent in the local queue and --budget could not stop
            # a slow run (enqueueing never blocks).
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": QUEUE_KIB,
        }
    )
    sent_at = [0.0] * n
    latencies: list[float] = []
    errors: list[str] = []
    append = latencies.append
    perf = time.perf_counter

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        # The key is the record's index: the cheapest way to find its send time again.
        if err is not None:
            errors.append(str(err))
            return
        append(perf() - sent_at[struct.unpack(">I", msg.key())[0]])

    start = perf()
    deadline = start + budget_s
    produced = 0
    truncated = False
    for i in range(n):
        key = struct.pack(">I", i)
        while True:
            try:
                sent_at[i] = perf()
                producer.produce(topic, payload, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        produced += 1
        if i % 1000 == 0:
            producer.poll(0)
            if perf() > deadline:
                truncated = True
                break
    remaining = producer.flush(120)
    elapsed = perf() - start
    if remaining:
        errors.append(f"{remaining} records undelivered after flush(120)")
    return produced, elapsed, sorted(latencies), errors, truncated


def consume_run(
    broker: Broker, topic: str, expected: int, budget_s: float
) -> tuple[int, float, float]:
    """Returns (records, seconds from first record to last, seconds until the first record).

    The rate is timed from the first record: the consumer's start-up (metadata, connection,
    first fetch) is a fixed cost that would otherwise dominate small --quick runs.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        start = time.perf_counter()
        first: float | None = None
        deadline = start + budget_s
        while got < expected and time.perf_counter() < deadline:
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    if first is None:
                        first = time.perf_counter()
                    got += 1
        end = time.perf_counter()
        if first is None:
            return 0, float("inf"), float("inf")
        # One record's worth of time is not a rate; fall back to the whole span.
        span = end - first if end - first > 0.001 else end - start
        return got, span, first - start
    finally:
        consumer.close()


def one_run(broker: Broker, mib: int, batch_size: int, budget_s: float) -> RunResult:
    topic = create_topic(broker.bootstrap)
    cpu0 = broker.cpu_seconds()
    produced, produce_s, lat, errors, truncated = produce_run(
        broker, topic, mib, batch_size, budget_s
    )
    cpu1 = broker.cpu_seconds()
    delivered = len(lat)
    got, consume_s, first_record_s = consume_run(broker, topic, delivered, budget_s)
    cpu2 = broker.cpu_seconds()
    if got < delivered:
        errors.append(f"consumed {got}/{delivered} records within {budget_s:.0f}s")
    return RunResult(
        produced_mib=delivered * RECORD_SIZE / MiB,
        produce_s=produce_s,
        consume_s=consume_s,
        first_record_ms=first_record_s * 1000,
        p50_ms=percentile(lat, 0.50) * 1000,
        p99_ms=percentile(lat, 0.99) * 1000,
        produce_cpu_s=cpu1 - cpu0,
        consume_cpu_s=cpu2 - cpu1,
        truncated=truncated or produced * RECORD_SIZE < mib * MiB,
        errors=errors,
    )


def med(values: list[float]) -> float:
    return statistics.median(values)


def timed(label: str, fn: Callable[[], float], repeats: int) -> float:
    vals = [fn() for _ in range(repeats)]
    print(f"  {label:<34} {med(vals):>9.1f} MiB/s  (runs: {', '.join(f'{v:.0f}' for v in vals)})")
    return med(vals)


@contextlib.contextmanager
def workdir(keep: bool) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    try:
        yield d
    finally:
        if keep:
            print(f"kept {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="MiB produced per run (default 256)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; medians printed")
    ap.add_argument(
        "--batch-sizes",
        default="16384,1048576",
        help="comma-separated producer batch.size values (default 16 KiB and 1 MiB)",
    )
    ap.add_argument("--quick", action="store_true", help="~20 s: 16 MiB, 1 repeat")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per produce or consume phase before cutting a run short",
    )
    ap.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker config override passed to `sluice dev -o`",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (broker log, data)")
    args = ap.parse_args(argv)
    if args.quick:
        args.mib, args.repeats = 16, 1
    # Cap each phase so a slow broker cannot blow the ~3 minute budget; a capped run is
    # reported as such and its rates use what was actually moved.
    budget = args.budget or (5.0 if args.quick else 12.0)
    batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    options = dict(kv.split("=", 1) for kv in args.options)

    with workdir(args.keep) as wd:
        print(
            f"sluice bench: {args.mib} MiB of {RECORD_SIZE} B records x {args.repeats} runs, "
            f"{PARTITIONS} partitions, acks=all, linger.ms=5, "
            f"client buffer {QUEUE_KIB // 1024} MiB, {os.cpu_count()} cores"
        )
        print("machine baselines:")
        loop_mib_s = timed("loopback TCP", loopback_tcp_mib_s, args.repeats)
        fsync_mib_s = timed(
            "fsync'd 8 MiB object writes", lambda: fsync_write_mib_s(wd), args.repeats
        )

        broker = Broker(wd, options)
        try:
            for bs in batch_sizes:
                runs: list[RunResult] = []
                for _ in range(args.repeats):
                    r = one_run(broker, args.mib, bs, budget)
                    runs.append(r)
                    for e in r.errors[:3]:
                        print(f"  ! {e}")
                rin = med([r.in_mib_s for r in runs])
                rout = med([r.out_mib_s for r in runs])
                print(
                    f"batch.size={bs // 1024} KiB"
                    + ("  (runs cut short by --budget)" if any(r.truncated for r in runs) else "")
                )
                print(
                    f"  produced per run                   "
                    f"{med([r.produced_mib for r in runs]):>9.1f} MiB"
                )
                print(
                    f"  produce throughput (in)            {rin:>9.1f} MiB/s   "
                    f"= {rin / loop_mib_s:.1%} of loopback, {rin / fsync_mib_s:.1%} of fsync"
                )
                print(
                    f"  consume throughput (out)           {rout:>9.1f} MiB/s   "
                    f"= {rout / loop_mib_s:.1%} of loopback"
                )
                print(
                    f"  consumer time to first record      "
                    f"{med([r.first_record_ms for r in runs]):>9.1f} ms"
                )
                print(
                    f"  produce latency p50 / p99          "
                    f"{med([r.p50_ms for r in runs]):>9.1f} / "
                    f"{med([r.p99_ms for r in runs]):.1f} ms"
                )
                print(
                    f"  broker CPU per MiB (in+out)        "
                    f"{med([r.cpu_s_per_mib for r in runs]) * 1000:>9.1f} ms"
                )
                print(
                    f"    produce / consume                "
                    f"{med([r.produce_cpu_s / r.produced_mib for r in runs]) * 1000:>9.1f} / "
                    f"{med([r.consume_cpu_s / r.produced_mib for r in runs]) * 1000:.1f} ms"
                )
            print(f"broker peak RSS                      {broker.peak_rss_mib():>9.1f} MiB")
        finally:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
