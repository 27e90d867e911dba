"""kcat (librdkafka 2.0.2 as Debian ships it): the CLI people poke a broker with.

It sends older versions than current librdkafka (Metadata v4), and relies on auto-create or on a
topic another client made.
"""

from __future__ import annotations

import json

import pytest

from ._kafka import confluent_create_topic, kcat
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

LINES = [f"key{i}:value {i} with spaces" for i in range(50)] + ["k-empty:", "lastkey:last"]


def test_list_metadata(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=3)
    out = kcat(["-b", broker.bootstrap, "-L", "-J"])
    md = json.loads(out)
    assert [b["id"] for b in md["brokers"]] == [1]
    assert md["brokers"][0]["name"] == broker.bootstrap
    topics = {t["topic"]: t for t in md["topics"]}
    assert topic in topics
    parts = topics[topic]["partitions"]
    assert sorted(p["partition"] for p in parts) == [0, 1, 2]
    assert all(p["leader"] == 1 for p in parts)
    # The plain-text listing is what people actually read; it must work too.
    text = kcat(["-b", broker.bootstrap, "-L", "-t", topic])
    assert f'topic "{topic}" with 3 partitions' in text


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_consume_exact_offsets(broker: SluiceBroker, topic: str, codec: str | None) -> None:
    confluent_create_topic(broker.bootstrap, topic)
    args = ["-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-X", "acks=all"]
    if codec:
        # kcat's -z only knows snappy|gzip|lz4; zstd goes through the librdkafka property.
        args += ["-X", f"compression.codec={codec}"]
    kcat(args, stdin=("\n".join(LINES) + "\n").encode())
    out = kcat(
        [
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o %k %s\n",
        ]
    )
    expected = [f"{i} {line.replace(':', ' ', 1)}" for i, line in enumerate(LINES)]
    assert out.splitlines() == expected


def test_auto_create_on_produce(broker: SluiceBroker, topic: str) -> None:
    kcat(
        ["-b", broker.bootstrap, "-P", "-t", topic, "-K:"],
        stdin=b"a:1\nb:2\nc:3\n",
    )
    out = kcat(
        [
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%p %o %k %s\n",
        ]
    )
    rows = sorted(line.split() for line in out.splitlines())
    # Keys may spread over partitions; per partition offsets start at 0 and are dense.
    assert sorted((r[2], r[3]) for r in rows) == [("a", "1"), ("b", "2"), ("c", "3")]
    per_part: dict[str, list[int]] = {}
    for p, o, _k, _v in rows:
        per_part.setdefault(p, []).append(int(o))
    for offs in per_part.values():
        assert sorted(offs) == list(range(len(offs)))


def test_headers_and_null_values(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic)
    # -Z: an empty value is sent as NULL (a tombstone); -H adds headers to every message.
    kcat(
        [
            "-b",
            broker.bootstrap,
            "-P",
            "-t",
            topic,
            "-p",
            "0",
            "-K:",
            "-Z",
            "-H",
            "h1=v1",
            "-H",
            "h2=v2",
        ],
        stdin=b"k1:v1\nk2:\nk3:v3\n",
    )
    out = kcat(
        [
            "-b",
            broker.bootstrap,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o|%k|%S|%s|%h\n",
        ]
    )
    assert out.splitlines() == [
        "0|k1|2|v1|h1=v1,h2=v2",
        "1|k2|-1||h1=v1,h2=v2",
        "2|k3|2|v3|h1=v1,h2=v2",
    ]


def test_query_offsets_by_time(broker: SluiceBroker, topic: str) -> None:
    from ._kafka import Msg, confluent_produce

    confluent_create_topic(broker.bootstrap, topic)
    ts = [1_700_000_000_000 + 1000 * i for i in range(5)]
    confluent_produce(
        broker.bootstrap, topic, [Msg(b"k", str(i).encode()) for i in range(5)], timestamps=ts
    )
    # kcat -Q is ListOffsets by timestamp: first offset whose timestamp is >= the asked one.
    out = kcat(["-b", broker.bootstrap, "-Q", "-t", f"{topic}:0:{ts[2] - 1}"])
    assert f"{topic} [0] offset 2" in out, out
