"""Operator commands for a *stopped* voter's data directory (see the package docstring).

python -m controller.raft.admin inspect DIR
python -m controller.raft.admin set-voters DIR --node-id 4 --voters 1,2,4

DIR is a controller's ``data.dir`` (``<data-dir>/controller`` for `sluice dev`) or the
``raft`` directory inside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from controller.raft.storage import LOG_FILE, MEMBERSHIP_FILE, inspect, write_membership


def raft_dir(given: str) -> Path | None:
    """The directory holding the Raft files: ``given`` itself or its ``raft`` child
    (controllers keep their log in ``<data.dir>/raft``). None: neither holds them."""
    for candidate in (Path(given), Path(given) / "raft"):
        if (candidate / LOG_FILE).is_file() and (candidate / MEMBERSHIP_FILE).is_file():
            return candidate
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m controller.raft.admin")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_inspect = sub.add_parser("inspect", help="print term, vote and log position as JSON")
    p_inspect.add_argument("dir")
    p_set = sub.add_parser("set-voters", help="record a new voter set (offline procedure)")
    p_set.add_argument("dir")
    p_set.add_argument("--node-id", type=int, required=True)
    p_set.add_argument("--voters", required=True, help="comma-separated voter ids")
    args = ap.parse_args(argv)
    directory = raft_dir(args.dir)
    if directory is None:
        print(
            f"{ap.prog}: no controller Raft log in {args.dir} or {Path(args.dir) / 'raft'} "
            f"(expected {LOG_FILE} and {MEMBERSHIP_FILE})",
            file=sys.stderr,
        )
        return 2
    if args.cmd == "inspect":
        try:
            print(json.dumps(inspect(directory), sort_keys=True))
        except (OSError, ValueError) as exc:
            print(f"{ap.prog}: cannot read {directory}: {exc}", file=sys.stderr)
            return 2
        return 0
    voters = sorted({int(v) for v in args.voters.split(",") if v.strip()})
    if args.node_id not in voters or len(voters) % 2 == 0:
        print("the node must be one of an odd number (1 or 3) of voters", file=sys.stderr)
        return 2
    write_membership(directory, args.node_id, voters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
