"""The ``cddlm`` command: one entry point, one sub-command per user task (CONTRACT section 9).
One module per command group registers its sub-commands; ``main`` is the one error boundary.

Exit codes: 0 success, 1 a fault or invalid input (message on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys

from cddlm.cli import apps, hosts, lang, placement, portal, users
from cddlm.cli.common import DEFAULT_PORTAL
from cddlm.errors import CddlmError

GROUPS = (portal, apps, hosts, lang, placement, users)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cddlm", description="CDDLM deployment portal and client")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CddlmError as e:
        from cddlm.client import PortalFault
        label = "" if isinstance(e, PortalFault) else type(e).__name__ + ": "
        print("cddlm: %s%s" % (label, e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


__all__ = ["DEFAULT_PORTAL", "build_parser", "main"]
