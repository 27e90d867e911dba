"""How many client bytes cross availability zones, by kind of client (issue 6's benchmark).

    .venv/bin/python -m bench.az_traffic            # 16 MiB per client run, ~2 min
    .venv/bin/python -m bench.az_traffic --mib 64

Six brokers in three racks behind a three-voter controller quorum (sluice.cluster). For each
kind of client and each AZ it "lives" in, one client produces (or consumes) a 6-partition
topic; the brokers count record bytes per broker rack (``sluice_client_bytes_total``), and
the figure is the fraction of the bytes that were served by a broker outside the client's
AZ — the traffic a diskless broker exists to keep local. Kinds:

``aware-producer`` / ``aware-consumer``   ``client.id=bench,diskless_az=<az>``;
``rack-consumer``                         standard ``client.rack=<az>`` (KIP-392 preferred
                                          read replica), no client.id hint;
``unaware-producer`` / ``unaware-consumer`` no hint at all: routed to the recorded leaders,
                                          so about two thirds cross with three AZs.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster

RACKS = ("az-a", "az-b", "az-c")
PARTITIONS = 6
RECORD = 1024
_SAMPLE = re.compile(r'sluice_client_bytes_total\{broker_rack="([^"]*)",.*direction="([^"]*)"\}')
FAST_CLIENT = {"topic.metadata.refresh.interval.ms": 1000}


def bytes_by_rack(cluster: LocalCluster, direction: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in cluster.brokers:
        for key, value in b.metrics().items():
            m = _SAMPLE.fullmatch(key)
            if m and m.group(2) == direction:
                out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def crossed_fraction(
    cluster: LocalCluster, direction: str, az: str, run: Callable[[], None]
) -> float:
    before = bytes_by_rack(cluster, direction)
    run()
    after = bytes_by_rack(cluster, direction)
    moved = {rack: after.get(rack, 0.0) - before.get(rack, 0.0) for rack in after}
    total = sum(moved.values())
    if total <= 0:
        raise SystemExit(f"no {direction} bytes counted for a client in {az}")
    return sum(v for rack, v in moved.items() if rack != az) / total


def produce(bootstrap: str, topic: str, conf: dict[str, object], mib: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, **FAST_CLIENT, **conf})
    value = b"x" * RECORD
    for i in range(mib * 1024):
        while True:
            try:
                p.produce(topic, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    if p.flush(120) != 0:
        raise SystemExit("producer did not deliver everything")


def consume(bootstrap: str, topic: str, conf: dict[str, object], records: int) -> None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            **FAST_CLIENT,
            **conf,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, deadline = 0, time.monotonic() + 120
    try:
        while got < records and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
    finally:
        c.close()
    if got < records:
        raise SystemExit(f"consumer got {got}/{records} records")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.az_traffic", description=__doc__)
    ap.add_argument("--mib", type=int, default=16, help="MiB per client run (default 16)")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="sluice-bench-az-"))
    cluster = LocalCluster(
        root,
        brokers=6,
        racks=RACKS,
        broker_options={"produce.commit.interval.ms": "50"},
        controllers=3,
    )
    cluster.up()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        deadline = time.monotonic() + 30
        while len(admin.list_topics(timeout=10).brokers) < 6:
            if time.monotonic() > deadline:
                raise SystemExit("six brokers did not register")
            time.sleep(0.2)
        boot = cluster.bootstrap
        records = args.mib * 1024
        crossed: dict[str, list[float]] = {}  # kind -> fraction per AZ (a, b, c)
        for aware in (True, False):
            for az in RACKS:
                topic = f"az-{az}-{uuid.uuid4().hex[:8]}"
                admin.create_topics([NewTopic(topic, PARTITIONS)])[topic].result(30)
                time.sleep(1.0)  # every broker follows the new topic
                hint: dict[str, object] = {"client.id": f"bench,diskless_az={az}"} if aware else {}
                prefix = "aware" if aware else "unaware"
                runs: list[tuple[str, str, Callable[[], None]]] = [
                    (
                        f"{prefix}-producer",
                        "produce",
                        partial(produce, boot, topic, hint, args.mib),
                    ),
                    (f"{prefix}-consumer", "fetch", partial(consume, boot, topic, hint, records)),
                ]
                if aware:
                    rack = {"client.rack": az}
                    runs.append(
                        ("rack-consumer", "fetch", partial(consume, boot, topic, rack, records))
                    )
                for kind, direction, run in runs:
                    crossed.setdefault(kind, []).append(
                        crossed_fraction(cluster, direction, az, run)
                    )
        print(f"\nclient bytes served by a broker in another AZ ({args.mib} MiB per client run,")
        print("6 brokers in 3 racks, 3 controllers):")
        for kind, values in crossed.items():
            shown = " ".join(f"{v:6.1%}" for v in values)
            print(f"  {kind:17s} crossed {sum(values) / len(values):6.1%}   (AZ a/b/c: {shown})")
        return 0
    finally:
        cluster.down()
        cluster.remove_data()


if __name__ == "__main__":
    raise SystemExit(main())
