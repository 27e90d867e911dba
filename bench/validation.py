"""What checking every record before acknowledging it costs the produce path (issue 12, item 4).

    .venv/bin/python -m bench.validation            # ~1 min: 5 runs of 8 MiB per case
    .venv/bin/python -m bench.validation --mib 32 --repeats 9 --batch-kib 1024

In-process, on batches a stock client writes (kafka-python's batch builder: 16 KiB batches by
default, as the Java producer's batch.size), for 1 KiB and 100 B records, uncompressed and lz4,
zstd, snappy, gzip. Per case, the CPU the broker's produce handler spends on the records:

* before: ``parse_batches`` alone (framing, magic, CRC over every byte: today's main);
* after:  ``parse_batches`` + ``validate_records`` (decompress into the scratch buffer and
  walk every record in C).

Figures are CPU ms per MiB of records produced (uncompressed record bytes, what the user
sent) and per MiB on the wire, medians of ``--repeats`` runs, next to this machine's own
crc32c and memcpy throughput measured in the same run (ratios, since absolute figures on a
shared 2-core box mean little). A second table compares the ways to walk records that were
considered, in ns per record: the compiled walker, the pure-Python reference, and a
numpy-assisted walk (varints decoded for every byte position at once, then a Python hop per
record).
"""

from __future__ import annotations

import argparse
import random
import time
import warnings
from collections.abc import Callable

import crc32c

from protocol import record_walk
from protocol.batch_validation import NO_RULES, validate_records
from protocol.records import HEADER_SIZE, parse_batches

from .stats import MiB, med, runs

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _words(rnd: random.Random) -> list[bytes]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return [
        "".join(rnd.choice(letters) for _ in range(rnd.randint(3, 9))).encode() for _ in range(3000)
    ]


def _value(rnd: random.Random, words: list[bytes], size: int) -> bytes:
    """A JSON event padded with random words, exactly ``size`` long: repeated field names
    and a varying body, as application events are."""
    out = bytearray(
        b'{"user_id": %d, "event": "%s", "page": "/products/%s", "ts": %d, "text": "'
        % (
            rnd.randrange(10**6),
            rnd.choice(words),
            rnd.choice(words),
            1_700_000_000_000 + rnd.randrange(10**9),
        )
    )
    while len(out) < size:
        out += rnd.choice(words) + b" "
    return bytes(out[: size - 2]) + b'"}'


def build_batches(record_size: int, codec: int, mib: float, batch_bytes: int) -> tuple[bytes, int]:
    """(one partition's records blob of ~``mib`` MiB of records, record count)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kafka-python's schema loading
        from kafka.record.default_records import DefaultRecordBatchBuilder

    rnd = random.Random(record_size * 10 + codec)
    words = _words(rnd)
    now = int(time.time() * 1000)
    out = bytearray()
    total = count = 0
    while total < mib * MiB:
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=codec,
            is_transactional=False,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=batch_bytes,
        )
        in_batch = 0
        while True:
            key = b"key-%d" % rnd.randrange(10_000)
            value = _value(rnd, words, record_size - len(key))
            if builder.append(in_batch, now + in_batch, key, value, []) is None:
                break
            in_batch += 1
            total += record_size
            if in_batch * record_size >= batch_bytes:
                break
        out += builder.build()
        count += in_batch
    return bytes(out), count


def cpu_ms(fn: Callable[[], object], loops: int) -> float:
    start = time.process_time()
    for _ in range(loops):
        fn()
    return (time.process_time() - start) * 1000 / loops


def machine_reference(repeats: int) -> tuple[float, float]:
    """ms of CPU per MiB: crc32c (the broker's own per-byte work) and memcpy."""
    data = random.Random(0).randbytes(8 * MiB)
    crc = med([cpu_ms(lambda: crc32c.crc32c(data), 10) / 8 for _ in range(repeats)])
    copy = med([cpu_ms(lambda: bytearray(data), 10) / 8 for _ in range(repeats)])
    return crc, copy


def _numpy_walk(records: bytes, count: int) -> int:
    """Records walked with numpy's help: where every byte position's varint ends is found at
    once, then one Python hop per record (the chain of record starts is inherently
    sequential). It only follows record lengths, less than the full check does."""
    import numpy as np

    b = np.frombuffer(records, dtype=np.uint8)
    n = len(b)
    cont = (b & 0x80) != 0
    # end of the varint starting at each position: next index whose continuation bit is clear
    stops = np.flatnonzero(~cont)
    nxt = stops[np.searchsorted(stops, np.arange(n))] if len(stops) else np.full(n, n)
    pos = walked = 0
    while pos < n:
        end = int(nxt[pos])
        value = 0
        for shift, byte in enumerate(b[pos : end + 1].tolist()):
            value |= (byte & 0x7F) << (7 * shift)
        length = (value >> 1) ^ -(value & 1)
        pos = end + 1 + length
        walked += 1
    if walked != count:
        raise ValueError("count mismatch")
    return walked


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mib", type=float, default=8.0, help="MiB of records per case")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch-kib", type=int, default=16, help="records per batch, KiB")
    ap.add_argument("--codecs", default="none,lz4,zstd,snappy,gzip")
    args = ap.parse_args()

    crc_ms, copy_ms = machine_reference(args.repeats)
    print(
        f"machine: crc32c {crc_ms:.3f} ms/MiB ({1000 / crc_ms:.0f} MiB/s), "
        f"memcpy {copy_ms:.3f} ms/MiB ({1000 / copy_ms:.0f} MiB/s)"
    )
    print(
        f"batches of {args.batch_kib} KiB of records, {args.mib:g} MiB per case, "
        f"median of {args.repeats} runs; CPU ms per MiB of records (per MiB on the wire)"
    )
    print(
        f"{'record':>6} {'codec':>6} {'ratio':>5} | {'before':>14} | {'after':>14} | "
        f"{'added':>6} {'= x crc32c':>10} | {'ns/record':>9}"
    )
    walk_inputs: dict[int, tuple[bytes, int]] = {}
    for record_size in (1024, 100):
        for name in args.codecs.split(","):
            codec = CODECS[name]
            blob, count = build_batches(record_size, codec, args.mib, args.batch_kib * 1024)
            if codec == 0:
                walk_inputs[record_size] = (blob, count)
            view = memoryview(blob)
            now = int(time.time() * 1000)
            batches = parse_batches(view, 1 << 30)
            validate_records(view, batches, NO_RULES, now)  # warm up; and it must pass

            def before(view: memoryview = view) -> None:
                parse_batches(view, 1 << 30)

            def after(view: memoryview = view, now: int = now) -> None:
                validate_records(view, parse_batches(view, 1 << 30), NO_RULES, now)

            data_mib = count * record_size / MiB
            wire = len(blob) / MiB
            b = [cpu_ms(before, 3) / data_mib for _ in range(args.repeats)]
            a = [cpu_ms(after, 3) / data_mib for _ in range(args.repeats)]
            added = med(a) - med(b)
            print(
                f"{record_size:>5}B {name:>6} {data_mib / wire:>5.2f} | "
                f"{med(b):>5.2f} ({med(b) * data_mib / wire:>5.2f}) | "
                f"{med(a):>5.2f} ({med(a) * data_mib / wire:>5.2f}) | "
                f"{added:>6.2f} {added / crc_ms:>9.1f}x | "
                f"{added * 1e6 / (MiB / record_size):>9.0f}"
            )
            print(f"{'':>14}   before {runs(b, '{:.2f}')}; after {runs(a, '{:.2f}')}")

    print("\nwalking uncompressed records, ns per record (median; pure Python on 1/8 of them)")
    for record_size, (blob, _count) in walk_inputs.items():
        view = memoryview(blob)
        batches = parse_batches(view, 1 << 30)
        bodies = [
            (bytes(view[h.offset + HEADER_SIZE : h.offset + h.size]), h.records_count)
            for h in batches
        ]
        n = sum(c for _, c in bodies)
        few = bodies[: max(1, len(bodies) // 8)]
        n_few = sum(c for _, c in few)

        def compiled(bodies: list[tuple[bytes, int]] = bodies) -> None:
            for body, c in bodies:
                record_walk.walk(body, c, 0)

        def reference(few: list[tuple[bytes, int]] = few) -> None:
            for body, c in few:
                record_walk.walk_reference(body, c, 0)

        def numpy_assisted(few: list[tuple[bytes, int]] = few) -> None:
            for body, c in few:
                _numpy_walk(body, c)

        c_ns = med([cpu_ms(compiled, 3) * 1e6 / n for _ in range(args.repeats)])
        p_ns = med([cpu_ms(reference, 1) * 1e6 / n_few for _ in range(args.repeats)])
        np_ns = med([cpu_ms(numpy_assisted, 1) * 1e6 / n_few for _ in range(args.repeats)])
        per_mib = MiB / record_size / 1e6  # ms per MiB at 1 ns per record
        print(
            f"  {record_size:>5} B records: compiled {c_ns:>7.1f} ns ({c_ns * per_mib:.3f} ms/MiB)"
            f" | pure Python {p_ns:>7.0f} ns ({p_ns * per_mib:.1f} ms/MiB)"
            f" | numpy-assisted (lengths only) {np_ns:>7.0f} ns ({np_ns * per_mib:.1f} ms/MiB)"
        )


if __name__ == "__main__":
    main()
