"""What every command shares: the portal to talk to, argument parsing helpers, the progress line."""

from __future__ import annotations

import argparse
import sys
import time

from cddlm.config import DEFAULT_PORTAL


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
    """The portal the command talks to, with the caller's credentials and TLS settings: from
    the options, the environment, then the config file (``cddlm.client.ClientConfig``); a
    user without password or token is asked for the password on a terminal."""
    import getpass
    from cddlm.client import ClientConfig, Credentials, Portal
    config = ClientConfig.load(args.portal, getattr(args, "user", None), getattr(args, "ca_file", None),
                               getattr(args, "client_cert", None), getattr(args, "client_key", None))
    credentials = config.credentials
    if credentials.user and credentials.password is None and not credentials.token \
            and sys.stdin.isatty():
        credentials = Credentials(credentials.user,
                                  getpass.getpass("password for %s: " % credentials.user))
    return Portal(config.portal, credentials=credentials, tls=config.tls)


def add_portal_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--portal", metavar="URL",
                        help="portal endpoint (default $CDDLM_PORTAL, the config file, then %s)"
                        % DEFAULT_PORTAL)
    parser.add_argument("--user", metavar="NAME",
                        help="authenticate as NAME (default $CDDLM_USER or the config file); the "
                             "password comes from $CDDLM_PASSWORD, the config file or a prompt, "
                             "a token from $CDDLM_TOKEN")
    parser.add_argument("--ca-file", metavar="PEM",
                        help="CA certificates that sign the portal's (default $CDDLM_CA_FILE, "
                             "the config file, then the system's)")
    parser.add_argument("--client-cert", metavar="PEM",
                        help="present this certificate (mutual TLS; with --client-key)")
    parser.add_argument("--client-key", metavar="PEM", help="the client certificate's key")


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
