"""Operator commands for a *stopped* voter's data directory (see the package docstring).

python -m controller.raft.admin inspect DIR
python -m controller.raft.admin set-voters DIR --node-id 4 --voters 1,2,4
"""

from __future__ import annotations

import argparse
import json
import sys

from controller.raft.storage import inspect, write_membership


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
    if args.cmd == "inspect":
        print(json.dumps(inspect(args.dir), sort_keys=True))
        return 0
    voters = sorted({int(v) for v in args.voters.split(",") if v.strip()})
    if args.node_id not in voters or len(voters) % 2 == 0:
        print("the node must be one of an odd number (1 or 3) of voters", file=sys.stderr)
        return 2
    write_membership(args.dir, args.node_id, voters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
