"""What a zero-copy send (sendfile) would save a classic fetch: the sending thread's CPU per
MiB for ``pread`` + ``send`` against ``os.sendfile``, from a file in the page cache to a
loopback TCP connection drained by another thread (issue 29 asks whether Sluice should send record
bytes from files as Kafka does).

    python -m bench.zero_copy [--mib 64]

Compare the difference with the broker's whole CPU per MiB fetched (bench.classic's
``fetch CPU s/MiB``): that is the most sendfile could take off a classic fetch.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import threading
import time

MiB = 1 << 20


def _drain(sock: socket.socket) -> None:
    buf = bytearray(4 * MiB)
    while sock.recv_into(buf):
        pass


def measure(mib: int) -> tuple[float, float]:
    """(pread + send, sendfile): the sender's CPU ms per MiB, 1 MiB per call."""
    with tempfile.NamedTemporaryFile(prefix="sluice-zero-copy-") as f:
        f.write(os.urandom(mib * MiB))
        f.flush()
        fd = f.fileno()
        for i in range(mib):  # into the page cache, as a recent segment is
            os.pread(fd, MiB, i * MiB)
        # A TCP connection on the loopback, as a client's to the broker on one host.
        with socket.create_server(("127.0.0.1", 0)) as server:
            sender = socket.create_connection(server.getsockname())
            receiver, _ = server.accept()
        drain = threading.Thread(target=_drain, args=(receiver,), daemon=True)
        drain.start()
        try:
            started = time.thread_time()
            for i in range(mib):
                sender.sendall(os.pread(fd, MiB, i * MiB))
            copied = (time.thread_time() - started) * 1000 / mib
            started = time.thread_time()
            for i in range(mib):
                offset, left = i * MiB, MiB
                while left:
                    sent = os.sendfile(sender.fileno(), fd, offset, left)
                    offset, left = offset + sent, left - sent
            zero = (time.thread_time() - started) * 1000 / mib
        finally:
            sender.close()
            drain.join(10)
            receiver.close()
    return copied, zero


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.zero_copy", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args(argv)
    copied, zero = measure(args.mib)
    print(f"sender CPU per MiB: pread + send {copied:.3f} ms, sendfile {zero:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
