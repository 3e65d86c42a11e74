"""Backups of an SQLite store, taken while a portal runs on it, and their restore.

``backup`` uses SQLite's online backup API: the copy is one consistent snapshot (a read
transaction; with WAL the portal's writers go on meanwhile), checked (``PRAGMA quick_check``)
before it is given its name, and readable by its owner only (it holds every tenant's
applications and the audit). ``restore`` puts a backup in place of a state directory's store
while no portal holds that directory, keeping the store it replaces beside it.

A PostgreSQL store is backed up with PostgreSQL's own tools (``pg_dump``): see ``PG_HINT``.
"""

from __future__ import annotations

import os
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass

from cddlm.errors import BadArgument, StoreUnavailable

PG_HINT = ("back PostgreSQL up with its own tools: pg_dump --format=custom --file=FILE URL; "
           "restore with pg_restore --clean --if-exists --dbname=URL FILE")


@dataclass(frozen=True)
class Copied:
    path: str
    bytes: int
    applications: int
    revision: str
    seconds: float


def backup(store_file: str, to: str, *, replace: bool = False) -> Copied:
    """Copy the SQLite store ``store_file`` (a portal may be running on it) to ``to``."""
    if not os.path.isfile(store_file):
        raise BadArgument("there is no store at %s (is --state-dir or --db right?)" % store_file)
    to = os.path.abspath(to)
    if os.path.exists(to) and not replace:
        raise BadArgument("%s exists already; give another --to, or --force to replace it" % to)
    started = time.monotonic()
    partial = "%s.partial-%d" % (to, os.getpid())
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    try:
        source = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(store_file), uri=True,
                                 timeout=30)
        try:
            target = sqlite3.connect(partial)
            try:
                source.backup(target)
                target.execute("PRAGMA journal_mode=DELETE")    # one file, whatever the source's
                _check(target, partial)
            finally:
                target.close()
        finally:
            source.close()
        copied = _describe(partial)
        with open(partial, "rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, to)
    except sqlite3.Error as e:
        raise StoreUnavailable("cannot back up %s: %s" % (store_file, e)) from None
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return Copied(to, copied[0], copied[1], copied[2], time.monotonic() - started)


def restore(backup_file: str, store_file: str) -> str | None:
    """Put ``backup_file`` in place of ``store_file`` (no portal may run on it: the caller
    holds its state directory); returns where the replaced store was kept, if there was one."""
    if not os.path.isfile(backup_file):
        raise BadArgument("there is no backup at %s" % backup_file)
    try:
        source = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(backup_file), uri=True)
        try:
            _check(source, backup_file)
        finally:
            source.close()
    except sqlite3.Error as e:
        raise BadArgument("%s is not a usable backup: %s" % (backup_file, e)) from None
    kept = None
    if os.path.exists(store_file):
        kept = "%s.before-restore-%s" % (store_file, time.strftime("%Y%m%d-%H%M%S"))
        try:        # its log folded in, so that the kept file is whole
            previous = sqlite3.connect(store_file)
            try:
                previous.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                previous.close()
        except sqlite3.Error:
            pass    # a damaged store is kept as it is
        os.replace(store_file, kept)
    for leftover in (store_file + "-wal", store_file + "-shm"):   # the old store's, not the backup's
        if os.path.exists(leftover):
            os.unlink(leftover)
    partial = store_file + ".restoring"
    with open(backup_file, "rb") as src, \
            os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600),
                      "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(partial, store_file)
    return kept


def _check(conn: sqlite3.Connection, path: str) -> None:
    rows = conn.execute("PRAGMA quick_check").fetchall()
    if rows != [("ok",)]:
        raise StoreUnavailable("the copy %s is damaged: %s" % (path, "; ".join(str(r[0]) for r in rows[:3])))


def _describe(path: str) -> tuple[int, int, str]:
    """(size, applications, schema revision) of a store file."""
    conn = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(path), uri=True)
    try:
        apps = conn.execute("SELECT count(*) FROM applications").fetchone()[0]
        revision = ", ".join(r[0] for r in conn.execute("SELECT version_num FROM alembic_version"))
    except sqlite3.Error:
        raise BadArgument("%s is not a cddlm store" % path) from None
    finally:
        conn.close()
    return os.path.getsize(path), apps, revision
