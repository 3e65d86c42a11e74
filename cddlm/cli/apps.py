"""Application commands: deploy, ls, status, terminate, destroy, watch, audit."""

from __future__ import annotations

import argparse
import sys
import time

from cddlm.cli import common
from cddlm.errors import CddlmError


def report_failure(status: dict) -> None:
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
    options = common.option_pairs(args.option)
    portal = common.portal(args)
    app = portal.create(name=args.name, options={k: v for k, v in options.items()
                                                 if k != opts.VALIDATE_ONLY})
    print("created %s%s" % (app.id, " (%s)" % args.name if args.name else ""))
    kwargs = {"body": xmlsafe.parse(data)} if lang.body == "xml" else {"text": data.decode("utf-8")}
    try:
        app.initialize(language=language, properties=common.properties(args.property), options=options, **kwargs)
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
    progress = common.Progress(args.name or app.id)
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
        report_failure(app.ping())
        return 1
    print("%s is %s" % (args.name or app.id, state))
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    portal = common.portal(args)
    rows = []
    for app in portal.applications():
        props = {common.local(el): (el.text or "").strip() for el in app.property_many(
            "name", "state", "created")}
        rows.append((props.get("name", ""), app.id, props.get("state", ""), props.get("created", "")))
    if not rows:
        print("no applications")
        return 0
    widths = [max(len(r[i]) for r in rows + [("NAME", "ID", "STATE", "CREATED")]) for i in range(4)]
    for r in [("NAME", "ID", "STATE", "CREATED")] + rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    app = common.portal(args).lookup(args.app)
    status = app.ping()
    props = {common.local(el): (el.text or "").strip() for el in app.property_many(
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
    app = common.portal(args).lookup(args.app)
    app.terminate(args.reason)
    if args.no_wait:
        return 0
    progress = common.Progress(args.app)
    try:
        state = app.wait_for("terminated", timeout=args.timeout, progress=progress)
    finally:
        progress.done()
    print("%s is %s" % (args.app, state))
    return 0 if state == "terminated" else 1


def cmd_destroy(args: argparse.Namespace) -> int:
    app = common.portal(args).lookup(args.app)
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
        raise SystemExit(common.usage("--listen expects HOST:PORT, got %r" % args.listen))
    portal = common.portal(args)
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


def cmd_audit(args: argparse.Namespace) -> int:
    from cddlm import ns as namespaces
    app = common.portal(args).lookup(args.app)
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


def register(sub) -> None:
    def client_parser(name: str, help: str, app: bool = True) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help)
        common.add_portal_option(c)
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
    client_parser("audit", "show where an application's components went and which policies "
                           "hold").set_defaults(func=cmd_audit)

