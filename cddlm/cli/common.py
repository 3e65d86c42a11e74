"""What every command shares: the portal to talk to, argument parsing helpers, the progress line."""

from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT_PORTAL = "http://127.0.0.1:8080/cddlm/portal"


def properties(pairs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(usage("-p expects KEY=VALUE, got %r" % pair))
        out[key] = value
    return out


def usage(message: str) -> int:
    print("cddlm: " + message, file=sys.stderr)
    return 2


def portal(args: argparse.Namespace):
    from cddlm.client import Portal
    return Portal(args.portal or os.environ.get("CDDLM_PORTAL") or DEFAULT_PORTAL)


def add_portal_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--portal", metavar="URL",
                        help="portal endpoint (default $CDDLM_PORTAL, then %s)" % DEFAULT_PORTAL)


def option_pairs(pairs: list[str] | None) -> dict:
    out: dict = {}
    for pair in pairs or []:
        uri, sep, value = pair.partition("=")
        if not sep or not uri:
            raise SystemExit(usage("--option expects URI=VALUE, got %r" % pair))
        if uri in out:
            raise SystemExit(usage("option %s given twice" % uri))
        if value in ("true", "false"):
            out[uri] = value == "true"
        elif value.lstrip("-").isdigit():
            out[uri] = int(value)
        else:
            out[uri] = value
    return out


def local(el) -> str:
    from lxml import etree
    return etree.QName(el).localname


class Progress:
    """One status line per change; redrawn in place on a terminal."""

    def __init__(self, label: str, stream=None):
        self.label = label
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.last = None
        self.start = time.monotonic()

    def __call__(self, status: dict) -> None:
        comps = [h for h in status.get("health", []) if h.get("type") not in
                 ("compound", "sequence", "parallel")]
        counts: dict[str, int] = {}
        for h in comps:
            counts[h["state"]] = counts.get(h["state"], 0) + 1
        detail = ", ".join("%d %s" % (n, s) for s, n in sorted(counts.items()))
        line = "%s: %s%s" % (self.label, status["state"], " (%s)" % detail if detail else "")
        if line == self.last:
            return
        self.last = line
        stamp = "[%5.1fs] " % (time.monotonic() - self.start)
        if self.tty:
            self.stream.write("\r\033[K" + stamp + line)
        else:
            self.stream.write(stamp + line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()
