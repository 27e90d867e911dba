"""Kafka's murmur2, exactly as the Java client's ``Utils.murmur2`` computes it.

The metadata transformer hashes ``"<topicId>-<partition>"`` with it so that a
partition maps to the same broker within an AZ on every broker, and would on a Java broker
too. It is not MurmurHash2 as published: the seed is fixed and the tail is folded like
Java's fall-through switch, so only this exact arithmetic gives Kafka's values.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit hash as Java's signed ``int`` (so it matches Kafka's test vectors)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(h: int) -> int:
    """Kafka's ``Utils.toPositive``: clears the sign bit (not ``abs``, which differs for
    negative values and overflows for MIN_VALUE in Java)."""
    return h & 0x7FFFFFFF


INT_MIN = -(1 << 31)


def java_abs(h: int) -> int:
    """Java's ``Math.abs`` of an ``int``: ``Integer.MIN_VALUE`` overflows and stays negative."""
    return h if h == INT_MIN else abs(h)


def java_rem(a: int, n: int) -> int:
    """Java's ``a % n`` on ints: the remainder takes the sign of ``a`` (Python's takes n's)."""
    r = abs(a) % abs(n)
    return -r if a < 0 else r
