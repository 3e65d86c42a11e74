"""``cddlm logs``: a component's stdout or stderr, read by the portal where the component runs
(``ext:logs``), so it works for any host the portal serves; ``-f`` follows it."""

from __future__ import annotations

import argparse
import sys
import time

from cddlm.cli import common
from cddlm.cli.common import CliError
from cddlm.config import DashboardLimits

MAX_LINES = DashboardLimits.max_log_lines   # what a portal answers at most (by default)

FOLLOW_POLL = 0.5       # seconds between reads when nothing new came
STATE_EVERY = 2.0       # seconds between checks whether the application has terminated


def cmd_logs(args: argparse.Namespace) -> int:
    app = common.application(args)
    stream = "stderr" if args.stderr else "stdout"
    if args.component:
        paths = [args.component.strip("/")]
    else:
        paths = [c["path"] for c in app.components() if c["type"] == "process"]
        if not paths:
            raise CliError("%s has no process components, so no logs" % args.app,
                           "`cddlm status %s` lists its components" % args.app)
    prefix = len(paths) > 1
    offsets: dict[str, int] = {}
    for path in paths:
        offsets[path] = _show(app, path, stream, prefix, lines=args.lines)
    if not args.follow:
        return 0
    checked = time.monotonic()
    away: dict[str, str] = {}           # path -> why its host stopped answering (said once)
    try:
        while True:
            moved = False
            for path in paths:
                before = offsets[path]
                offsets[path] = _follow(app, path, stream, prefix, before, away)
                moved = moved or offsets[path] != before
            if time.monotonic() - checked > STATE_EVERY:
                checked = time.monotonic()
                if app.state() == "terminated":
                    for path in paths:      # what was written last
                        offsets[path] = _show(app, path, stream, prefix, offset=offsets[path])
                    return 0
            if not moved:
                time.sleep(FOLLOW_POLL)
    except KeyboardInterrupt:
        return 0


def _follow(app, path: str, stream: str, prefix: bool, offset: int, away: dict[str, str]) -> int:
    """One read of a followed log. A host that stops answering (a host portal down or busy)
    does not end the follow: it is said once, and the log goes on from the same offset when the
    host answers again."""
    from cddlm.client import PortalFault
    try:
        offset = _show(app, path, stream, prefix, offset=offset)
    except PortalFault as e:
        if e.fault != "ResourceUnavailableFault":
            raise
        if path not in away:
            print("cddlm: %s: %s (still following; Ctrl-C to stop)" % (path, e.message), file=sys.stderr)
            away[path] = e.message
        return offset
    if away.pop(path, None) is not None:
        print("cddlm: %s: its host answers again" % path, file=sys.stderr)
    return offset


def _show(app, path: str, stream: str, prefix: bool, *, lines: int | None = None,
          offset: int | None = None) -> int:
    from cddlm.client import PortalFault
    try:
        found = app.logs(path, stream, lines=lines, offset=offset)
    except PortalFault as e:
        if e.fault == "BadArgumentFault" and "no component" in e.message:
            raise CliError(e.message, "`cddlm status %s` lists its components" % app.id) from None
        raise
    if not found["available"] and offset is None:
        print("cddlm: %s runs on %s, which another portal serves: ask that portal" % (
            path, found["host"]), file=sys.stderr)
    head = path + " | " if prefix else ""
    for line in found["lines"]:
        sys.stdout.write(head + line + "\n")
    sys.stdout.flush()
    return found["offset"]


def register(sub) -> None:
    p = sub.add_parser("logs", help="print a component's stdout (or stderr); -f follows it",
                       description="Print the last lines a component wrote to its stdout (or "
                                   "stderr), read by the portal where the component runs. "
                                   "Without COMPONENT, every process component's, each line "
                                   "prefixed with its path.")
    common.add_portal_option(p)
    common.add_app_argument(p)
    p.add_argument("component", metavar="COMPONENT", nargs="?",
                   help="the component's path (site/web); default: every process component")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing what is written, until the application terminates or Ctrl-C")
    p.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    p.add_argument("-n", "--lines", type=_lines, default=40, metavar="N",
                   help="how many of the last lines to print first (default 40, at most %d)" % MAX_LINES)
    p.set_defaults(func=cmd_logs)


def _lines(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % value) from None
    if not 1 <= n <= MAX_LINES:
        raise argparse.ArgumentTypeError("must be between 1 and %d" % MAX_LINES)
    return n
