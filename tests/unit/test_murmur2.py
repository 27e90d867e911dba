"""murmur2 against the vectors of Kafka's own UtilsTest.testMurmur2 (clients module)."""

from __future__ import annotations

import pytest

from protocol.murmur2 import murmur2, to_positive

KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_to_positive_clears_the_sign_bit() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert to_positive(479470107) == 479470107
    assert to_positive(-(2**31)) == 0
