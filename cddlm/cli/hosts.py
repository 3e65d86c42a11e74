"""``cddlm host``: the hosts of a portal."""

from __future__ import annotations

import argparse

from cddlm.cli import common


def cmd_host(args: argparse.Namespace) -> int:
    portal = common.portal(args)
    if args.host_command == "ls":
        for h in portal.hosts():
            free = ", ".join("%s %g" % kv for kv in sorted(h["free"].items()))
            print("%-20s %-6s %-8s %s" % (h["name"], h["agent"], "DOWN" if h["down"] else "up", free))
        return 0
    portal.set_host_state(args.name, args.host_command == "down", getattr(args, "reason", None))
    print("host %s is %s" % (args.name, args.host_command))
    return 0


def register(sub) -> None:
    h = sub.add_parser("host", help="hosts of a portal").add_subparsers(dest="host_command",
                                                                     required=True)
    for name, text in (("ls", "list hosts: agent, up or down, free capacity"),
                       ("down", "mark a host down: its components fail, placement avoids it"),
                       ("up", "mark a host up again")):
        hp = h.add_parser(name, help=text)
        common.add_portal_option(hp)
        if name != "ls":
            hp.add_argument("name", metavar="HOST")
        if name == "down":
            hp.add_argument("--reason", help="recorded with the host and in failures")
        hp.set_defaults(func=cmd_host)
