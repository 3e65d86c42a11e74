"""The database: connection, transactions and migrations, on SQLite or PostgreSQL.

Every state change and the events it causes are written in one ``write()`` transaction.
On SQLite (one portal per file) writes take ``BEGIN IMMEDIATE`` under a process-wide lock, so
writers queue in order instead of spinning in SQLite's busy handler; WAL lets readers go on
meanwhile. On PostgreSQL several portals share the store; claims use ``FOR UPDATE SKIP
LOCKED`` (see ``enactment/queue.py``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Iterator

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from cddlm.errors import BadArgument, StoreUnavailable

MIGRATIONS = Path(__file__).with_name("migrations")


def normalise_url(url: str) -> str:
    """Accept the URLs users write (``postgresql://``) and pick the installed driver."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if not (url.startswith("sqlite:") or url.startswith("postgresql+")):
        raise BadArgument("unsupported database URL %r (sqlite:///FILE or postgresql://...)" % url)
    return url


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
                self.engine = create_engine(self.url, pool_size=pool_size, max_overflow=8,
                                            pool_pre_ping=True)
        except (SQLAlchemyError, ImportError) as e:
            raise StoreUnavailable("cannot open database %s: %s" % (self.safe_url, e)) from None
        # one autocommit connection per thread for single-statement reads (the hot path)
        self._single = self.engine.execution_options(cddlm_single=True, isolation_level="AUTOCOMMIT")
        self._local = threading.local()

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
                    with conn.begin():
                        yield conn
        finally:
            if lock is not None:
                lock.release()

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
        conn = getattr(self._local, "conn", None)
        if conn is None:
            with self._translate():
                conn = self._local.conn = self._single.connect()
        try:
            with self._translate():
                yield conn
                conn.commit()   # ends SQLAlchemy's marker; AUTOCOMMIT means no database work
        except BaseException:
            self._local.conn = None   # a failed connection is not reused; the next read opens one
            conn.close()
            raise

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
        """Bring the schema to the newest revision (Alembic), safely with several portals."""
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        if self.is_sqlite:
            self._migrate_sqlite(cfg)
            return
        with self.write() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(4242001)"))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

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
                    command.upgrade(cfg, "head")
                    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise StoreUnavailable("the schema migration left rows without their "
                                               "parents: %s" % broken[:5])
            finally:
                conn.execution_options(cddlm_single=True, cddlm_write=False)
                conn.exec_driver_sql("PRAGMA foreign_keys=ON")
                conn.commit()

    def dispose(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self.engine.dispose()
