"""The ``cddlm`` command: one entry point, one sub-command per user task (CONTRACT section 9).
One module per command group registers its sub-commands; ``main`` is the one error boundary:
every failure becomes one line on stderr (with a hint where there is one) and a documented
exit code, ``--debug`` adds the traceback, and a closed pipe ends the command quietly.

Exit codes: 0 success; 1 a fault, a failure or invalid input; 2 a usage error; 3 no portal
answers; 4 a wait timed out (the application goes on); 130 interrupted (Ctrl-C); 141 the
output pipe was closed (``cddlm ls | head``).
"""

from __future__ import annotations

import argparse
import os
import sys

from cddlm import __version__
from cddlm.cli import apps, completion, deploy, hosts, lang, logs, placement, portal, users
from cddlm.cli.common import (BROKEN_PIPE, DEFAULT_PORTAL, FAILED, INTERRUPTED, UNREACHABLE,
                              CliError, add_portal_option, login_error)
from cddlm.errors import CddlmError

GROUPS = (portal, deploy, apps, logs, hosts, lang, placement, users, completion)

# a hint for the faults a user meets most, after the fault's own message
FAULT_HINTS = {
    "NoSuchApplicationFault": "`cddlm ls` lists the applications",
    "WrongStateFault": "`cddlm status APP` shows its state",
    "PlacementFault": "`cddlm host ls` shows the hosts and their free capacity",
    "DescriptorFault": "`cddlm lang resolve FILE` checks a descriptor without a portal",
    "ResolutionFault": "`cddlm lang resolve FILE` checks a descriptor without a portal",
    "UnsupportedLanguageFault": "`--language URI`: docs/languages.md lists the languages",
}
# where a command's own fault means something else than the hint above says
COMMAND_HINTS = {
    ("resolve", "ResolutionFault"): "`cddlm resolve APP COMPONENT` prints what a component has",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cddlm", description="CDDLM deployment portal and client. "
                                "Every command has --help.")
    p.add_argument("--version", action="version", version="cddlm " + __version__)
    add_portal_option(p)
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    sub.choices["completion"].set_defaults(root_parser=p)   # it describes the whole command
    _everywhere(p, lambda c: c.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                                            help="show the traceback of an error"))
    return p


def _everywhere(parser: argparse.ArgumentParser, add) -> None:
    """Call ``add`` on every sub-command's parser (below ``parser``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                add(child)
                _everywhere(child, add)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return _broken_pipe()
    except KeyboardInterrupt as e:
        _flush_quietly()
        print("cddlm: %s" % _noted("interrupted", e), file=sys.stderr)
        return INTERRUPTED
    except SystemExit:
        raise
    except BaseException as e:      # noqa: BLE001 - the one boundary
        _flush_quietly()
        if getattr(args, "debug", False):
            import traceback
            traceback.print_exc()
        message, hint, code = explain(e, args)
        print("cddlm: %s%s" % (_noted(message, e), " (%s)" % hint if hint else ""), file=sys.stderr)
        return code


def _noted(message: str, e: BaseException) -> str:
    """The line, with what was done about the error after it happened (its notes: ``deploy``
    says it removed the application again)."""
    return "; ".join([message] + list(getattr(e, "__notes__", ())))


def explain(e: BaseException, args: argparse.Namespace) -> tuple[str, str | None, int]:
    """(the line to print, its hint, the exit code) for an error that reached ``main``."""
    from cddlm.client import PortalFault, Unreachable
    if isinstance(e, CliError):
        return e.message, e.hint, e.code
    if isinstance(e, Unreachable):
        url = getattr(args, "portal_url", None) or DEFAULT_PORTAL
        if not e.sent:
            return "no portal answers at %s" % url, ("is `cddlm portal serve` running? Another portal: "
                                                     "--portal URL or $CDDLM_PORTAL"), UNREACHABLE
        from cddlm.transport import reason
        why = reason(e.__cause__) if e.__cause__ is not None else e.message
        return "the portal at %s did not answer as a portal: %s" % (url, why), \
            "is it running, and is the scheme right: http or https?", UNREACHABLE
    if isinstance(e, PortalFault) and e.fault == "FailedAuthentication":
        said = login_error(str(e), getattr(args, "portal_url", None) or DEFAULT_PORTAL,
                           getattr(args, "credentials", None))
        if said:
            return said[0], said[1], FAILED
    if isinstance(e, PortalFault):
        hint = COMMAND_HINTS.get((getattr(args, "command", None), e.fault)) or FAULT_HINTS.get(e.fault)
        return str(e), hint, FAILED
    if isinstance(e, CddlmError):
        return "%s: %s" % (type(e).__name__, e), None, FAILED
    if isinstance(e, OSError) and e.filename:
        return "%s: %s" % (e.filename, e.strerror), None, FAILED
    return "internal error: %s: %s" % (type(e).__name__, e), \
        "run with --debug for the traceback, and please report it", FAILED


def _broken_pipe() -> int:
    """Whoever read the output has gone (``| head``): say nothing more. stdout is pointed at
    /dev/null so that the interpreter's own flush at exit does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return BROKEN_PIPE


def _flush_quietly() -> None:
    try:
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass


__all__ = ["DEFAULT_PORTAL", "build_parser", "main"]
