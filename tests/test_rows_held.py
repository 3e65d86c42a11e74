"""The state read answered from rows held in memory (``Store.first_cached``): never older than
a commit of this portal, nor than another writer's once it is known (SQLite's change counter;
PostgreSQL's notices), and not held at all while PostgreSQL's notices are not being heard."""

from __future__ import annotations

import contextlib
import time

import pytest

from cddlm.application import repository as repo
from cddlm.application.store import RowsHeld, Store
from tests.conftest import db_urls, pg_database_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """PostgreSQL: a database of its own. These tests count reads and notices, and every
    portal on a database hears every change there (a notice names a table, not a schema):
    another test's portals (the hosts lane of make test's serial part runs beside these)
    would drop rows held here, and kept a portal from being alone (seen beside test_failover)."""
    yield from db_urls(request, tmp_path, pg_database_url)


def make(db_url) -> Store:
    store = Store(db_url)
    store.migrate()
    store.start()
    return store


def counting(store: Store) -> list[int]:
    """Count the reads that reach the database."""
    reads, first = [0], store.first

    def counted(*args, **kwargs):
        reads[0] += 1
        return first(*args, **kwargs)

    store.first = counted
    return reads


def watched(store: Store, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not store._held.watched and time.monotonic() < deadline:
        time.sleep(0.01)
    return store._held.watched


def app_with_view(store: Store, name: str) -> tuple[str, str]:
    with store.write() as conn:
        app = repo.create_app(conn, 1.0, id=repo.new_id(), name=name)
        return app.id, repo.new_view(conn, app.id, "http://p", 1.0).id


def set_state(store: Store, app_id: str, state: str, now: float) -> None:
    with store.write() as conn:
        repo.record_state(conn, repo.get_app(conn, app_id), state, now)


def state(store: Store, view_id: str, now: float = 2.0) -> str | None:
    app = repo.app_by_view(store, view_id, now, light=True)
    return app.state if app is not None else None


def test_a_held_row_answers_until_this_portal_commits_and_no_longer_than_its_view(db_url):
    store = make(db_url)
    try:
        assert watched(store)
        app_id, view_id = app_with_view(store, "held")
        reads = counting(store)
        assert [state(store, view_id) for _ in range(50)] == ["instantiated"] * 50
        assert reads[0] == 1                            # the other 49 from the row held
        set_state(store, app_id, "initialized", 3.0)
        assert state(store, view_id) == "initialized"   # read again after the commit
        assert reads[0] == 2
        with store.write() as conn:
            repo.set_view_termination(conn, view_id, 10.0)
        assert state(store, view_id, now=9.0) == "initialized"
        assert reads[0] == 3
        assert state(store, view_id, now=11.0) is None  # the view has ended: not the held row
        assert reads[0] == 4
        # the full read (component tree and all) is never held
        assert repo.app_by_view(store, view_id, 9.0).state == "initialized"
        assert reads[0] == 5
        assert state(store, "no-such-view") is None and state(store, "no-such-view") is None
        assert reads[0] == 7                            # nothing found is not held
    finally:
        store.dispose()


def test_another_writer_on_the_store_is_seen(db_url):
    """A second Store is another process on SQLite, another portal on PostgreSQL: its commit
    is seen at the next read on SQLite, and on PostgreSQL as soon as its notice arrives (well
    within the second a held row may live at most)."""
    mine, other = make(db_url), Store(db_url)
    try:
        assert watched(mine)
        app_id, view_id = app_with_view(mine, "shared")
        reads = counting(mine)
        assert state(mine, view_id) == state(mine, view_id) == "instantiated"
        assert reads[0] == 1
        if mine.is_sqlite:      # the count of changes read in shared memory, not asked of SQLite
            assert mine._wal_fd, "the WAL index of %s is not read" % db_url
        set_state(other, app_id, "initialized", 3.0)
        changed = time.monotonic()
        seen = first = state(mine, view_id)
        while seen != "initialized" and time.monotonic() - changed < 0.5:
            time.sleep(0.005)
            seen = state(mine, view_id)
        assert seen == "initialized"
        if mine.is_sqlite:
            # the very next read: told by what it read, not by a clock a loaded machine's
            # scheduling may stretch past 0.1 s
            assert first == "initialized"
        with other.write() as conn:
            repo.delete_app(conn, app_id)
        deadline = time.monotonic() + 0.5
        while state(mine, view_id) is not None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert state(mine, view_id) is None
    finally:
        mine.dispose()
        other.dispose()


def test_no_row_is_held_while_the_notices_are_not_heard(db_url):
    """PostgreSQL: the listener's connection lost (its backend ended), rows are read from the
    database every time until it listens again, by itself."""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite counts changes itself (PRAGMA data_version): no listener to lose")
    import psycopg
    store, other = make(db_url), Store(db_url)
    try:
        assert watched(store)
        app_id, view_id = app_with_view(store, "unheard")
        backend = store._worker._conn.info.backend_pid
        with psycopg.connect(db_url.split("?")[0], autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        deadline = time.monotonic() + 5
        while store._held.watched and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not store._held.watched
        reads = counting(store)
        assert state(store, view_id) == "instantiated"
        set_state(other, app_id, "initialized", 3.0)
        assert state(store, view_id) == "initialized"   # at once: nothing was held
        assert reads[0] == 2
        assert watched(store, timeout=10)               # listening again
        assert store._worker._conn.info.backend_pid != backend
        state(store, view_id)
        state(store, view_id)
        assert reads[0] == 3
    finally:
        store.dispose()
        other.dispose()


def test_rows_held_are_dropped_by_a_change_during_their_read_by_age_and_when_full(monkeypatch):
    held = RowsHeld(watched=True)
    before = held.generation
    held.changed()                      # a commit while the row was being read
    held.put("a", before, {"state": "old"})
    assert held.get("a", held.generation) is None and held.get("a", before) is None
    now = held.generation
    held.put("a", now, {"state": "new"})
    assert held.get("a", now) == {"state": "new"}
    held.changed()
    assert held.get("a", held.generation) is None
    monkeypatch.setattr(RowsHeld, "MAX_AGE", 0.05)
    held.put("b", held.generation, {"state": "aged"})
    assert held.get("b", held.generation) == {"state": "aged"}
    time.sleep(0.06)
    assert held.get("b", held.generation) is None
    monkeypatch.setattr(RowsHeld, "LIMIT", 3)
    held = RowsHeld(watched=True)
    for key in "cde":
        held.put(key, held.generation, {"key": key})
    held.put("f", held.generation, {"key": "f"})    # full: starts again with this one
    assert [held.get(k, held.generation) for k in "cdef"] == [None, None, None, {"key": "f"}]


def test_sqlite_commits_leave_the_log_to_the_stores_own_thread(tmp_path):
    """A commit does not copy the write-ahead log back into the database file (the slowest
    creates were the ones that did); once started, the store's thread does, within a second."""
    import os
    path = tmp_path / "portal.db"
    store = Store("sqlite:///%s" % path)
    try:
        store.migrate()
        import sqlite3
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")     # the schema, in the file
        size = os.path.getsize(path)
        for n in range(300):
            app_with_view(store, "logged-%d" % n)
        assert os.path.getsize(path) == size            # all of it still in the log
        store.start()
        deadline = time.monotonic() + 3
        while os.path.getsize(path) == size and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.path.getsize(path) > size
    finally:
        store.dispose()


def test_a_listener_that_hears_nothing_any_more_is_taken_for_lost(db_url):
    """PostgreSQL: the listener's connection gone silent (its server process stopped, as a
    dropped network would leave it: no error, no notice) is noticed by its own notice not
    coming back; rows are then read every time, and it listens again on a new connection."""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite counts changes itself (PRAGMA data_version): no listener to lose")
    import os
    import signal
    store = make(db_url)
    backend = None
    try:
        assert watched(store)
        app_id, view_id = app_with_view(store, "silent")
        backend = store._worker._conn.info.backend_pid
        os.kill(backend, signal.SIGSTOP)
        lost = time.monotonic()
        while store._held.watched and time.monotonic() - lost < 10:
            time.sleep(0.05)
        assert not store._held.watched, "a silent listener was still trusted after 10 s"
        reads = counting(store)
        state(store, view_id)
        state(store, view_id)
        assert reads[0] == 2                            # nothing held meanwhile
        assert watched(store, timeout=10)               # listening again, elsewhere
        assert store._worker._conn.info.backend_pid != backend
    finally:
        if backend is not None:
            os.kill(backend, signal.SIGCONT)
        store.dispose()


def test_postgresql_connections_send_keepalives(db_url):
    """A database server gone without a word is noticed by TCP in about 20 s, not hours."""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite is a file: no connection to keep alive")
    import os
    import socket
    store = Store(db_url)
    try:
        with store.engine.connect() as conn:
            with socket.socket(fileno=os.dup(conn.connection.driver_connection.fileno())) as sock:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
    finally:
        store.dispose()


def test_a_lookup_answers_from_rows_held_and_sees_another_writers_changes(db_url):
    """Lookup by name and the view it hands out are held while unchanged: a live application
    of that name until its row changes (terminated by another writer: seen), a terminated one
    never (a new one of that name, an insert, sends no notice on PostgreSQL: it is found);
    the view until it is destroyed."""
    from cddlm.application.tenancy import LOCAL_ADMIN
    owner = LOCAL_ADMIN.name
    mine, other = make(db_url), Store(db_url)

    def lookup() -> tuple[str | None, str | None]:
        app = repo.app_by_name(mine, "looked-up", owner)
        view = repo.view_for(mine, app.id, "http://p", 2.0) if app is not None else None
        return (app.state if app else None), (view.id if view else None)

    def until(expected, timeout: float = 0.5):
        deadline = time.monotonic() + timeout      # PostgreSQL: once the notice arrives
        seen = lookup()
        while seen != expected and time.monotonic() < deadline:
            time.sleep(0.005)
            seen = lookup()
        return seen
    try:
        assert watched(mine)
        with other.write() as conn:
            app = repo.create_app(conn, 1.0, id=repo.new_id(), name="looked-up", owner=owner)
            view = repo.new_view(conn, app.id, "http://p", 1.0)
        reads = counting(mine)
        assert lookup() == lookup() == ("instantiated", view.id)
        assert reads[0] == 2                        # the application and its view, once each
        set_state(other, app.id, "terminated", 3.0)
        assert until(("terminated", view.id)) == ("terminated", view.id)
        with other.write() as conn:
            again = repo.create_app(conn, 4.0, id=repo.new_id(), name="looked-up", owner=owner)
            fresh = repo.new_view(conn, again.id, "http://p", 4.0)
        assert lookup() == ("instantiated", fresh.id)       # at once: terminated is never held
        with other.write() as conn:
            repo.delete_app(conn, again.id)
        assert until(("terminated", view.id)) == ("terminated", view.id)
    finally:
        mine.dispose()
        other.dispose()


def test_a_portal_alone_sends_no_notice_until_another_listens(db_url, monkeypatch):
    """PostgreSQL: a portal that hears no other listener marks its write transactions, whose
    changed rows then send no notice (PostgreSQL commits notifying transactions one at a
    time); once a second portal listens, the first notifies again and the second's rows held
    follow the first's changes. Writers that do not listen (here a store not started) always
    notify."""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite counts changes itself (PRAGMA data_version): no notices")
    import psycopg
    from cddlm.application.store import CHANGES_CHANNEL, PING_PREFIX, ChangeWatcher
    monkeypatch.setattr(ChangeWatcher, "PING", 0.1)
    monkeypatch.setattr(ChangeWatcher, "QUIET_AFTER", 0.5)
    mine, writer, second = make(db_url), Store(db_url), None

    def until(what, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while not what() and time.monotonic() < deadline:
            time.sleep(0.01)
        return what()

    with psycopg.connect(db_url.split("?")[0], autocommit=True) as spy:
        spy.execute("LISTEN %s" % CHANGES_CHANNEL)

        def changes_until_writer() -> list[str]:
            """Change notices (not pings) up to the one of ``writer``'s change to a view,
            which comes after any sent before it (notices arrive in commit order)."""
            with writer.write() as conn:
                repo.set_view_termination(conn, marker_view, 100.0)
            heard = []
            for notice in spy.notifies(timeout=5.0):
                if not notice.payload.startswith(PING_PREFIX):
                    heard.append(notice.payload)
                    if notice.payload == "views":
                        break
            return heard
        try:
            assert watched(mine)
            app_id, view_id = app_with_view(mine, "alone")
            _, marker_view = app_with_view(writer, "marker")
            assert until(mine._alone)
            set_state(mine, app_id, "initialized", 3.0)     # no notice
            assert changes_until_writer() == ["views"]      # the writer's only
            second = make(db_url)
            # (within a PING or two: 5 s allow for a loaded machine; only a failure waits)
            assert watched(second) and until(lambda: not mine._alone())
            assert state(second, view_id) == state(second, view_id) == "initialized"   # held
            set_state(mine, app_id, "running", 4.0)
            for notice in spy.notifies(timeout=5.0):
                if notice.payload == "applications":
                    break
            else:
                raise AssertionError("no notice of the change once another portal listened")
            assert until(lambda: state(second, view_id) == "running", 0.5)
        finally:
            for store in (mine, writer, second):
                if store is not None:
                    store.dispose()


def test_portals_on_other_schemas_of_the_database_leave_a_portal_alone(monkeypatch):
    """PostgreSQL's notices are per database: a portal whose store is one schema heard the pings
    of every portal on the database's other schemas, other stores, and was never alone (so its
    writes kept notifying, and it re-read rows for changes that were not its store's). Each is
    alone now; a second portal on its own schema still ends that."""
    from tests.conftest import pg_schema_url, postgres_available
    if not postgres_available():
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 (database test, trust auth)")
    from cddlm.application.store import ChangeWatcher
    monkeypatch.setattr(ChangeWatcher, "PING", 0.1)
    monkeypatch.setattr(ChangeWatcher, "QUIET_AFTER", 0.5)

    def until(what, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while not what() and time.monotonic() < deadline:
            time.sleep(0.01)
        return what()

    with pg_schema_url() as one, pg_schema_url() as two:
        stores = [make(one), make(two)]
        try:
            assert all(watched(s) for s in stores)
            assert until(lambda: all(s._alone() for s in stores)), [s._alone() for s in stores]
            stores.append(make(one))        # one's second portal: one is not alone, two still is
            assert watched(stores[2]) and until(lambda: not stores[0]._alone())
            assert stores[1]._alone()
        finally:
            for s in stores:
                s.dispose()
