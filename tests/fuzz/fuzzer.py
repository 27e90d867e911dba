"""A seeded mutation fuzzer for the broker's request path, against a real `sluice dev`.

    scripts/fuzz [--frames N | --seconds S] [--seed K] [--round-frames R]

Seeds are request frames captured from the stock clients (tests/fuzz/corpus, recorded by
tests/fuzz/capture.py). Each fuzz frame is a seed with one to three mutations: bit flips,
byte and integer overwrites with boundary values (0, -1, 0x7fffffff, 0xffffffff, ...),
varints swapped in (including ``ff ff ff ff 0f`` and over-long ones), truncation, splicing
two seeds, inserted/deleted/duplicated ranges, and API key/version changes. The size
prefix always matches the bytes sent: lying frame sizes are a framing concern, covered by
tests/e2e/test_hostile_input.py.

Frames are pipelined on one connection, each followed by an ApiVersions v0 "sync" request
with a correlation id of its own: the sync answers say exactly how many fuzz frames the
broker took in before it closed the connection (as it must for a request it cannot
parse), so the frame count reported is of frames the broker processed, not merely sent.
The fuzzer then reconnects. A frame the broker holds without answering (a Fetch with a long
max wait, a JoinGroup waiting for its rebalance) ends the connection after a short wait.

Between rounds the broker must still be alive, a stock client (confluent-kafka) must
produce and consume through it, its peak resident memory must stay under a bound, and its
log must hold no traceback and no ERROR line. The broker has an authorizer (the fuzzer is
a super user) and the topics the seed frames name, so mutated frames get past "no
authorizer" and "unknown topic" into the handlers. Any of these failing stops the run
with the seed and round.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import re
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from broker.server.api_table import VERSIONS
from sluice.launch.process import SluiceProcess, free_port

CORPUS_DIR = Path(__file__).parent / "corpus"
# Correlation ids of the sync requests; fuzz frames get ids below this range.
SYNC_BASE = 0x5A000000
MAX_WINDOW = 64
STALL_S = 1.5  # no answer for this long: the broker is holding the frame (or hung)
RSS_LIMIT_KIB = 768 * 1024
CONNECT_TIMEOUT_S = 10.0

_U32 = struct.Struct(">I")
_SIZE = struct.Struct(">i")
_SASL_AUTHENTICATE = struct.pack(">h", 36)
_ERROR_LINE = re.compile(rb"^\S+ \S+ (ERROR|CRITICAL) ", re.MULTILINE)
# Topic (and group) names in the seed frames: tests/fuzz/capture.py names them so. The
# fuzz target has these topics, so mutated frames reach past "unknown topic" into the
# handlers; cap-ckc-* and cap-kpc-* were classic (replicated) topics when captured.
_SEED_TOPIC = re.compile(rb"cap-[a-z]+-[0-9a-f]{6}")
_CLASSIC_SEED_TOPIC = re.compile(r"cap-(ckc|kpc)-")

# API keys the broker serves, and a few it does not (they must be refused cleanly too).
API_KEYS = [key for key, _name, _lo, _hi in VERSIONS]
API_KEYS += [4, 5, 6, 7, 34, 68, 1000, -1]
BOUNDARY_INTS: dict[int, list[int]] = {
    1: [0x00, 0x01, 0x7F, 0x80, 0xFF],
    2: [0x0000, 0x0001, 0x7FFF, 0x8000, 0xFFFF, 0xFFFE],
    4: [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFFE, 0x00010000],
    8: [0, 1, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF],
}
VARINTS = [
    b"\x00",
    b"\x01",
    b"\x02",
    b"\x7f",
    b"\x80\x01",
    b"\xff\x7f",
    b"\xff\xff\xff\xff\x0f",  # 0xffffffff: the count
    b"\xff\xff\xff\xff\x07",
    b"\xff\xff\xff\xff\x7f",  # wider than 32 bits
    b"\x80\x80\x80\x80\x80\x01",  # longer than 5 bytes
    b"\x80",  # unterminated
]


# The fuzz target's broker id (`sluice dev`'s node.id). UnregisterBroker removes any registered
# broker, a live one too, as Kafka's controller does, and the fuzzer is a super user: a frame
# that would unregister the target itself names another id instead (the target registers
# again at its next heartbeat, but the health check between rounds must not race that).
TARGET_NODE_ID = 1
_UNREGISTER_BROKER = 64


def spare_target(data: bytearray) -> None:
    """Rewrites an UnregisterBroker frame naming TARGET_NODE_ID (header v2: client id, then
    tagged fields; the body's first field is the broker id) to name another broker."""
    if len(data) < 10 or struct.unpack_from(">h", data, 0)[0] != _UNREGISTER_BROKER:
        return
    (client_id_length,) = struct.unpack_from(">h", data, 8)
    at = 10 + max(client_id_length, 0)
    try:
        count, at = _uvarint(data, at)
        for _ in range(count):
            _tag, at = _uvarint(data, at)
            size, at = _uvarint(data, at)
            at += size
    except IndexError:
        return
    if len(data) >= at + 4 and struct.unpack_from(">i", data, at)[0] == TARGET_NODE_ID:
        struct.pack_into(">i", data, at, TARGET_NODE_ID + 1000)


def _uvarint(data: bytearray, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80 or shift > 28:
            return value, at
        shift += 7


def load_corpus(directory: Path = CORPUS_DIR) -> list[bytes]:
    seeds = [p.read_bytes() for p in sorted(directory.glob("*.bin"))]
    if not seeds:
        raise SystemExit(f"no seed frames in {directory} (run python -m tests.fuzz.capture)")
    return seeds


def sync_request(index: int) -> bytes:
    """A sized ApiVersions v0 request (header v1, client id "fz", empty body)."""
    payload = struct.pack(">hhih", 18, 0, SYNC_BASE + index, 2) + b"fz"
    return _SIZE.pack(len(payload)) + payload


class Mutator:
    def __init__(self, seeds: Sequence[bytes], seed: int) -> None:
        self.seeds = list(seeds)
        self.rng = random.Random(seed)
        self.count = 0
        self._ops = [
            (self._bit_flips, 4),
            (self._byte_set, 3),
            (self._int_overwrite, 4),
            (self._varint_swap, 4),
            (self._truncate, 2),
            (self._splice, 2),
            (self._api_change, 2),
            (self._insert_random, 1),
            (self._delete_range, 2),
            (self._duplicate_range, 2),
        ]
        self._weights = [w for _op, w in self._ops]

    def frame(self) -> bytes:
        """One fuzz frame payload (no size prefix)."""
        rng = self.rng
        data = bytearray(rng.choice(self.seeds))
        if rng.random() >= 0.03:  # a few stay intact: real traffic between the hostile
            for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
                (op,) = rng.choices(self._ops, self._weights)
                op[0](data)
        self.count += 1
        spare_target(data)
        if len(data) >= 8:
            # Keep correlation ids clear of the sync range (they are echoed, never parsed).
            data[4:8] = _U32.pack(self.count % SYNC_BASE)
        return bytes(data)

    def _pos(self, data: bytearray, width: int = 1) -> int:
        return self.rng.randrange(max(1, len(data) - width + 1))

    def _bit_flips(self, data: bytearray) -> None:
        if data:
            for _ in range(self.rng.randint(1, 4)):
                data[self._pos(data)] ^= 1 << self.rng.randrange(8)

    def _byte_set(self, data: bytearray) -> None:
        if data:
            value = self.rng.choice((0, 1, 0x7F, 0x80, 0xFF, self.rng.randrange(256)))
            data[self._pos(data)] = value

    def _int_overwrite(self, data: bytearray) -> None:
        width = self.rng.choice((1, 2, 4, 4, 8))
        if len(data) < width:
            return
        pos = self._pos(data, width)
        value = self.rng.choice(BOUNDARY_INTS[width])
        data[pos : pos + width] = value.to_bytes(width, "big")

    def _varint_swap(self, data: bytearray) -> None:
        pos = self._pos(data)
        old = self.rng.choice((0, 1, 1, 2, 5))
        data[pos : pos + old] = self.rng.choice(VARINTS)

    def _truncate(self, data: bytearray) -> None:
        del data[self.rng.randrange(len(data) + 1) :]

    def _splice(self, data: bytearray) -> None:
        other = self.rng.choice(self.seeds)
        cut = self.rng.randrange(len(data) + 1)
        data[cut:] = other[self.rng.randrange(len(other) + 1) :]

    def _api_change(self, data: bytearray) -> None:
        if len(data) < 4:
            return
        if self.rng.random() < 0.5:
            data[0:2] = struct.pack(">h", self.rng.choice(API_KEYS))
        data[2:4] = struct.pack(">h", self.rng.choice((0, 1, 2, 3, 4, 5, 7, 9, 12, 13, 16, 99, -1)))

    def _insert_random(self, data: bytearray) -> None:
        pos = self._pos(data)
        data[pos:pos] = self.rng.randbytes(self.rng.randint(1, 8))

    def _delete_range(self, data: bytearray) -> None:
        if data:
            pos = self._pos(data)
            del data[pos : pos + self.rng.randint(1, 8)]

    def _duplicate_range(self, data: bytearray) -> None:
        if data:
            pos = self._pos(data)
            chunk = data[pos : pos + self.rng.randint(1, 32)]
            data[pos:pos] = chunk


@dataclass
class Stats:
    frames: int = 0  # fuzz frames the broker took in (confirmed by the sync answers)
    closed: int = 0  # connections the broker closed (a frame it refused)
    stalled: int = 0  # connections given up on: a frame held without answer
    connections: int = 0
    seconds: float = 0.0
    rounds: int = 0
    peak_rss_kib: int = 0
    topics_deleted: int = 0  # created by fuzz frames (and round trips), between rounds
    held: list[bytes] = field(default_factory=list)  # the first few frames held, to replay

    def rate(self) -> float:
        return self.frames / self.seconds if self.seconds else 0.0


class _Closed(Exception):
    pass


class Driver:
    """Sends fuzz frames on one connection at a time and counts what the broker took in."""

    def __init__(self, host: str, port: int, mutator: Mutator, stats: Stats) -> None:
        self.host = host
        self.port = port
        self.mutator = mutator
        self.stats = stats
        self.window = 8
        self._sock: socket.socket | None = None
        self._buf = bytearray()

    def run(self, frames: int) -> None:
        goal = self.stats.frames + frames
        while self.stats.frames < goal:
            if self._sock is None:
                self._connect()
            size = min(self.window, goal - self.stats.frames)
            batch = [self.mutator.frame() for _ in range(size)]
            confirmed, outcome = self._exchange(batch)
            if outcome == "ok":
                self.stats.frames += confirmed
                self.window = min(MAX_WINDOW, self.window * 2)
                continue
            # The frame after the last confirmed sync was taken in and ended the connection
            # (refused, or held); the ones after it were never read.
            self.stats.frames += confirmed + 1
            self.window = max(1, min(MAX_WINDOW, 2 * (confirmed + 1)))
            if outcome == "closed":
                self.stats.closed += 1
            else:
                self.stats.stalled += 1
                if len(self.stats.held) < 5:
                    self.stats.held.append(batch[confirmed])
            self._disconnect()

    def close(self) -> None:
        self._disconnect()

    def _connect(self) -> None:
        self._sock = socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT_S)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(STALL_S)
        self._buf.clear()
        self.stats.connections += 1

    def _disconnect(self) -> None:
        if self._sock is not None:
            # RST rather than FIN: no TIME_WAIT pile-up across a million connections.
            with contextlib.suppress(OSError):
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._sock.close()
            self._sock = None

    def _exchange(self, batch: list[bytes]) -> tuple[int, str]:
        """Send the batch (each frame then its sync); how many syncs came back, and why
        the reading stopped: "ok" (all), "closed" or "stalled"."""
        assert self._sock is not None
        out = bytearray()
        for i, payload in enumerate(batch):
            out += _SIZE.pack(len(payload))
            out += payload
            out += sync_request(i)
        # Closed mid-send: what it answered before is still read below.
        with contextlib.suppress(OSError):
            self._sock.sendall(out)
        # SaslAuthenticate on a listener without SASL is answered, then the connection is
        # closed FAILED_AUTH_CLOSE_DELAY_S later (as Kafka's failed-authentication delay):
        # its answer is as good as the close, and waiting out the delay would make these
        # frames most of the run's time.
        closing = {
            _U32.unpack_from(payload, 4)[0]: i
            for i, payload in enumerate(batch)
            if len(payload) >= 8 and payload[:2] == _SASL_AUTHENTICATE
        }
        confirmed = 0
        try:
            while confirmed < len(batch):
                cid = self._next_correlation_id()
                if cid == SYNC_BASE + confirmed:
                    confirmed += 1
                elif closing.get(cid) == confirmed:
                    return confirmed, "closed"
        except _Closed:
            return confirmed, "closed"
        except TimeoutError:
            return confirmed, "stalled"
        return confirmed, "ok"

    def _next_correlation_id(self) -> int:
        while True:
            if len(self._buf) >= 8:
                (size,) = _SIZE.unpack_from(self._buf, 0)
                if size < 4:
                    raise AssertionError(f"broker sent a response frame of size {size}")
                if len(self._buf) >= 4 + size:
                    (cid,) = _U32.unpack_from(self._buf, 4)
                    del self._buf[: 4 + size]
                    return cid
            try:
                chunk = self._sock.recv(1 << 20) if self._sock else b""
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise _Closed
            self._buf += chunk


class HealthCheckFailed(AssertionError):
    pass


class Target:
    """The broker under fuzz: a `sluice dev` of our own in a temporary directory."""

    def __init__(self, workdir: Path) -> None:
        port = free_port()
        self.process = SluiceProcess(
            [
                "dev",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(workdir / "data"),
                "-o",
                "produce.commit.interval.ms=20",
                # An authorizer, so ACL frames reach the ACL code rather than a
                # SECURITY_DISABLED answer; the fuzzer (User:ANONYMOUS) may do anything.
                "-o",
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "-o",
                "super.users=User:ANONYMOUS",
            ],
            workdir / "broker.log",
            port,
        )
        self._log_checked = 0

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.process.stop()

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def check(self, stats: Stats) -> None:
        """Alive, answers a stock-client round trip, memory bounded, no traceback."""
        if not self.process.alive():
            raise HealthCheckFailed(f"broker died:\n{self.process.log_tail()}")
        round_trip(self.process.bootstrap)
        # The peak (VmHWM), not only the resident size now: an allocation a frame's
        # length or count made huge, freed before this check, still shows.
        rss = max(self.rss_kib(), self.process.rss_peak_kib() or 0)
        stats.peak_rss_kib = max(stats.peak_rss_kib, rss)
        if rss > RSS_LIMIT_KIB:
            raise HealthCheckFailed(f"broker RSS peaked at {rss} KiB, over {RSS_LIMIT_KIB} KiB")
        log = self.process.log_path.read_bytes()
        new, self._log_checked = log[self._log_checked :], len(log)
        if b"Traceback" in new:
            at = new.index(b"Traceback")
            text = new[max(0, at - 2000) : at + 4000].decode(errors="replace")
            raise HealthCheckFailed(f"traceback in the broker log:\n{text}")
        # A handler's failure logged without a traceback (log.error, asyncio's "exception
        # was never retrieved") is as much a bug as one with.
        if (found := _ERROR_LINE.search(new)) is not None:
            at = found.start()
            text = new[max(0, at - 2000) : at + 4000].decode(errors="replace")
            raise HealthCheckFailed(f"ERROR in the broker log:\n{text}")


def seed_topics(seeds: Sequence[bytes]) -> list[str]:
    return sorted({m.decode() for seed in seeds for m in _SEED_TOPIC.findall(seed)})


def create_seed_topics(bootstrap: str, names: Sequence[str]) -> None:
    """Create the topics the seed frames name (3 partitions; classic ones as captured)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    if not names:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [
        NewTopic(
            name,
            3,
            1,
            config={"diskless.enable": "false"} if _CLASSIC_SEED_TOPIC.match(name) else {},
        )
        for name in names
    ]
    deadline = time.monotonic() + 30
    while True:
        # Just after delete_all_topics a name may still be on its way out.
        futures = admin.create_topics(new, operation_timeout=30)
        failed = []
        for topic in new:
            try:
                futures[topic.topic].result(60)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    failed.append((topic, exc))
        if not failed:
            return
        if time.monotonic() > deadline:
            raise HealthCheckFailed(f"creating the seed frames' topics failed: {failed}")
        new = [topic for topic, _exc in failed]
        time.sleep(0.2)


def delete_all_topics(bootstrap: str) -> int:
    """Delete every topic (how many there were).

    Mutated CreateTopics/CreatePartitions frames create topics of up to 10,000 partitions;
    left to pile up, a million frames would measure Metadata answers listing 100k
    partitions rather than the request path. Deleting them between rounds also checks
    that the memory they held comes back (the RSS bound).
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = list(admin.list_topics(timeout=30).topics)
    if names:
        for future in admin.delete_topics(names, operation_timeout=30).values():
            with contextlib.suppress(Exception):  # names a mutation made invalid, races
                future.result(60)
    return len(names)


def round_trip(bootstrap: str) -> None:
    """A confluent-kafka produce and consume of one record on a fresh topic."""
    from tests.e2e._kafka import (
        Msg,
        confluent_consume,
        confluent_create_topic,
        confluent_produce,
        unique_topic,
    )

    topic = unique_topic("fuzz-round-trip")
    confluent_create_topic(bootstrap, topic)
    confluent_produce(bootstrap, topic, [Msg(b"fuzz", b"alive")])
    got = confluent_consume(bootstrap, topic, expected=1)
    if [(g.key, g.value) for g in got] != [(b"fuzz", b"alive")]:
        raise HealthCheckFailed(f"round trip after fuzzing read back {got!r}")


def fuzz(
    target: Target,
    seed: int,
    frames: int | None = None,
    seconds: float | None = None,
    round_frames: int = 10_000,
    progress: bool = False,
) -> Stats:
    """Fuzz ``target`` (started) until ``frames`` were processed or ``seconds`` passed,
    checking its health after each round and at the end."""
    stats = Stats()
    corpus = load_corpus()
    topics = seed_topics(corpus)
    driver = Driver(target.process.host, target.process.port, Mutator(corpus, seed), stats)
    start = time.monotonic()
    target.check(stats)
    create_seed_topics(target.process.bootstrap, topics)
    try:
        while True:
            elapsed = time.monotonic() - start
            if frames is not None and stats.frames >= frames:
                break
            if seconds is not None and elapsed >= seconds:
                break
            n = round_frames if frames is None else min(round_frames, frames - stats.frames)
            round_start = time.monotonic()
            driver.run(n)
            fuzz_time = time.monotonic() - round_start
            stats.seconds += fuzz_time
            driver.close()
            target.check(stats)
            stats.topics_deleted += delete_all_topics(target.process.bootstrap)
            create_seed_topics(target.process.bootstrap, topics)
            stats.rounds += 1
            if progress:
                print(
                    f"round {stats.rounds}: {stats.frames} frames, {n / fuzz_time:.0f} frames/s "
                    f"this round, {stats.closed} closed, {stats.stalled} held, "
                    f"RSS {target.rss_kib() // 1024} MiB, {stats.topics_deleted} topics deleted",
                    flush=True,
                )
    finally:
        driver.close()
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/fuzz", description="Fuzz a fresh `sluice dev` with mutated client frames."
    )
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--frames", type=int, help="stop after this many frames (default 100000)")
    limit.add_argument("--seconds", type=float, help="stop after this long")
    parser.add_argument("--seed", type=int, default=1, help="mutation seed (default 1)")
    parser.add_argument("--round-frames", type=int, default=10_000, help="frames between checks")
    parser.add_argument("--keep", action="store_true", help="keep the broker's directory")
    args = parser.parse_args(argv)
    frames = args.frames if args.frames or args.seconds else 100_000
    workdir = Path(tempfile.mkdtemp(prefix="sluice-fuzz-"))
    target = Target(workdir)
    target.start()
    try:
        stats = fuzz(target, args.seed, frames, args.seconds, args.round_frames, progress=True)
    except HealthCheckFailed as exc:
        print(f"FAILED (seed {args.seed}): {exc}\nbroker log: {target.process.log_path}")
        return 1
    finally:
        with contextlib.suppress(Exception):
            target.stop()
    print(
        f"{stats.frames} frames in {stats.seconds:.1f} s of fuzzing: {stats.rate():.0f} frames/s; "
        f"{stats.connections} connections, {stats.closed} closed by the broker, "
        f"{stats.stalled} held; {stats.rounds} rounds, each followed by a confluent-kafka "
        f"round trip; {stats.topics_deleted} topics deleted between rounds; "
        f"peak RSS {stats.peak_rss_kib // 1024} MiB; no traceback in the log"
    )
    for frame in stats.held:
        print(f"held without an answer for {STALL_S} s: {frame.hex()}")
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"broker directory kept: {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
