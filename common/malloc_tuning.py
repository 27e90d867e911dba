"""glibc malloc settings for a broker process: keep large buffers' pages.

A broker allocates and frees megabyte buffers all the time: a fetch answer's record bytes
read from a segment (``os.pread``), a produce request read off the socket. glibc gives a
freed block at the top of the heap back to the kernel once more than ``M_TRIM_THRESHOLD``
is free there (2x the largest block freed so far, a few MiB), and serves blocks above
``M_MMAP_THRESHOLD`` from fresh mappings: either way the next buffer's pages are new, and
faulting in and zeroing them cost more than filling them. A classic broker serving
librdkafka consumers spent 1.0 ms of CPU per MiB fetched with glibc's defaults and 0.57 ms
with these (768 MiB fetched by one consumer; bench/README.md, zero-copy sends). The price
is memory the process keeps: at most ``TRIM_THRESHOLD`` free at the top of its heap.

Operators who set ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` themselves keep
theirs. Not glibc (musl, macOS): nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's largest mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): buffers up to it
# come from the heap and are reused.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc() -> bool:
    """Apply the settings above; False when not applied (not glibc, or set by the
    operator's environment)."""
    if any(name in os.environ for name in _ENV):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
