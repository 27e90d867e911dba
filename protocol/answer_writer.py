"""The primitives of the answers encoded by hand (protocol.produce_response,
protocol.fetch_response): lengths, strings and unsigned varints, in the classic (fixed-width)
and the flexible (KIP-482 compact) forms, appended to a bytearray."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def array_length(out: bytearray, n: int, flexible: bool) -> None:
    """An array's length: INT32, or compact (UNSIGNED_VARINT of n + 1)."""
    if flexible:
        uvarint(out, n + 1)
    else:
        out += _I32.pack(n)


def string(out: bytearray, value: str | None, flexible: bool) -> None:
    """A (nullable) string: INT16 length, or compact; None is -1 / 0."""
    if value is None:
        if flexible:
            out.append(0)
        else:
            out += _I16.pack(-1)
        return
    data = value.encode()
    if flexible:
        uvarint(out, len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data


def uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
