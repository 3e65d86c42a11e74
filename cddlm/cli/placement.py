"""``cddlm placement``: the placement solver on its own."""

from __future__ import annotations

import argparse
import json

from cddlm.cli.common import CliError


def cmd_placement_solve(args: argparse.Namespace) -> int:
    from cddlm.application import descriptors
    from cddlm.placement import api
    datacenter = descriptors.load_data_file(args.datacenter)
    request = descriptors.load_data_file(args.request)
    result = api.solve_json(datacenter, request, time_limit=args.time_limit, seed=args.seed)
    print(json.dumps(result, indent=2, sort_keys=True))
    if result.get("status") == "infeasible":
        raise CliError("infeasible: %s" % (result.get("reason") or "no placement satisfies the "
                                           "hard policies"),
                       "relax one of those policies, or give the datacenter more capacity")
    return 0


def register(sub) -> None:
    placement = sub.add_parser("placement", help="the placement solver on its own").add_subparsers(
        dest="placement_command", required=True, metavar="COMMAND")
    s = placement.add_parser("solve", help="solve one placement problem and print the result as "
                             "JSON (exit 1 when infeasible)",
                             description="Solve one placement problem (CONTRACT section 10) and "
                             "print the result as JSON; an infeasible problem prints its "
                             "conflicts and exits 1. Try: cddlm placement solve --datacenter "
                             "examples/datacenter.yaml --request examples/placement-request.yaml")
    s.add_argument("--datacenter", required=True, metavar="DC",
                   help="the datacenter file (YAML or JSON): resources, levels, location tree, "
                        "network, scopes")
    s.add_argument("--request", required=True, metavar="REQ",
                   help="the request file (YAML or JSON): components, groups, policies")
    s.add_argument("--time-limit", type=float, default=10.0, metavar="S",
                   help="seconds the solver may take to improve its answer (default 10)")
    s.add_argument("--seed", type=int, default=0, help="solver random seed (default 0)")
    s.set_defaults(func=cmd_placement_solve)
