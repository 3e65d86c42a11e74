"""``cddlm deploy`` and ``cddlm run``: bring an application up and wait until it runs.

Deploy is all or nothing. Everything that can be checked without the portal is checked first
(arguments, options, the descriptor, resolved as ``cddlm lang resolve`` does, with the same
``file:line``), so a mistake creates nothing. Once the application exists, a fault from
``initialize`` removes it again (nothing ran). A failure, a timeout or Ctrl-C after that
says what is still running and how to stop it, or, with ``--cleanup-on-failure``, terminates
and destroys the application so that nothing is left.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
import uuid

from cddlm.cli import common, output
from cddlm.cli.common import CliError

NAME_ATTEMPTS = 100
CLEANUP_TIMEOUT = 60.0


# -- waiting ----------------------------------------------------------------------------------
def wait(app, label: str, target: str, timeout: float, settle: float = 0.0) -> dict:
    """Poll until ``app`` is ``target`` (or failed, or terminated), showing progress; then
    watch ``settle`` seconds more for an early failure. Returns the last status; raises
    ``CliError`` (exit 4) on timeout."""
    progress = output.Progress(label)
    deadline = time.monotonic() + timeout
    final = {target, "terminated"} | ({"failed"} if target != "terminated" else set())
    try:
        while True:
            status = app.ping()
            progress(status)
            if status["state"] in final:
                break
            if time.monotonic() > deadline:
                progress.done()
                raise CliError("%s is still %s after %gs%s" % (label, status["state"], timeout,
                                                               _waiting_for(status)),
                               code=common.TIMEOUT)
            time.sleep(0.2)
        end = time.monotonic() + max(0.0, settle)
        # a process that dies right after it started was running for a moment: watch a little
        # longer before calling it a success (readiness checks are the precise tool)
        while status["state"] == target and time.monotonic() < end:
            time.sleep(0.1)
            status = app.ping()
            progress(status)
    finally:
        progress.done()
    return status


def _waiting_for(status: dict) -> str:
    waiter = next((h for h in status.get("health") or [] if h.get("waitingFor")), None)
    return ", waiting for %s: %s" % (waiter["path"], output.waiting(waiter)) if waiter else ""


def still_running(status: dict | None) -> list[str]:
    """Components of a status that have a live process or are on their way: ``web (pid 12)``."""
    out = []
    for h in (status or {}).get("health") or []:
        if h.get("type") in output.CONTAINERS:
            continue
        if h["state"] in ("running", "starting", "deployed", "pending", "stopping"):
            out.append("%s (%s)" % (h["path"], "pid %d" % h["pid"] if h.get("pid") else h["state"]))
    return out


def report_failure(status: dict) -> None:
    info = status.get("terminationInfo") or {}
    print("cddlm: application failed: %s" % (info.get("reason") or status.get("stateInfo") or "failed"),
          file=sys.stderr)
    if info.get("stderr"):
        print("last lines of %s's stderr:\n%s" % (info.get("component"), info["stderr"]), file=sys.stderr)


def cleanup(app, label: str) -> None:
    """Terminate, wait, destroy: leave nothing behind."""
    from cddlm.client import PortalFault
    app.terminate("cleanup after a failed deploy")
    state = app.wait_for("terminated", timeout=CLEANUP_TIMEOUT)
    if state != "terminated":
        raise CliError("%s did not terminate within %gs" % (label, CLEANUP_TIMEOUT),
                       "`cddlm destroy %s --force` tries again" % label)
    try:
        app.destroy()
    except PortalFault as e:
        if e.fault != "NoSuchApplicationFault" and e.fault != "ResourceUnknownFault":
            raise


def after_trouble(app, label: str, status: dict | None, what: str, code: int,
                  clean: bool) -> CliError:
    """The error to end with after a failure, timeout or interrupt: with ``clean`` the
    application is removed first; otherwise the message says what still runs and how to stop it."""
    if clean:
        print("cddlm: %s; cleaning up: terminating and destroying %s" % (what, label), file=sys.stderr)
        cleanup(app, label)
        return CliError("%s; %s was removed" % (what, label), code=code)
    running = still_running(status)
    goes_on = "still running: %s" % ", ".join(running) if running else \
        "%s holds its name until it is terminated" % label
    return CliError("%s; %s" % (what, goes_on),
                    "`cddlm terminate %s` stops it, `cddlm status %s` shows it, and "
                    "--cleanup-on-failure removes it next time" % (label, label), code)


def bring_up(app, label: str, target: str, args: argparse.Namespace) -> int:
    """Wait for ``target`` after run (or initialize), and deal with what went wrong."""
    status: dict | None = None
    try:
        status = wait(app, label, target, args.timeout, args.settle if target == "running" else 0)
    except CliError as e:       # a timeout: the application goes on
        raise after_trouble(app, label, _status(app), e.message, e.code, args.cleanup_on_failure)
    except KeyboardInterrupt:
        raise after_trouble(app, label, _status(app), "interrupted", common.INTERRUPTED,
                            args.cleanup_on_failure)
    if status["state"] != target:
        report_failure(status)
        raise after_trouble(app, label, status, "%s is %s" % (label, status["state"]),
                            common.FAILED, args.cleanup_on_failure)
    print("%s is %s" % (label, status["state"]))
    return 0


def _status(app) -> dict | None:
    try:
        return app.ping()
    except Exception:       # noqa: BLE001 - only to say what still runs; the cause is reported
        return None


# -- deploy -----------------------------------------------------------------------------------
def cmd_deploy(args: argparse.Namespace) -> int:
    from cddlm.application import descriptors, options as opts
    from cddlm.errors import DescriptorError, ResolutionError
    from cddlm.lang import registry
    # 1. everything that needs no portal, so that a mistake creates nothing
    props = common.properties(args.property)
    options = common.option_pairs(args.option)
    language = args.language or descriptors.guess_language(args.file)
    registry.get(language)      # an unknown language is a mistake found here
    try:
        data = pathlib.Path(args.file).read_bytes()
    except OSError as e:
        raise CliError("cannot read %s: %s" % (args.file, e.strerror or e)) from None
    try:
        descriptors.resolve_file(args.file, language=language, properties=props,
                                 import_path=tuple(args.import_path or ()))
    except (DescriptorError, ResolutionError) as e:
        if e.kind != "import":      # an import the portal's own import path may hold
            raise
    text = _text(data)
    name = args.name
    # 2. the portal
    portal = common.portal(args)
    app, name = create(portal, args.file, name, {k: v for k, v in options.items()
                                                  if k != opts.VALIDATE_ONLY})
    label = common.label(app, name)
    print("created %s (%s)" % (label, app.id) if name else "created %s" % app.id)
    try:
        if text is not None:
            app.initialize(language=language, text=text, properties=props, options=options)
        else:
            from cddlm import xmlsafe
            app.initialize(language=language, body=xmlsafe.parse(data), properties=props,
                           options=options)
    except BaseException as e:
        cleanup(app, label)     # nothing was deployed: leave nothing behind
        e.add_note("%s was removed" % label)       # the error's line says so (cddlm.cli.main)
        raise
    if options.get(opts.VALIDATE_ONLY):
        cleanup(app, label)
        print("%s is valid" % args.file)
        return 0
    try:
        if not args.no_run:
            app.run()
    except KeyboardInterrupt:
        raise after_trouble(app, label, _status(app), "interrupted", common.INTERRUPTED,
                            args.cleanup_on_failure)
    return bring_up(app, label, "initialized" if args.no_run else "running", args)


def _text(data: bytes) -> str | None:
    """The descriptor as text, so the portal's line numbers are the file's (None: not UTF-8)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def create(portal, file: str, name: str | None, options: dict):
    """Create the application; without ``name``, named after the file (``hello``, then
    ``hello-2`` ... while those are taken). A client token makes an interrupted create safe
    to repeat: the repeat finds the application, which is then removed (nothing ran)."""
    from cddlm.application import options as opts
    from cddlm.client import PortalFault
    stem = _stem(file)
    candidates = [name] if name else [stem] + ["%s-%d" % (stem, i) for i in range(2, NAME_ATTEMPTS + 1)]
    for candidate in candidates:
        sent = dict(options)
        sent.setdefault(opts.CLIENT_TOKEN, "cddlm-cli:" + uuid.uuid4().hex)
        try:
            try:
                return portal.create(name=candidate, options=sent), candidate
            except KeyboardInterrupt:
                cleanup(portal.create(name=candidate, options=sent), candidate)
                raise
        except PortalFault as e:
            if not (e.fault == "BadArgumentFault" and "already exists" in e.message):
                raise
            if name:
                raise CliError("a live application is already named %r" % name,
                               "choose another --name, or terminate that one") from None
    raise CliError("the names %s to %s are all taken" % (candidates[0], candidates[-1]),
                   "choose one with --name")


def _stem(file: str) -> str:
    import re
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "-", pathlib.Path(file).stem).strip("-.") or "app"
    return stem[:100]


# -- run --------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    app = common.application(args)
    label = _name(app) or app.id
    app.run()
    return bring_up(app, label, "running", args)


def _name(app) -> str | None:
    found = app.property("name")
    return (found[0].text or "").strip() if found else None


def register(sub) -> None:
    d = sub.add_parser("deploy", help="create, initialize and run an application from a descriptor",
                       description=common.prose(__doc__.split("\n\n")[1]))
    common.add_portal_option(d)
    d.add_argument("file", metavar="FILE", help="the descriptor: native XML (.xml), CDL (.cdl) "
                   "or a HOT template (.yaml, .yml, .json)")
    d.add_argument("--language", metavar="URI", help="descriptor language (default: by extension)")
    d.add_argument("--name", metavar="N", help="application name, unique among live applications "
                   "(default: the file's name without extension, made unique: hello, hello-2 ...)")
    d.add_argument("-p", "--property", action="append", metavar="KEY=VALUE",
                   help="deploy-time property (repeatable)")
    d.add_argument("--option", action="append", metavar="URI=VALUE",
                   help="an option, named by its URI, e.g. urn:cddlm:option:validate-only=true "
                        "(repeatable)")
    d.add_argument("--import-path", action="append", metavar="DIR",
                   help="folder searched for classpath:/ imports when checking the descriptor "
                        "(repeatable; the portal uses its own)")
    d.add_argument("--no-run", action="store_true", help="initialize only; `cddlm run APP` runs it")
    _wait_options(d, "running (initialized with --no-run)")
    d.set_defaults(func=cmd_deploy)

    r = sub.add_parser("run", help="run an initialized application and wait until it runs")
    common.add_portal_option(r)
    common.add_app_argument(r)
    _wait_options(r, "running")
    r.set_defaults(func=cmd_run)


def _wait_options(p: argparse.ArgumentParser, state: str) -> None:
    p.add_argument("--timeout", type=float, default=120.0, metavar="S",
                   help="seconds to wait for %s (default 120); then exit 4, the application "
                        "going on" % state)
    p.add_argument("--settle", type=float, default=1.0, metavar="S",
                   help="once running, seconds to watch for an early failure (default 1)")
    p.add_argument("--cleanup-on-failure", action="store_true",
                   help="after a failure, a timeout or Ctrl-C, terminate and destroy the "
                        "application (default: leave it, and say how to stop it)")
