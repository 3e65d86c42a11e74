"""``cddlm host``: the hosts of a portal."""

from __future__ import annotations

import argparse

from cddlm.cli import common, output


def cmd_host_ls(args: argparse.Namespace) -> int:
    hosts = common.portal(args).hosts()
    if args.json:
        output.emit_json(hosts)
        return 0
    output.table(("HOST", "AGENT", "STATE", "COMPONENTS", "FREE"), [
        (h["name"], h["agent"], "down" if h["down"] else "up", h["components"],
         ", ".join("%s %g" % kv for kv in sorted(h["free"].items()))) for h in hosts])
    return 0


def cmd_host_mark(args: argparse.Namespace) -> int:
    down = args.host_command == "down"
    common.portal(args).set_host_state(args.name, down, getattr(args, "reason", None))
    if down:
        print("host %s is down: its components failed and their processes are being stopped; "
              "placement avoids it until `cddlm host up %s`" % (args.name, args.name))
    else:
        print("host %s is up" % args.name)
    return 0


def register(sub) -> None:
    h = sub.add_parser("host", help="the hosts of a portal: list, mark down or up").add_subparsers(
        dest="host_command", required=True, metavar="COMMAND")
    ls = h.add_parser("ls", help="list hosts: agent, up or down, components placed there, free capacity")
    common.add_portal_option(ls)
    common.add_json_option(ls)
    ls.set_defaults(func=cmd_host_ls)
    for name, text in (("down", "mark a host down: the components on it fail and their processes "
                                "are stopped; placement avoids it"),
                       ("up", "mark a host up again")):
        hp = h.add_parser(name, help=text, description=text)
        common.add_portal_option(hp)
        hp.add_argument("name", metavar="HOST", help="the host's name (`cddlm host ls`)")
        if name == "down":
            hp.add_argument("--reason", help="recorded with the host and in the failures")
        hp.set_defaults(func=cmd_host_mark)
