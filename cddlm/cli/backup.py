"""``cddlm portal backup`` and ``cddlm portal restore``: a copy of an SQLite store taken while
its portal runs, and that copy put back in place of a stopped portal's store."""

from __future__ import annotations

import argparse
import os
import sys

from cddlm.cli.common import CliError


def _store_file(args: argparse.Namespace) -> str:
    from cddlm.application.backup import PG_HINT
    from cddlm.application.store import sqlite_file
    from cddlm.config import Settings
    from cddlm.errors import BadArgument
    url = Settings(state_dir=args.state_dir, db_url=args.db).database_url
    try:
        path = sqlite_file(url)
    except BadArgument as e:
        raise CliError(str(e)) from None
    if path is None:
        raise CliError("cddlm portal %s copies SQLite stores, not PostgreSQL's"
                       % args.portal_command, PG_HINT)
    return path


def cmd_portal_backup(args: argparse.Namespace) -> int:
    from cddlm.application import backup
    from cddlm.errors import BadArgument, StoreUnavailable
    store = _store_file(args)
    try:
        copied = backup.backup(store, args.to, replace=args.force)
    except (BadArgument, StoreUnavailable) as e:
        raise CliError(str(e)) from None
    print("backed up %s to %s: %d application%s, %.1f MiB, schema %s, in %.1f s" % (
        store, copied.path, copied.applications, "" if copied.applications == 1 else "s",
        copied.bytes / 2**20, copied.revision, copied.seconds))
    return 0


def cmd_portal_restore(args: argparse.Namespace) -> int:
    from cddlm.app import StateDir
    from cddlm.application import backup
    from cddlm.errors import BadArgument, StoreUnavailable
    store = _store_file(args)
    try:
        held = StateDir(os.path.dirname(store))     # refuses while a portal runs there
    except StoreUnavailable:
        raise CliError("a portal is running on %s" % os.path.dirname(store),
                       "stop it before restoring its store") from None
    try:
        kept = backup.restore(args.source, store)
    except (BadArgument, StoreUnavailable, OSError) as e:
        raise CliError(str(e)) from None
    finally:
        held.release()
    print("restored %s from %s%s; start the portal on it (cddlm portal serve --state-dir %s)" % (
        store, args.source, " (the store it replaced: %s)" % kept if kept else "",
        os.path.dirname(store)), file=sys.stdout)
    return 0


def register(portal) -> None:
    """The sub-commands of ``cddlm portal`` (``portal``: its sub-parsers)."""
    bk = portal.add_parser("backup", help="copy the portal's SQLite store to a file, while it "
                           "runs (PostgreSQL: pg_dump)")
    bk.add_argument("--to", required=True, metavar="FILE", help="the copy (mode 0600)")
    bk.add_argument("--force", action="store_true", help="replace FILE if it exists")
    rs = portal.add_parser("restore", help="put a backup in place of a stopped portal's store "
                           "(the store it replaces is kept beside it)")
    rs.add_argument("--from", dest="source", required=True, metavar="FILE",
                    help="a file of cddlm portal backup")
    for p in (bk, rs):
        p.add_argument("--state-dir", default="./cddlm-state", metavar="DIR",
                       help="the portal's state directory (default ./cddlm-state)")
        p.add_argument("--db", metavar="URL", help="the store's URL, when not STATE/portal.db")
    bk.set_defaults(func=cmd_portal_backup)
    rs.set_defaults(func=cmd_portal_restore)
