"""The ``cddlm`` command: one entry point, one sub-command per user task (CONTRACT section 9).

Exit codes: 0 success, 1 a fault or invalid input (message on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

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
    result = api.solve_json(datacenter, request, time_limit=args.time_limit)
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cddlm", description="CDDLM deployment portal and client")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

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
    s.set_defaults(func=cmd_placement_solve)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except CddlmError as e:
        print("cddlm: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
