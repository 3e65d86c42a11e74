"""Application commands: ls, status, events, resolve, terminate, destroy, watch, audit."""

from __future__ import annotations

import argparse
import json
import sys

from cddlm import ns
from cddlm.cli import common, output
from cddlm.cli.common import CliError
from cddlm.config import Limits

A, EXT = "{%s}" % ns.API, "{%s}" % ns.EXT


def _text(props: dict, key: str) -> str | None:
    el = props.get(key)
    return (el.text or "").strip() or None if el is not None else None


# -- ls ---------------------------------------------------------------------------------------
def applications(portal) -> list[dict]:
    """Every application: ``name``, ``id``, ``state``, ``created``, oldest first. The one
    place ``ls`` gets its data from: ``ext:listApplications``, 10,000 a page."""
    return [{"name": r["name"], "id": r["id"], "state": r["state"], "created": r["created"]}
            for r in portal.each_application(LS_PAGE)]


LS_PAGE = Limits.max_list_page    # the most a portal sends in one page


def cmd_ls(args: argparse.Namespace) -> int:
    rows = applications(common.portal(args))
    if args.json:
        output.emit_json(rows)
    elif args.quiet:
        for r in rows:
            print(r["name"] or r["id"])
    elif not rows:
        print("no applications")
    else:
        output.table(("NAME", "ID", "STATE", "CREATED"),
                     [(r["name"] or "-", r["id"], r["state"], r["created"]) for r in rows])
    return 0


# -- status -----------------------------------------------------------------------------------
NOTE_WIDTH = 72     # a component's note and a transition's info in the tables (--json: in full)


def describe(app) -> dict:
    """Everything ``status`` shows, read in one request."""
    from cddlm.client import components_entry, history_entries, termination_info
    props = {el.tag: el for el in app.property_many(
        "name", "id", "state", "stateInfo", "terminationInfo", "created", "started", "terminated",
        "stateHistory", EXT + "components", EXT + "scheduledTermination")}
    info = termination_info(props.get(A + "terminationInfo"))
    if info and info.get("fault") is not None:
        fault = info["fault"]
        info["fault"] = {"fault": fault.tag.rpartition("}")[2],
                         "description": fault.findtext("{%s}Description" % ns.WSRF_BF)}
    state_info = props.get(A + "stateInfo")
    holder = props.get(EXT + "components")
    return {"name": _text(props, A + "name"), "id": _text(props, A + "id") or app.id,
            "state": _text(props, A + "state"),
            "stateInfo": "".join(state_info.itertext()).strip() if state_info is not None else None,
            "created": _text(props, A + "created"), "started": _text(props, A + "started"),
            "terminated": _text(props, A + "terminated"),
            "scheduledTermination": _text(props, EXT + "scheduledTermination"),
            "terminationInfo": info,
            "components": [components_entry(c) for c in holder] if holder is not None else [],
            "history": history_entries(props[A + "stateHistory"])
            if A + "stateHistory" in props else []}


def cmd_status(args: argparse.Namespace) -> int:
    app = common.application(args)
    d = describe(app)
    if args.json:
        output.emit_json(d)
        return 0
    info = d["terminationInfo"]
    # a failure's reason is said once, in full, on the termination line
    said = (info or {}).get("reason")
    output.fields([("name", d["name"]), ("id", d["id"]), ("state", d["state"]),
                   ("info", d["stateInfo"] if d["stateInfo"] != said else None),
                   ("created", d["created"]), ("started", d["started"]),
                   ("terminated", d["terminated"]), ("terminates at", d["scheduledTermination"])])
    if info:
        print("termination: %s%s" % ("normal" if info.get("normal") else "abnormal",
                                     ": " + info["reason"] if info.get("reason") else ""))
        for key in ("component", "exitCode", "signal"):
            if info.get(key) is not None:
                print("  %-9s %s" % (key + ":", info[key]))
        if info.get("stderr"):
            print("  stderr:\n    " + "\n    ".join(str(info["stderr"]).splitlines()))
    if d["components"]:
        print()
        # components other portals enact (multi-host, delegate): the sub-application running them
        subs = any(c.get("subApplicationId") for c in d["components"])
        output.table(("COMPONENT", "TYPE", "STATE", "HOST", "PID", "PORTS", "NOTE")
                     + (("SUB-APPLICATION",) if subs else ()), [
            (c["path"], c["type"], c["state"], c["host"], c["pid"],
             ",".join(str(p) for p in c["ports"]),
             output.clip(("waiting for " + output.waiting(c)) if c.get("waitingFor") else
                         (_unsaid(c["info"], c.get("subApplicationId"))
                          if c["state"] in ("failed", "stopping", "stopped") or c["restarts"]
                          else None),
                         NOTE_WIDTH))
            + ((c.get("subApplicationId"),) if subs else ())
            for c in d["components"]])
    print()
    _history(d["history"], NOTE_WIDTH)     # (`cddlm events` and --json: in full)
    return 0


def _unsaid(info: str | None, sub: str | None) -> str | None:
    """A component's note without the sub-application its own column names (the reason a
    host gives ends with it: it took the note's width, cut to "(sub-...")."""
    if info and sub:
        info = info.replace(" (sub-application %s)" % sub, "").replace(", sub-application %s:" % sub, ":")
    return info


def _history(history: list[dict], width: int | None = None) -> None:
    output.table(("#", "STATE", "TIME", "INFO"),
                 [(h["sequence"], h["state"], h["time"], output.clip(h["info"], width))
                  for h in history])


# -- events -----------------------------------------------------------------------------------
def cmd_events(args: argparse.Namespace) -> int:
    app = common.application(args)
    history = app.events()
    if args.json:
        output.emit_json(history)
    else:
        _history(history)
    return 0


# -- resolve ----------------------------------------------------------------------------------
def cmd_resolve(args: argparse.Namespace) -> int:
    app = common.application(args)
    value = app.resolve(args.path)
    if args.json or not isinstance(value, str):
        output.emit_json(value)
    else:
        print(value)
    return 0


# -- terminate, destroy -----------------------------------------------------------------------
def cmd_terminate(args: argparse.Namespace) -> int:
    from cddlm.cli.deploy import wait
    app = common.application(args)
    app.terminate(args.reason)
    if args.no_wait:
        print("terminating %s" % args.app)
        return 0
    try:
        status = wait(app, args.app, "terminated", args.timeout)
    except KeyboardInterrupt:
        raise CliError("interrupted; %s goes on terminating" % args.app, "`cddlm status %s` "
                       "follows it" % args.app, common.INTERRUPTED) from None
    print("%s is %s" % (args.app, status["state"]))
    return 0


def cmd_destroy(args: argparse.Namespace) -> int:
    from cddlm.cli.deploy import wait
    from cddlm.client import PortalFault
    app = common.application(args)
    if args.force and app.state() != "terminated":
        app.terminate("destroy --force")
        wait(app, args.app, "terminated", args.timeout)
    try:
        app.destroy()
    except PortalFault as e:
        if e.fault == "WrongStateFault":
            raise CliError("%s is %s: only a terminated application is destroyed" % (
                args.app, app.state()), "`cddlm terminate %s` first, or `cddlm destroy %s --force`"
                % (args.app, args.app)) from None
        raise
    print("%s destroyed" % args.app)
    return 0


# -- watch ------------------------------------------------------------------------------------
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
        raise common.UsageError("--listen expects HOST:PORT, got %r" % args.listen)
    portal = common.portal(args)
    with Listener(host.strip("[]"), int(port), base_url=args.callback) as listener:
        follower = Follower(portal, listener, sys.stdout)
        try:
            if args.app:
                app = common.lookup(portal, args.app)
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


# -- audit ------------------------------------------------------------------------------------
def audit_of(app) -> dict | None:
    found = app.property("placementAudit", namespace=ns.EXT)
    if not found:
        return None
    audit = found[0]
    policies = []
    for p in audit:
        entry: dict = {"index": int(p.get("index")), "type": p.get("type"),
                       "hard": p.get("hard") == "true", "met": p.get("met") == "true"}
        for key in ("violations", "weight", "level", "scope"):
            if p.get(key) is not None:
                entry[key] = json.loads(p.get(key)) if key in ("violations", "weight") else p.get(key)
        entry["members"] = {m.get("component"): m.text or "" for m in p.iterfind(EXT + "member")}
        entry["violated"] = [v.text for v in p.iterfind(EXT + "violated")]
        policies.append(entry)
    objective = audit.get("objective")
    return {"status": audit.get("status"), "solver": audit.get("solver"),
            "objective": float(objective) if objective is not None else None, "policies": policies}


def cmd_audit(args: argparse.Namespace) -> int:
    audit = audit_of(common.application(args))
    if args.json:
        output.emit_json(audit)
        return 0
    if audit is None:
        print("%s has no placement audit (not initialized)" % args.app)
        return 0
    print("placement %s by %s, objective %s" % (audit["status"], audit["solver"],
                                              "%g" % audit["objective"]
                                              if audit["objective"] is not None else "-"))
    for p in audit["policies"]:
        where = p.get("level") or p.get("scope")
        print("policy %d %s%s%s: %s" % (p["index"], "" if p["hard"] else "soft ", p["type"],
                                        " at %s" % where if where else "",
                                        "met" if p["met"] else "VIOLATED (%s)" % p.get("violations")))
        for component, vertex in p["members"].items():
            print("    %-30s %s" % (component, vertex))
    return 0


def register(sub) -> None:
    def client_parser(name: str, help: str, app: bool = True, json_option: bool = False):
        c = sub.add_parser(name, help=help, description=help)
        common.add_portal_option(c)
        if app:
            common.add_app_argument(c)
        if json_option:
            common.add_json_option(c)
        return c

    ls = client_parser("ls", "list the applications: name, id, state, created", False, True)
    ls.add_argument("-q", "--quiet", action="store_true", help="only names (ids of unnamed ones)")
    ls.set_defaults(func=cmd_ls)
    client_parser("status", "show an application's state, times, termination, components (state, "
                  "host, pid, listening ports) and history", json_option=True).set_defaults(
        func=cmd_status)
    client_parser("events", "show the states an application went through (its recorded "
                  "history; `cddlm watch APP` follows it live)", json_option=True).set_defaults(
        func=cmd_events)
    r = client_parser("resolve", "print a value of a deployed application (a component's "
                      "attribute or runtime value, e.g. web/port, or a whole component)",
                      json_option=True)
    r.add_argument("path", metavar="PATH", help="component path, or path/attribute (web/port)")
    r.set_defaults(func=cmd_resolve)
    t = client_parser("terminate", "terminate an application and wait until it is terminated")
    t.add_argument("--reason", help="recorded in terminationInfo")
    t.add_argument("--no-wait", action="store_true", help="return at once")
    t.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait (default 60); then exit 4, the application going on")
    t.set_defaults(func=cmd_terminate)
    x = client_parser("destroy", "remove every record of a terminated application")
    x.add_argument("--force", action="store_true", help="terminate it first if needed")
    x.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="with --force: seconds to wait for terminated (default 60)")
    x.set_defaults(func=cmd_destroy)

    w = client_parser("watch", "print lifecycle events as they arrive (Ctrl-C stops)", False)
    w.add_argument("app", metavar="APP", nargs="?",
                   help="one application (until it terminates); default: every application")
    w.add_argument("--listen", metavar="HOST:PORT", default="127.0.0.1:0",
                   help="where to receive notifications (default 127.0.0.1, a free port)")
    w.add_argument("--callback", metavar="URL",
                   help="the URL the portal should post to, when it is not http://HOST:PORT")
    w.set_defaults(func=cmd_watch)
    client_parser("audit", "show where an application's components went and which placement "
                  "policies hold", json_option=True).set_defaults(func=cmd_audit)
