"""The ``cddlm`` command: one entry point, one sub-command per user task (CONTRACT section 9).

Exit codes: 0 success, 1 a fault or invalid input (message on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from cddlm.errors import CddlmError

DEFAULT_PORTAL = "http://127.0.0.1:8080/cddlm/portal"


def _properties(pairs: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(_usage("-p expects KEY=VALUE, got %r" % pair))
        out[key] = value
    return out


def _usage(message: str) -> int:
    print("cddlm: " + message, file=sys.stderr)
    return 2


# -- portal ---------------------------------------------------------------------------------
def cmd_portal_serve(args: argparse.Namespace) -> int:
    import logging
    import signal
    from cddlm.app import Portal
    from cddlm.config import Settings
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings(host=args.host, port=args.port, state_dir=args.state_dir, db_url=args.db,
                        datacenter_file=args.datacenter, public_url=args.public_url,
                        import_path=tuple(args.import_path or ()), hosts_dir=args.hosts_dir,
                        engine_workers=args.workers, lease_seconds=args.lease_seconds,
                        heartbeat_seconds=args.heartbeat, liveness_interval=args.liveness_interval)
    if args.consumer_network:
        settings = settings.replace(consumer_networks=tuple(args.consumer_network))
    portal = Portal(settings)

    def stop(signum, frame):
        portal.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    portal.bind()

    def ready(url: str) -> None:
        print("portal ready at %s" % url, flush=True)

    try:
        portal.serve_forever(ready)
    finally:
        portal.stop()
    return 0


# -- client commands ------------------------------------------------------------------------
def _portal(args: argparse.Namespace):
    from cddlm.client import Portal
    return Portal(args.portal or os.environ.get("CDDLM_PORTAL") or DEFAULT_PORTAL)


def _option_pairs(pairs: list[str] | None) -> dict:
    out: dict = {}
    for pair in pairs or []:
        uri, sep, value = pair.partition("=")
        if not sep or not uri:
            raise SystemExit(_usage("--option expects URI=VALUE, got %r" % pair))
        if uri in out:
            raise SystemExit(_usage("option %s given twice" % uri))
        if value in ("true", "false"):
            out[uri] = value == "true"
        elif value.lstrip("-").isdigit():
            out[uri] = int(value)
        else:
            out[uri] = value
    return out


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


def _report_failure(status: dict) -> None:
    info = status.get("terminationInfo") or {}
    print("cddlm: application failed: %s" % (info.get("reason") or status.get("stateInfo") or "failed"),
          file=sys.stderr)
    if info.get("stderr"):
        print("last lines of %s's stderr:\n%s" % (info.get("component"), info["stderr"]), file=sys.stderr)


def cmd_deploy(args: argparse.Namespace) -> int:
    import pathlib
    from cddlm import xmlsafe
    from cddlm.application import descriptors, options as opts
    from cddlm.lang import registry
    language = args.language or descriptors.guess_language(args.file)
    lang = registry.get(language)
    try:
        data = pathlib.Path(args.file).read_bytes()
    except OSError as e:
        print("cddlm: cannot read %s: %s" % (args.file, e.strerror), file=sys.stderr)
        return 1
    options = _option_pairs(args.option)
    portal = _portal(args)
    app = portal.create(name=args.name, options={k: v for k, v in options.items()
                                                 if k != opts.VALIDATE_ONLY})
    print("created %s%s" % (app.id, " (%s)" % args.name if args.name else ""))
    kwargs = {"body": xmlsafe.parse(data)} if lang.body == "xml" else {"text": data.decode("utf-8")}
    try:
        app.initialize(language=language, properties=_properties(args.property), options=options, **kwargs)
    except CddlmError:
        app.terminate("initialize failed")
        app.destroy()
        raise
    if options.get(opts.VALIDATE_ONLY):
        app.terminate("validation only")
        app.wait_for("terminated", timeout=30)
        app.destroy()
        print("%s is valid" % args.file)
        return 0
    if not args.no_run:
        app.run()
    target = "initialized" if args.no_run else "running"
    progress = Progress(args.name or app.id)
    try:
        state = app.wait_for(target, timeout=args.timeout, progress=progress)
    finally:
        progress.done()
    # a process that dies right after it started was running for a moment: watch a little
    # longer before calling the deployment a success (readiness checks are the precise tool)
    deadline = time.monotonic() + max(0.0, args.settle)
    while state == target and time.monotonic() < deadline:
        time.sleep(0.1)
        state = app.state()
    if state != target:
        _report_failure(app.ping())
        return 1
    print("%s is %s" % (args.name or app.id, state))
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    portal = _portal(args)
    rows = []
    for app in portal.applications():
        props = {etree_local(el): (el.text or "").strip() for el in app.property_many(
            "name", "state", "created")}
        rows.append((props.get("name", ""), app.id, props.get("state", ""), props.get("created", "")))
    if not rows:
        print("no applications")
        return 0
    widths = [max(len(r[i]) for r in rows + [("NAME", "ID", "STATE", "CREATED")]) for i in range(4)]
    for r in [("NAME", "ID", "STATE", "CREATED")] + rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0


def etree_local(el) -> str:
    from lxml import etree
    return etree.QName(el).localname


def cmd_status(args: argparse.Namespace) -> int:
    app = _portal(args).lookup(args.app)
    status = app.ping()
    props = {etree_local(el): (el.text or "").strip() for el in app.property_many(
        "name", "id", "created", "started", "terminated")}
    for key in ("name", "id"):
        if props.get(key):
            print("%-11s %s" % (key + ":", props[key]))
    print("%-11s %s" % ("state:", status["state"]))
    if status.get("stateInfo"):
        print("%-11s %s" % ("info:", status["stateInfo"]))
    for key in ("created", "started", "terminated"):
        if props.get(key):
            print("%-11s %s" % (key + ":", props[key]))
    info = status.get("terminationInfo")
    if info:
        print("termination: %s%s" % ("normal" if info.get("normal") else "abnormal",
                                     ": " + info["reason"] if info.get("reason") else ""))
        for key in ("component", "exitCode", "signal"):
            if info.get(key) is not None:
                print("  %-9s %s" % (key + ":", info[key]))
        if info.get("stderr"):
            print("  stderr:\n    " + "\n    ".join(str(info["stderr"]).splitlines()))
    if status["health"]:
        print("components:")
        for h in status["health"]:
            print("  %-30s %-9s %-10s %s%s" % (h["path"], h.get("type") or "", h["state"],
                                             "host=%s " % h["host"] if h.get("host") else "",
                                             "pid=%s" % h["pid"] if h.get("pid") else ""))
    print("history:")
    for state, when in app.history():
        print("  %-13s %s" % (state, when))
    return 0


def cmd_terminate(args: argparse.Namespace) -> int:
    app = _portal(args).lookup(args.app)
    app.terminate(args.reason)
    if args.no_wait:
        return 0
    progress = Progress(args.app)
    try:
        state = app.wait_for("terminated", timeout=args.timeout, progress=progress)
    finally:
        progress.done()
    print("%s is %s" % (args.app, state))
    return 0 if state == "terminated" else 1


def cmd_destroy(args: argparse.Namespace) -> int:
    app = _portal(args).lookup(args.app)
    if args.force and app.state() != "terminated":
        app.terminate("destroy --force")
        app.wait_for("terminated", timeout=args.timeout)
    app.destroy()
    print("%s destroyed" % args.app)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    import signal
    from cddlm.client import Listener
    from cddlm.follow import Follower

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # Ctrl-C and SIGTERM end the watch (and its subscriptions), even when started in background
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(_usage("--listen expects HOST:PORT, got %r" % args.listen))
    portal = _portal(args)
    with Listener(host.strip("[]"), int(port), base_url=args.callback) as listener:
        follower = Follower(portal, listener, sys.stdout)
        try:
            if args.app:
                app = portal.lookup(args.app)
                follower.follow(app)
                print("watching %s until it terminates (Ctrl-C stops)" % args.app, file=sys.stderr,
                      flush=True)
                follower.run(until_terminated=app.id)
            else:
                follower.follow_portal()
                print("watching every application on %s (Ctrl-C stops)" % portal.url, file=sys.stderr,
                      flush=True)
                follower.run()
        except KeyboardInterrupt:
            pass
        finally:
            follower.close()
    return 0


def cmd_host(args: argparse.Namespace) -> int:
    portal = _portal(args)
    if args.host_command == "ls":
        for h in portal.hosts():
            free = ", ".join("%s %g" % kv for kv in sorted(h["free"].items()))
            print("%-20s %-6s %-8s %s" % (h["name"], h["agent"], "DOWN" if h["down"] else "up", free))
        return 0
    portal.set_host_state(args.name, args.host_command == "down", getattr(args, "reason", None))
    print("host %s is %s" % (args.name, args.host_command))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from cddlm import ns as namespaces
    app = _portal(args).lookup(args.app)
    found = app.property("placementAudit", namespace=namespaces.EXT)
    if not found:
        print("%s has no placement audit (no datacenter, or not initialized)" % args.app)
        return 0
    audit = found[0]
    print("placement %s by %s, objective %s" % (audit.get("status"), audit.get("solver"),
                                              audit.get("objective")))
    for p in audit:
        head = "policy %s %s%s%s: %s" % (p.get("index"), "" if p.get("hard") == "true" else "soft ",
                                       p.get("type"), " at %s" % (p.get("level") or p.get("scope"))
                                       if p.get("level") or p.get("scope") else "",
                                       "met" if p.get("met") == "true" else
                                       "VIOLATED (%s)" % p.get("violations"))
        print(head)
        for member in p.iterfind("{%s}member" % namespaces.EXT):
            print("    %-30s %s" % (member.get("component"), member.text or ""))
    return 0


# -- lang -----------------------------------------------------------------------------------
def cmd_lang_resolve(args: argparse.Namespace) -> int:
    from cddlm.application import descriptors
    # printing the resolved document needs no components; the native tree is what deploys
    result = descriptors.resolve_file(args.file, language=args.language,
                                      properties=_properties(args.property),
                                      import_path=tuple(args.import_path or ()),
                                      require_components=args.format == "native")
    if args.format == "native":
        print(json.dumps(result.deployment.to_json(), indent=2))
    else:
        print(result.display.rstrip("\n"))
    return 0


# -- placement ------------------------------------------------------------------------------
def cmd_placement_solve(args: argparse.Namespace) -> int:
    from cddlm.application import descriptors
    from cddlm.placement import api
    datacenter = descriptors.load_data_file(args.datacenter)
    request = descriptors.load_data_file(args.request)
    result = api.solve_json(datacenter, request, time_limit=args.time_limit, seed=args.seed)
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cddlm", description="CDDLM deployment portal and client")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    portal = sub.add_parser("portal", help="run a portal").add_subparsers(dest="portal_command",
                                                                          required=True)
    sv = portal.add_parser("serve", help="run a portal until interrupted")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    sv.add_argument("--db", metavar="URL",
                    help="database URL (default: SQLite under the state dir; postgresql://... to share)")
    sv.add_argument("--state-dir", default="./cddlm-state", metavar="DIR",
                    help="where the portal keeps its database, logs and component directories")
    sv.add_argument("--datacenter", metavar="FILE", help="datacenter file (YAML/JSON) of hosts")
    sv.add_argument("--public-url", metavar="URL", help="base URL to put in EPRs (behind a proxy)")
    sv.add_argument("--import-path", action="append", metavar="DIR",
                    help="folder searched for classpath:/ descriptor imports (repeatable)")
    sv.add_argument("--consumer-network", action="append", metavar="CIDR",
                    help="a network notification consumers may be in (repeatable; default: "
                         "loopback and the private ranges)")
    sv.add_argument("--hosts-dir", metavar="DIR",
                    help="directory of the local hosts (default STATE/hosts; portals that share a "
                         "database must share it)")
    sv.add_argument("--workers", type=int, default=4, help="enactment worker threads (default 4)")
    sv.add_argument("--lease-seconds", type=float, default=30.0,
                    help="a claimed work item passes to another worker after this (default 30)")
    sv.add_argument("--heartbeat", type=float, default=5.0,
                    help="seconds between heartbeats; a portal silent for 3 is dead (default 5)")
    sv.add_argument("--liveness-interval", type=float, default=2.0,
                    help="seconds between liveness checks of running components (default 2)")
    sv.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    sv.set_defaults(func=cmd_portal_serve)

    def client_parser(name: str, help: str, app: bool = True) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help)
        c.add_argument("--portal", metavar="URL",
                       help="portal endpoint (default $CDDLM_PORTAL, then %s)" % DEFAULT_PORTAL)
        if app:
            c.add_argument("app", metavar="APP", help="application name or id")
        return c

    d = client_parser("deploy", "create, initialize and run an application from a descriptor", False)
    d.add_argument("file", metavar="FILE")
    d.add_argument("--language", metavar="URI", help="descriptor language (default: by extension)")
    d.add_argument("--name", metavar="N", help="application name (unique)")
    d.add_argument("-p", "--property", action="append", metavar="KEY=VALUE",
                   help="deploy-time property (repeatable)")
    d.add_argument("--option", action="append", metavar="URI=VALUE", help="option (repeatable)")
    d.add_argument("--no-run", action="store_true", help="initialize only; do not run")
    d.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds to wait for the state (default 120)")
    d.add_argument("--settle", type=float, default=1.0, metavar="S",
                   help="once there, seconds to watch for an early failure (default 1)")
    d.set_defaults(func=cmd_deploy)

    client_parser("ls", "list applications", False).set_defaults(func=cmd_ls)
    client_parser("status", "show an application's state, components and history").set_defaults(
        func=cmd_status)
    t = client_parser("terminate", "terminate an application")
    t.add_argument("--reason", help="recorded in terminationInfo")
    t.add_argument("--no-wait", action="store_true", help="return at once")
    t.add_argument("--timeout", type=float, default=60.0, metavar="S")
    t.set_defaults(func=cmd_terminate)
    x = client_parser("destroy", "remove every record of a terminated application")
    x.add_argument("--force", action="store_true", help="terminate it first if needed")
    x.add_argument("--timeout", type=float, default=60.0, metavar="S")
    x.set_defaults(func=cmd_destroy)

    w = client_parser("watch", "print lifecycle events as they arrive (Ctrl-C stops)", False)
    w.add_argument("app", metavar="APP", nargs="?",
                   help="one application (until it terminates); default: every application")
    w.add_argument("--listen", metavar="HOST:PORT", default="127.0.0.1:0",
                   help="where to receive notifications (default 127.0.0.1, a free port)")
    w.add_argument("--callback", metavar="URL",
                   help="the URL the portal should post to, when it is not http://HOST:PORT")
    w.set_defaults(func=cmd_watch)
    h = sub.add_parser("host", help="hosts of a portal").add_subparsers(dest="host_command",
                                                                     required=True)
    for name, text in (("ls", "list hosts: agent, up or down, free capacity"),
                       ("down", "mark a host down: its components fail, placement avoids it"),
                       ("up", "mark a host up again")):
        hp = h.add_parser(name, help=text)
        hp.add_argument("--portal", metavar="URL",
                        help="portal endpoint (default $CDDLM_PORTAL, then %s)" % DEFAULT_PORTAL)
        if name != "ls":
            hp.add_argument("name", metavar="HOST")
        if name == "down":
            hp.add_argument("--reason", help="recorded with the host and in failures")
        hp.set_defaults(func=cmd_host)
    client_parser("audit", "show where an application's components went and which policies "
                           "hold").set_defaults(func=cmd_audit)

    lang = sub.add_parser("lang", help="descriptor languages").add_subparsers(dest="lang_command",
                                                                               required=True)
    r = lang.add_parser("resolve", help="parse and resolve a descriptor without deploying")
    r.add_argument("file")
    r.add_argument("--language", help="language URI (default: guessed from the file)")
    r.add_argument("-p", "--property", action="append", metavar="KEY=VALUE",
                   help="deploy-time property (repeatable)")
    r.add_argument("--import-path", action="append", metavar="DIR",
                   help="folder searched for classpath:/ imports (repeatable)")
    r.add_argument("--format", choices=("language", "native"), default="language",
                   help="print the resolved document (default) or the native component tree")
    r.set_defaults(func=cmd_lang_resolve)

    placement = sub.add_parser("placement", help="placement solver").add_subparsers(
        dest="placement_command", required=True)
    s = placement.add_parser("solve", help="solve one placement problem, print JSON")
    s.add_argument("--datacenter", required=True, metavar="DC")
    s.add_argument("--request", required=True, metavar="REQ")
    s.add_argument("--time-limit", type=float, default=10.0, metavar="S")
    s.add_argument("--seed", type=int, default=0, help="solver random seed (default 0)")
    s.set_defaults(func=cmd_placement_solve)
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


if __name__ == "__main__":
    sys.exit(main())
