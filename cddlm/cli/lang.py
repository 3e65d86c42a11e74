"""``cddlm lang``: descriptor languages."""

from __future__ import annotations

import argparse
import json

from cddlm.cli import common


def cmd_lang_resolve(args: argparse.Namespace) -> int:
    from cddlm.application import descriptors
    # printing the resolved document needs no components; the native tree is what deploys
    result = descriptors.resolve_file(args.file, language=args.language,
                                      properties=common.properties(args.property),
                                      import_path=tuple(args.import_path or ()),
                                      require_components=args.format == "native")
    if args.format == "native":
        print(json.dumps(result.deployment.to_json(), indent=2))
    else:
        print(result.display.rstrip("\n"))
    return 0


def register(sub) -> None:
    lang = sub.add_parser("lang", help="descriptor languages").add_subparsers(
        dest="lang_command", required=True, metavar="COMMAND")
    r = lang.add_parser("resolve", help="parse and resolve a descriptor without deploying")
    r.add_argument("file", metavar="FILE", help="the descriptor: native XML (.xml), CDL (.cdl) "
                   "or a HOT template (.yaml, .yml, .json)")
    r.add_argument("--language", metavar="URI", help="language URI (default: by extension)")
    r.add_argument("-p", "--property", action="append", metavar="KEY=VALUE",
                   help="deploy-time property (repeatable)")
    r.add_argument("--import-path", action="append", metavar="DIR",
                   help="folder searched for classpath:/ imports (repeatable)")
    r.add_argument("--format", choices=("language", "native"), default="language",
                   help="print the resolved document (default) or the native component tree")
    r.set_defaults(func=cmd_lang_resolve)

