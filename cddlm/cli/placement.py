"""``cddlm placement``: the placement solver on its own."""

from __future__ import annotations

import argparse
import json


def cmd_placement_solve(args: argparse.Namespace) -> int:
    from cddlm.application import descriptors
    from cddlm.placement import api
    datacenter = descriptors.load_data_file(args.datacenter)
    request = descriptors.load_data_file(args.request)
    result = api.solve_json(datacenter, request, time_limit=args.time_limit, seed=args.seed)
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def register(sub) -> None:
    placement = sub.add_parser("placement", help="placement solver").add_subparsers(
        dest="placement_command", required=True)
    s = placement.add_parser("solve", help="solve one placement problem, print JSON")
    s.add_argument("--datacenter", required=True, metavar="DC")
    s.add_argument("--request", required=True, metavar="REQ")
    s.add_argument("--time-limit", type=float, default=10.0, metavar="S")
    s.add_argument("--seed", type=int, default=0, help="solver random seed (default 0)")
    s.set_defaults(func=cmd_placement_solve)
