"""The database: connection, transactions and migrations, on SQLite or PostgreSQL.

Every state change and the events it causes are written in one ``write()`` transaction.
On SQLite (one portal per file) writes take ``BEGIN IMMEDIATE`` under a process-wide lock, so
writers queue in order instead of spinning in SQLite's busy handler; WAL lets readers go on
meanwhile. On PostgreSQL several portals share the store; claims use ``FOR UPDATE SKIP
LOCKED`` (see ``enactment/queue.py``).

An SQLite file is not trusted blindly (``open_sqlite_file``): before anything writes to it,
it is checked read-only (``PRAGMA quick_check``) and a damaged one is refused with its path and
what to do; a new one is made readable by its owner only (SQLite gives its ``-wal`` and
``-shm`` files the database file's mode), and an old one is made so.

The hottest read (the application a view names, for its state) is answered from rows held in
memory (``first_cached``) for as long as nothing may have changed them: each portal counts
changes (``generation``), from its own commits (``write``), from other processes' (SQLite's
``PRAGMA data_version``; on PostgreSQL a notice each portal listens for, ``start``),
and a held row is used only while the count is the one it was read under.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import logging
import os
import threading
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError, SQLAlchemyError

from cddlm import metrics
from cddlm.errors import BadArgument, StoreUnavailable

MIGRATIONS = Path(__file__).with_name("migrations")
log = logging.getLogger(__name__)
CHANGES_CHANNEL = "cddlm_rows"      # PostgreSQL's notice of a changed row (migrations 0007, 0008)
PING_PREFIX = "ping:"               # a notice's payload that is no change: a listener's own


def normalise_url(url: str) -> str:
    """Accept the URLs users write (``postgresql://``) and pick the installed driver."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if not (url.startswith("sqlite:") or url.startswith("postgresql+")):
        raise BadArgument("unsupported database URL %r (sqlite:///FILE or postgresql://...)" % url)
    return url


def sqlite_file(url: str) -> str | None:
    """The file of an SQLite URL (None for PostgreSQL and in-memory databases)."""
    url = normalise_url(url)
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[-1]
    return os.path.abspath(path) if path and path != ":memory:" else None


def open_sqlite_file(path: str) -> bool:
    """Make ``path`` safe to open as the store: check an existing file without writing to it
    (``StoreUnavailable`` when SQLite finds it damaged), or create an empty one; either way,
    mode 0600. Returns whether it was created."""
    import sqlite3
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    else:
        os.close(fd)
        return True
    # an existing WAL must be read with it; without one, immutable: no file is touched at all
    flags = "mode=ro" if os.path.exists(path + "-wal") else "immutable=1"
    problem = None
    try:
        conn = sqlite3.connect("file:%s?%s" % (urllib.parse.quote(path), flags), uri=True)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
        finally:
            conn.close()
        if rows != [("ok",)]:
            problem = "; ".join(str(r[0]) for r in rows[:3])
    except sqlite3.DatabaseError as e:
        problem = str(e)
    if problem is not None:
        raise StoreUnavailable(
            "the store %s is damaged (SQLite: %s); the portal will not use it. Restore it from a "
            "backup, or try: sqlite3 %s .recover | sqlite3 recovered.db, or move it away to start "
            "with an empty store" % (path, problem, path))
    for name in (path, path + "-wal", path + "-shm"):
        try:
            if not os.path.islink(name):
                os.chmod(name, 0o600)
        except OSError:     # gone meanwhile, or not ours: SQLite will say if it matters
            pass
    return False


class Store:
    def __init__(self, url: str, *, pool_size: int = 24):
        self.url = normalise_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        self._write_lock = threading.Lock() if self.is_sqlite else None
        try:
            if self.is_sqlite:
                path = self.url.split("///", 1)[-1]
                if path and path != ":memory:":
                    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                self.engine = create_engine(self.url, pool_size=pool_size, max_overflow=8,
                                            connect_args={"timeout": 30, "check_same_thread": False})
                self._configure_sqlite(self.engine)
            else:
                # TCP keepalives: a server gone without a word is noticed in about 20 s,
                # not after the kernel's two hours (ignored on a Unix socket)
                # (the connection given back last is handed out first: it needs no ping)
                self.engine = create_engine(self.url, pool_size=pool_size, max_overflow=8,
                                            pool_use_lifo=True, connect_args={
                                                "keepalives": 1, "keepalives_idle": 10,
                                                "keepalives_interval": 3, "keepalives_count": 3})
                _ping_when_idle(self.engine)
        except (SQLAlchemyError, ImportError) as e:
            raise StoreUnavailable("cannot open database %s: %s" % (self.safe_url, e)) from None
        _time_statements(self.engine)
        # one autocommit connection per thread for single-statement reads (the hot path)
        self._single = self.engine.execution_options(cddlm_single=True, isolation_level="AUTOCOMMIT")
        self._local = threading.local()
        self._compiled: dict = {}     # statement -> (SQL, parameter order, column names): ``first``
        self._held = RowsHeld(watched=self.is_sqlite)
        self._worker: Checkpointer | ChangeWatcher | None = None     # ``start``
        self._known: tuple[frozenset[str], frozenset[str]] | None = None   # ``_revisions``
        self._wal_fd: int | bool | None = None     # SQLite: the -shm file (``_wal_header``)
        self._wal_seen: bytes | None = None

    @property
    def safe_url(self) -> str:
        """The URL without a password, for messages."""
        from sqlalchemy.engine import make_url
        return make_url(self.url).render_as_string(hide_password=True)

    @staticmethod
    def _configure_sqlite(engine: Engine) -> None:
        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            # the log is copied back by the store's own thread (``Checkpointer``); a commit
            # does it only should that thread fall this far behind
            cur.execute("PRAGMA wal_autocheckpoint=%d" % Checkpointer.BACKSTOP_PAGES)
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn):
            options = conn.get_execution_options()
            if options.get("cddlm_single"):
                return  # one statement: SQLite's own statement-level consistency is enough
            conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get("cddlm_write") else "BEGIN")

    # -- transactions -----------------------------------------------------------------------
    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction: commits on success, rolls back on any exception."""
        lock = self._write_lock
        if lock is not None:
            lock.acquire()
        try:
            with self._translate():
                with self.engine.connect() as conn:
                    conn = conn.execution_options(cddlm_write=True)
                    with conn.begin(), _pipelined(conn, quiet=self._alone()):
                        yield conn
        finally:
            self._held.changed()    # after the commit (or whatever became of it)
            if lock is not None:
                lock.release()

    def _alone(self) -> bool:
        """PostgreSQL: no other process listens for this portal's changes (``ChangeWatcher``)."""
        worker = self._worker
        return isinstance(worker, ChangeWatcher) and worker.alone()

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a consistent snapshot)."""
        with self._translate():
            with self.engine.connect() as conn:
                with conn.begin():
                    yield conn

    @contextlib.contextmanager
    def single(self) -> Iterator[Connection]:
        """A connection for one read statement, without a transaction of its own (the hot
        path: one indexed SELECT per request). Each thread keeps its own."""
        conn = self._thread_conn()
        try:
            with self._translate():
                yield conn
                conn.commit()   # ends SQLAlchemy's marker; AUTOCOMMIT means no database work
        except BaseException:
            self._drop_thread_conn(conn)   # not reused: the thread's next read opens one
            raise

    def _thread_conn(self) -> Connection:
        """The thread's own autocommit connection (``single``, ``first``), opened on first use."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with self._translate():
                conn = self._local.conn = self._single.connect()
        return conn

    def _drop_thread_conn(self, conn: Connection, broken: bool = False) -> None:
        self._local.conn = self._local.cursor = self._local.cursor_of = None
        self._local.data_version = None     # a count of that connection's
        if broken:      # gone or broken: the pool must not hand it out again
            conn.invalidate()
        conn.close()

    def first(self, statement, params: dict) -> dict | None:
        """The first row of a prebuilt SELECT as a dict (column names as keys), or None: the
        statement compiled once, run through the driver on the thread's own autocommit
        connection (``single``). For the hottest read (every application request finds its
        application this way), where SQLAlchemy's work per execution cost more than the
        database's own."""
        shape = self._compiled.get(statement)
        if shape is None:
            compiled = statement.compile(dialect=self.engine.dialect)
            names = tuple(c.name for c in statement.selected_columns)
            order = tuple(compiled.positiontup) if compiled.positional else None
            shape = self._compiled[statement] = (compiled.string, order, names,
                                                 dict(compiled.params))   # LIMIT's value ...
        sql, order, names, defaults = shape
        params = {**defaults, **params}
        args = tuple(params[k] for k in order) if order is not None else params
        conn = self._thread_conn()      # single()'s, without its transaction marker
        with self._on_driver(conn):
            row = self._fetch_first(conn, sql, args)
        return dict(zip(names, row)) if row is not None else None

    @contextlib.contextmanager
    def _on_driver(self, conn: Connection) -> Iterator[None]:
        """The driver's own errors on the thread's connection: it is dropped (the next read
        opens another) and the error is ``StoreUnavailable``."""
        driver = self.engine.dialect.loaded_dbapi
        try:
            yield
        except (driver.OperationalError, driver.InterfaceError) as e:
            self._drop_thread_conn(conn, broken=True)
            raise StoreUnavailable("database unavailable: %s" % e) from None

    def first_cached(self, key: Any, statement, params: dict,
                     still: Callable[[dict], bool]) -> dict | None:
        """``first``, answered from the row read last time under ``key`` when nothing in the
        store may have changed since (and ``still(row)`` holds: what the statement's
        parameters would decide, such as a time); the row read is held for next time. The
        row is shared: callers must not change it. Rows not found are not held."""
        held = self._held
        if self.is_sqlite:
            self._other_connections_wrote()
        generation = held.generation
        if held.watched:
            row = held.get(key, generation)
            if row is not None and still(row):
                return row
        row = self.first(statement, params)
        if row is not None and held.watched:
            held.put(key, generation, row)
        return row

    def _other_connections_wrote(self) -> None:
        """SQLite counts the commits of every other connection to the file, this process's
        and others' (``PRAGMA data_version``, read on the thread's own connection, which
        never writes): one it has not seen is a change. Where the database has its WAL
        index in shared memory (``-shm``), its header is read there instead: every commit
        rewrites it, and reading it costs no call into SQLite, whose release of the GIL let
        the portal's other threads in (under load, the state read's p50 was twice lookup's)."""
        conn = self._thread_conn()      # open: SQLite keeps the -shm file while one is
        header = self._wal_header()
        if header is not None:
            if header != self._wal_seen:
                self._held.changed()    # first: a thread seeing the new header meanwhile
                self._wal_seen = header     # changes it again, rather than read a held row
            return
        with self._on_driver(conn):
            version = self._fetch_first(conn, "PRAGMA data_version", ())[0]
        if version != getattr(self._local, "data_version", None):
            self._local.data_version = version
            self._held.changed()

    def _wal_header(self) -> bytes | None:
        """The WAL index's header: the first 48 bytes of the database's ``-shm`` file (SQLite's
        file format, "the wal-index header"), read with one ``pread``; None without one (then
        SQLite is asked). Read, not mapped: SQLite truncates the file when a process opens it
        first, and a mapped page past its end kills the reader (SIGBUS); a short read here
        asks SQLite instead."""
        fd = self._wal_fd
        if fd is None:
            fd = self._wal_fd = _open_wal_index(self.url.split("///", 1)[-1]) or False
        if fd is False:
            return None
        try:
            header = os.pread(fd, WAL_HEADER, 0)
            if os.fstat(fd).st_nlink == 0:
                # the file was removed (every connection closed) and SQLite made a new one
                os.close(fd)
                self._wal_fd = None
                return None
        except OSError:
            return None
        return header if len(header) == WAL_HEADER else None

    def start(self) -> None:
        """The store's own work while a portal runs, on a thread of its own: on PostgreSQL,
        listening for other portals' changes (rows are held by ``first_cached`` only while
        the notices are heard); on SQLite, copying the write-ahead log back into the file."""
        if self._worker is None:
            self._worker = Checkpointer(self.engine, lambda: self._held.generation) \
                if self.is_sqlite else ChangeWatcher(self.engine, self._held)

    def _fetch_first(self, conn: Connection, sql: str, args) -> Any:
        if self.is_sqlite:
            # a fresh cursor, closed at once: a SQLite statement left open holds its read
            # snapshot, and with it the WAL, for as long as the thread stays idle
            cursor = conn.connection.dbapi_connection.cursor()
            try:
                cursor.execute(sql, args)
                return cursor.fetchone()
            finally:
                cursor.close()
        # psycopg: the thread's one cursor, kept (making one cost more than the read); its
        # result is held by the client, and the connection is in autocommit
        local = self._local
        cursor = local.cursor if getattr(local, "cursor_of", None) is conn else None
        if cursor is None:
            cursor = local.cursor = conn.connection.dbapi_connection.cursor()
            local.cursor_of = conn
        cursor.execute(sql, args)
        return cursor.fetchone()

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except (OperationalError, DBAPIError) as e:
            if isinstance(e, DBAPIError) and not isinstance(e, OperationalError) \
                    and not getattr(e, "connection_invalidated", False):
                raise
            raise StoreUnavailable("database unavailable: %s" % (e.orig or e)) from None

    # -- schema -----------------------------------------------------------------------------
    def migrate(self) -> None:
        """Bring the schema to the newest revision (Alembic; every head, should work done in
        parallel have branched from one revision), safely with several portals. A store that a
        newer program has migrated past this one's revisions is refused (``StoreUnavailable``,
        saying what to do): this program would misread it."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        current = self._current_heads()
        if current == self._revisions()[0]:
            return     # the usual start: nothing to migrate, and nothing to check row by row
        self._refuse_newer(current)
        if self.is_sqlite:
            self._migrate_sqlite(cfg)
            return
        with self.write() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(4242001)"))
            self._refuse_newer(self._current_heads(conn))     # another portal may have moved it
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "heads")

    def _revisions(self) -> tuple[frozenset[str], frozenset[str]]:
        """(the newest revisions, every revision) this program knows; read once."""
        if self._known is None:
            from alembic.config import Config
            from alembic.script import ScriptDirectory
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS))
            script = ScriptDirectory.from_config(cfg)
            self._known = (frozenset(script.get_heads()),
                           frozenset(r.revision for r in script.walk_revisions()))
        return self._known

    def _current_heads(self, conn: Connection | None = None) -> frozenset[str]:
        """The store's schema revisions (one read of alembic_version; none in a new store)."""
        from alembic.runtime.migration import MigrationContext
        if conn is not None:
            return frozenset(MigrationContext.configure(conn).get_current_heads())
        with self._translate(), self.engine.connect() as conn:
            current = frozenset(MigrationContext.configure(conn).get_current_heads())
            conn.rollback()
        return current

    def _refuse_newer(self, current: frozenset[str]) -> None:
        unknown = current - self._revisions()[1]
        if unknown:
            from cddlm import __version__
            raise StoreUnavailable(
                "the store %s was migrated by a newer cddlm (schema revision %s, which cddlm %s "
                "does not know; it knows up to %s): run that newer version on it, or restore a "
                "backup taken before the upgrade (cddlm portal backup) and start this version "
                "on that" % (self.safe_url, ", ".join(sorted(unknown)), __version__,
                             ", ".join(sorted(self._revisions()[0]))))

    def schema_problem(self) -> str | None:
        """Why the store's schema is not this program's now (None: it is): one cheap read, for
        readiness (a newer portal sharing the store may have migrated it)."""
        current = self._current_heads()
        heads, known = self._revisions()
        if current == heads:
            return None
        if current - known:
            return "the store's schema (%s) is newer than this program's (%s)" % (
                ", ".join(sorted(current)), ", ".join(sorted(heads)))
        return "the store's schema (%s) is older than this program's (%s)" % (
            ", ".join(sorted(current)) or "none", ", ".join(sorted(heads)))

    def _migrate_sqlite(self, cfg) -> None:
        """SQLite cannot drop a constraint, so a migration may rebuild a table (copy, drop,
        rename); with foreign keys on, dropping the old table would delete its children's
        rows (ON DELETE CASCADE). They are off while migrating, and checked afterwards."""
        from alembic import command
        assert self._write_lock is not None
        with self._write_lock, self._translate(), self.engine.connect() as conn:
            conn.execution_options(cddlm_single=True).exec_driver_sql("PRAGMA foreign_keys=OFF")
            conn.commit()
            try:
                conn.execution_options(cddlm_single=False, cddlm_write=True)
                with conn.begin():
                    cfg.attributes["connection"] = conn
                    command.upgrade(cfg, "heads")
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise StoreUnavailable("the schema migration left rows without their "
                                               "parents: %s" % broken[:5])
            finally:
                conn.execution_options(cddlm_single=True, cddlm_write=False)
                conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                conn.commit()

    def dispose(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._drop_thread_conn(conn)
        if self._wal_fd:
            os.close(self._wal_fd)
        self._wal_fd = False
        self.engine.dispose()


class RowsHeld:
    """Rows read by ``Store.first_cached``, each with the count of changes it was read under
    (``generation``): a row is used only while the count is unchanged, and only while
    ``watched`` (every change is being counted); and for a second at most, should a notice
    ever be lost on its way. Kept small: full, it starts again empty."""

    LIMIT = 4096
    MAX_AGE = 1.0

    def __init__(self, watched: bool):
        self._counter = itertools.count(1)
        self.generation = 0
        self.watched = watched
        self._rows: dict = {}

    def changed(self) -> None:
        # a count no thread has had (two threads adding one could both make the same, and a
        # row read after the first change would then outlive the second)
        self.generation = next(self._counter)

    def get(self, key: Any, generation: int) -> dict | None:
        entry = self._rows.get(key)
        if entry is None or entry[0] != generation or time.monotonic() > entry[1]:
            return None
        return entry[2]

    def put(self, key: Any, generation: int, row: dict) -> None:
        if generation != self.generation:
            return      # changed while it was read: it may be older than the change
        if len(self._rows) >= self.LIMIT:
            self._rows = {}
        self._rows[key] = (generation, time.monotonic() + self.MAX_AGE, row)


class ChangeWatcher:
    """PostgreSQL: a thread that listens for the notices of changed rows (migrations 0007, 0008),
    from this portal and every other on the store, and counts each as a change. While it is
    not listening (starting, or its connection lost until it is back) no row is held.

    A connection can be lost without a word (its server process stopped, its packets dropped):
    every ``PING`` seconds the thread sends a notice of its own through another connection,
    and takes its own for lost when that notice has not come back within ``ECHO`` seconds.

    Those notices also tell every listener that another one listens. Every portal on the
    database hears them (LISTEN is per database), so each names its schema
    (``ping:SCHEMA.TOKEN``, the schema as a short hash), and a listener of another schema,
    another store, is not counted (one naming none, an older portal's, is). A portal that has
    heard no other listener of its store for ``QUIET_AFTER`` seconds while listening is
    ``alone``: its own changes need no notice (``Store.write``, migration 0008), and
    PostgreSQL commits the transactions that notify one at a time. A portal that starts listening sends its first notice at once
    and holds rows only ``HOLD_AFTER`` seconds after it came back: by then a portal that was
    alone has heard it too, and its write transactions notify again."""

    RETRY = 1.0     # seconds between attempts to listen again
    WAIT = 0.5      # seconds a wait for notices lasts (how soon a stop is seen)
    PING = 2.0      # seconds between the notices it sends itself
    ECHO = 2.0      # seconds within which its own notice must come back
    QUIET_AFTER = 6.0   # seconds without another listener's notice: alone
    HOLD_AFTER = 0.5    # seconds after its first notice came back before rows are held

    def __init__(self, engine: Engine, held: RowsHeld):
        self._engine = engine
        self._held = held
        self._stopping = threading.Event()
        self._conn: Any = None
        self._others_heard: float | None = None     # when another listener was last heard
        self._thread = threading.Thread(target=self._run, name="cddlm-store-changes", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No row is held from now on; the thread ends by itself within its next wait."""
        self._stopping.set()
        self._held.watched = False

    def alone(self) -> bool:
        """Whether no other process has listened for ``QUIET_AFTER`` seconds (False while not
        listening: then nobody knows)."""
        heard = self._others_heard
        return heard is not None and self._held.watched and \
            time.monotonic() - heard > self.QUIET_AFTER

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._listen()
            except Exception as e:  # noqa: BLE001 - lost the database: listen again
                if not self._stopping.is_set():
                    log.warning("not told of changes to the store (%s); reading every row "
                                "until the notices are back", e)
            finally:
                self._held.watched = False
                self._others_heard = None
                self._held.changed()
                conn, self._conn = self._conn, None
                _close_quietly(conn)
            self._stopping.wait(self.RETRY)

    def _listen(self) -> None:
        raw = self._engine.raw_connection()
        self._conn = conn = raw.driver_connection
        raw.detach()        # this thread's own, not the pool's
        conn.autocommit = True
        conn.execute("LISTEN %s" % CHANGES_CHANNEL)
        self._held.changed()            # whatever was read before listening is not held
        self._others_heard = time.monotonic()   # not alone until it has listened a while
        place = _schema_tag(conn.execute("SELECT current_schema()").fetchone()[0])
        token = PING_PREFIX + place + "." + uuid.uuid4().hex
        sent, due, hold = None, time.monotonic(), None     # the first notice at once
        while not self._stopping.is_set():
            for notice in conn.notifies(timeout=self.WAIT if hold is None else 0.05):
                if notice.payload == token:
                    if not self._held.watched and hold is None:
                        hold = time.monotonic() + self.HOLD_AFTER
                    sent = None
                elif notice.payload.startswith(PING_PREFIX):    # another listener's
                    theirs, dot, _ = notice.payload[len(PING_PREFIX):].partition(".")
                    if not dot or theirs == place:      # (not of a store in another schema)
                        self._others_heard = time.monotonic()
                else:                                           # another writer's change
                    self._held.changed()
            now = time.monotonic()
            if hold is not None and now >= hold:
                self._held.changed()
                self._held.watched = True
                hold = None
            if sent is not None and now - sent > self.ECHO:
                raise ConnectionError("its own notice did not come back within %g s" % self.ECHO)
            if sent is None and now >= due:
                with self._engine.connect() as other:
                    other.execute(text("SELECT pg_notify(:channel, :token)"),
                                  {"channel": CHANGES_CHANNEL, "token": token})
                    other.commit()
                sent, due = now, now + self.PING


def _schema_tag(schema: str | None) -> str:
    """A schema as a listener's notice names it: a short hash (a notice's payload is bounded,
    a schema's name may hold a dot)."""
    return hashlib.sha256((schema or "").encode("utf-8")).hexdigest()[:12]


class Checkpointer:
    """SQLite: the write-ahead log copied back into the database file (a passive checkpoint)
    by a thread of its own, rather than by the commit that happens to cross SQLite's
    threshold: that commit waited for the copy and its sync, the slowest creates of all
    (create p99 on a store of 100,000 applications 15 ms, 2.0-2.3 x the empty store's;
    without checkpoints in the commits, 5 ms). About as often as SQLite would (each copy
    ends with a sync of the file): after ``COMMITS`` changes, or ``IDLE`` seconds after
    fewer; ``changes()`` is the store's count of changes, which every commit moves."""

    EVERY = 0.5         # seconds between looks at the count
    COMMITS = 64        # changes that make a copy due (a create changes 10-20 pages)
    IDLE = 5.0          # seconds after which fewer changes are copied too
    BACKSTOP_PAGES = 10000      # a commit checkpoints only past this (40 MB of log)

    def __init__(self, engine: Engine, changes: Callable[[], int]):
        self._engine = engine
        self._changes = changes
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cddlm-store-checkpoint",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)

    def _run(self) -> None:
        conn = None
        copied, when = self._changes() - self.COMMITS, time.monotonic()    # a first copy at once
        while not self._stopping.wait(self.EVERY):
            count, now = self._changes(), time.monotonic()
            if count - copied < self.COMMITS and (count == copied or now - when < self.IDLE):
                continue
            copied, when = count, now
            try:
                if conn is None:
                    raw = self._engine.raw_connection()
                    conn = raw.driver_connection
                    raw.detach()        # this thread's own, not the pool's
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except Exception as e:  # noqa: BLE001 - commits checkpoint meanwhile (backstop)
                log.warning("cannot checkpoint the store's log: %s", e)
                _close_quietly(conn)
                conn = None
        _close_quietly(conn)


WAL_HEADER = 48     # bytes of SQLite's wal-index header (two copies of it follow)


def _open_wal_index(path: str) -> int | None:
    """The ``-shm`` file of the SQLite database at ``path``, open for reading (None where it
    is missing: not a file, not in WAL mode yet)."""
    if not path or path == ":memory:":
        return None
    try:
        return os.open(path + "-shm", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


PING_IDLE = 1.0      # seconds a pooled PostgreSQL connection may rest and be handed out unpinged


def _ping_when_idle(engine: Engine) -> None:
    """A pooled connection that rested more than ``PING_IDLE`` is pinged before it is handed
    out (a server restarted meanwhile: another connection is made), as ``pool_pre_ping``
    does for every one; one just given back is not: the ping was one round trip of a create's
    seven, and the busier the portal the more of them it was."""
    @event.listens_for(engine, "checkin")
    def _rests(dbapi_conn, record):
        record.info["cddlm_rests"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _handed_out(dbapi_conn, record, proxy):
        rested = record.info.pop("cddlm_rests", None)
        if rested is None or time.monotonic() - rested <= PING_IDLE:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as e:  # noqa: BLE001 - gone: the pool makes another
            raise DisconnectionError("the connection did not answer a ping: %s" % e) from None


@contextlib.contextmanager
def _pipelined(conn: Connection, quiet: bool = False) -> Iterator[None]:
    """PostgreSQL: the write transaction in the driver's pipeline mode, so that the statements
    whose answer nobody reads (an INSERT without RETURNING: ``_deferred``) go out with the next
    one that is waited for, rather than a round trip each. Every other statement is waited for
    at once (``_time_statements``: the pipeline is synced), so its rows, its rowcount and its
    error are there as without the pipeline; a deferred INSERT's error (a name in use) comes
    with the next statement waited for, or at the end of the pipeline, as SQLAlchemy's error
    (the COMMIT queued after it is then not run, and the transaction is rolled back). The
    BEGIN goes with the first statement, the COMMIT with the end of the pipeline, whose answer
    is waited for before ``write`` returns (SQLAlchemy's commit afterwards finds the driver
    out of the transaction and sends nothing). A create's eight round trips (BEGIN, six
    INSERTs, COMMIT) are one. ``quiet``: the changed rows' triggers send no notice (migration
    0008: no other process listens)."""
    if conn.dialect.name != "postgresql" or not _pipeline_supported():
        yield
        return
    error = conn.dialect.loaded_dbapi.Error
    try:
        driver = conn.connection.driver_connection
        with driver.pipeline() as pipeline:
            try:
                cursor = conn.info[PIPELINE_CURSOR] = driver.cursor()   # ``_on_pipeline``'s too
                if quiet:       # (after the BEGIN the driver sends first; not waited for)
                    cursor.execute("SET LOCAL cddlm.alone = on")
                conn.info[PIPELINE] = pipeline
                yield
                cursor.execute("COMMIT")    # answered at the end of the pipeline, just below
            finally:
                conn.info.pop(PIPELINE, None)
                conn.info.pop(PIPELINE_CURSOR, None)
    except error as e:     # a deferred statement's, at the end: as SQLAlchemy says it
        raise DBAPIError.instance(None, None, e, error) from None


PIPELINE = "cddlm_pipeline"     # Connection.info: the write transaction's pipeline (PostgreSQL)


@functools.cache
def _pipeline_supported() -> bool:
    """Whether the driver's libpq has a pipeline mode (14 and later): without, every
    statement is waited for."""
    import psycopg
    return psycopg.Pipeline.is_supported()


def not_waited(statement: Any) -> Any:
    """``statement``, an UPDATE or DELETE whose rowcount its caller does not read, marked to go
    out on PostgreSQL with the next statement waited for (``_pipelined``), as an INSERT
    without RETURNING does."""
    return statement.execution_options(cddlm_not_waited=True)


def send(conn: Connection, statement: Any, params: dict) -> None:
    """Execute ``statement`` (an INSERT without RETURNING, or one marked ``not_waited``: its
    answer read by no one) with ``params`` in ``conn``'s write transaction. On PostgreSQL, in
    the transaction's pipeline (``_pipelined``), it is handed to the driver directly
    (``_on_pipeline``) and goes out with the next statement waited for, as through
    SQLAlchemy; its error comes as it would through SQLAlchemy: with the next statement
    waited for, or at the end of the pipeline. Elsewhere (SQLite, or in a SAVEPOINT, where
    each error must be its own statement's): through SQLAlchemy."""
    if _on_pipeline(conn, statement, params) is None:
        conn.execute(statement, params)


def rows(conn: Connection, statement: Any, params: dict) -> list[Any]:
    """The rows of a prebuilt SELECT in ``conn``'s transaction, as tuples in the order of its
    columns. On PostgreSQL, in a write transaction's pipeline, through the driver directly
    (``_on_pipeline``), waited for at once; elsewhere through SQLAlchemy."""
    cursor = _on_pipeline(conn, statement, params)
    if cursor is None:
        return [tuple(r) for r in conn.execute(statement, params)]
    sent = time.perf_counter()
    try:
        conn.info[PIPELINE].sync()
        found = cursor.fetchall()
    except conn.dialect.loaded_dbapi.Error as e:
        raise DBAPIError.instance(None, None, e, conn.dialect.loaded_dbapi.Error) from None
    metrics.store_round_trip(time.perf_counter() - sent)
    return found


def first_mapping(conn: Connection, statement: Any, params: dict) -> dict | None:
    """The first row of a prebuilt SELECT in ``conn``'s transaction as a dict (its columns'
    names as keys), or None (``rows``)."""
    found = rows(conn, statement, params)
    if not found:
        return None
    return dict(zip((c.name for c in statement.selected_columns), found[0]))


def _on_pipeline(conn: Connection, statement: Any, params: dict) -> Any:
    """In a write transaction's pipeline (PostgreSQL), ``statement`` executed with ``params``
    by the driver, on one cursor for the transaction, which is returned; else None (not
    executed). SQLAlchemy's work per execution (a fresh cursor, its compiled cache, its
    events, its result's description: about 100 µs) was most of the portal's CPU of such a
    statement; here it is compiled once for its shape (``_shape``). Not in a SAVEPOINT (each
    error must be its own statement's there)."""
    pipeline = conn.info.get(PIPELINE)
    if pipeline is None or conn.in_nested_transaction():
        return None
    shape = _shape(conn.dialect, statement, tuple(params))
    if shape is None:
        return None
    sql, defaults, processors = shape
    args = {**defaults, **params}
    for key, process in processors:
        if args.get(key) is not None:
            args[key] = process(args[key])
    cursor = conn.info[PIPELINE_CURSOR]     # (``_pipelined`` made it with the pipeline)
    error = conn.dialect.loaded_dbapi.Error
    try:
        cursor.execute(sql, args)
    except error as e:     # an earlier deferred statement's (or this one's), as SQLAlchemy says it
        raise DBAPIError.instance(sql, args, e, error) from None
    return cursor


PIPELINE_CURSOR = "cddlm_pipeline_cursor"   # Connection.info: ``_on_pipeline``'s cursor
_SHAPES: dict = {}      # (dialect name, statement, parameter names) -> ``_shape``
MAX_SHAPES = 1024


def _shape(dialect: Any, statement: Any, names: tuple) -> tuple | None:
    """``statement`` compiled for parameters named ``names``: (its SQL, the values of the
    bound parameters and the columns' scalar defaults that the parameters do not give, the
    bind processors to apply), or None when SQLAlchemy must execute it itself (positional or
    escaped parameters, parameters expanded at execution, a default computed per row, a
    column whose values SQLAlchemy converts when read)."""
    key = (dialect.name, statement, names)
    try:
        return _SHAPES[key]
    except KeyError:
        pass
    if len(_SHAPES) >= MAX_SHAPES:      # (callers pass prebuilt statements: this is a guard)
        _SHAPES.clear()
    try:
        shape = _compile_shape(dialect, statement, names)
    except (AttributeError, TypeError, ValueError) as e:
        # the parts of SQLAlchemy used here are its own internals (checked with 2.0 and 2.1):
        # should a release change them, statements go through SQLAlchemy, slower but right
        log.warning("statements go through SQLAlchemy: its compiled form is not as expected "
                    "(%s: %s)", type(e).__name__, e)
        shape = None
    _SHAPES[key] = shape
    return shape


def _compile_shape(dialect: Any, statement: Any, names: tuple) -> tuple | None:
    compiled = statement.compile(dialect=dialect, column_keys=list(names))
    defaults = [(c, c._default_description_tuple) for c in compiled.insert_prefetch] + \
        [(c, c._onupdate_description_tuple) for c in compiled.update_prefetch]
    usable = not (compiled.positional or compiled.literal_execute_params
                  or compiled.post_compile_params or compiled.escaped_bind_names) \
        and all(is_scalar for _c, (_arg, is_scalar, _call, _sentinel) in defaults) \
        and not any(_converted_when_read(c.type, dialect)
                    for c in getattr(statement, "selected_columns", ()))
    if not usable:
        return None
    values = compiled.construct_params(_check=False)
    if defaults:    # (an INSERT's or UPDATE's: the getter exists for them only)
        key_of = compiled._within_exec_param_key_getter
        values.update((key_of(c), arg) for c, (arg, _s, _call, _sentinel) in defaults)
    processors = tuple((k, p) for k, p in compiled._bind_processors.items() if p is not None)
    return compiled.string, values, processors


def _converted_when_read(type_: Any, dialect: Any) -> bool:
    """Whether SQLAlchemy converts a column of this type when a row is read (its result
    processor; a float column's is asked of as PostgreSQL sends it, float8)."""
    return type_._cached_result_processor(dialect, 701) is not None


def _deferred(context: Any) -> bool:
    """Whether a statement's answer is read by no one: an INSERT without RETURNING (its new
    id not asked for: ``insert(...).inline()``), or one marked ``not_waited``."""
    compiled = getattr(context, "compiled", None)
    if compiled is None:
        return False
    if context.isinsert:
        return not compiled.effective_returning
    return bool(context.execution_options.get("cddlm_not_waited"))


def _time_statements(engine: Engine) -> None:
    """Each statement's round trip, for the metrics (``cddlm_store_round_trip_seconds``)."""
    @event.listens_for(engine, "before_cursor_execute")
    def _sent(conn, cursor, statement, parameters, context, executemany):
        conn.info["cddlm_sent"] = time.perf_counter()     # one statement at a time

    @event.listens_for(engine, "after_cursor_execute")
    def _answered(conn, cursor, statement, parameters, context, executemany):
        pipeline = conn.info.get(PIPELINE)
        if pipeline is not None:
            if _deferred(context) and not conn.in_nested_transaction():
                # answered with the next statement waited for (in a SAVEPOINT, each error
                # must be its own statement's, which the savepoint can be rolled back to)
                return
            pipeline.sync()     # its answer (and the deferred ones' before it), or its error
        sent = conn.info.pop("cddlm_sent", None)
        if sent is not None:
            metrics.store_round_trip(time.perf_counter() - sent)


def _close_quietly(conn: Any) -> None:
    """Close a driver connection of a store thread's own (it may be gone already)."""
    if conn is not None:
        try:
            conn.close()
        except Exception:   # noqa: BLE001 - already gone
            pass
