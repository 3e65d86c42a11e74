"""The store on SQLite and on the machine's PostgreSQL: schema migrations, atomic lifecycle
writes, and the work queue's leases."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import func, inspect, select, text

from cddlm.application import repository as repo
from cddlm.application.enactment import queue
from cddlm.application.store import Store, normalise_url
from cddlm.application.tables import applications, events, history, metadata, work
from cddlm.errors import BadArgument


def make(db_url) -> Store:
    store = Store(db_url)
    store.migrate()
    return store


def new_app(store, name=None):
    with store.write() as conn:
        return repo.create_app(conn, 1.0, id=repo.new_id(), name=name)


def test_migrations_create_every_table_and_are_idempotent(db_url):
    store = make(db_url)
    store.migrate()   # a second run changes nothing
    names = set(inspect(store.engine).get_table_names())
    assert set(metadata.tables) <= names and "alembic_version" in names
    store.dispose()


def test_state_history_and_event_commit_together_or_not_at_all(db_url):
    store = make(db_url)
    app = new_app(store, "atomic")
    with pytest.raises(RuntimeError):
        with store.write() as conn:
            repo.record_state(conn, repo.get_app(conn, app.id), "initialized", 2.0)
            raise RuntimeError("crash in the middle")
    with store.read() as conn:
        assert repo.get_app(conn, app.id).state == "instantiated"
        assert [h[1] for h in repo.get_history(conn, app.id)] == ["instantiated"]
        assert conn.execute(select(func.count()).select_from(events)
                            .where(events.c.producer == app.id)).scalar() == 1
    with store.write() as conn:
        repo.record_state(conn, repo.get_app(conn, app.id), "initialized", 2.0)
    with store.read() as conn:
        seqs = [r[0] for r in conn.execute(select(events.c.seq).where(events.c.producer == app.id)
                                           .order_by(events.c.seq))]
        assert seqs == [1, 2] and [h[0] for h in repo.get_history(conn, app.id)] == [1, 2]
    store.dispose()


def test_names_are_unique_among_live_applications(db_url):
    from sqlalchemy.exc import IntegrityError
    store = make(db_url)
    first = new_app(store, "twin")
    with pytest.raises(IntegrityError):
        new_app(store, "twin")
    with store.write() as conn:
        repo.record_state(conn, repo.get_app(conn, first.id), "terminated", 2.0)
    second = new_app(store, "twin")        # a terminated application holds its name no more
    with pytest.raises(IntegrityError):
        new_app(store, "twin")
    with store.read() as conn:
        assert repo.app_by_name(conn, "twin").id == second.id
    store.dispose()


def test_writes_not_waited_for_are_seen_counted_and_refused_in_their_transaction(db_url):
    """On PostgreSQL a write transaction runs in the driver's pipeline: INSERTs go out with
    the next statement waited for, as do UPDATEs marked ``not_waited``. A later read sees
    them, an UPDATE waited for has its own rowcount, and an INSERT refused at the very end
    of the transaction (nothing waited for after it) fails the transaction as SQLAlchemy's
    IntegrityError, leaving nothing written."""
    from sqlalchemy.exc import IntegrityError
    store = make(db_url)
    first = new_app(store, "busy")
    with store.write() as conn:
        app = repo.create_app(conn, 2.0, id=repo.new_id(), name="other")
        view = repo.new_view(conn, app.id, "http://p", 2.0)
        assert repo.view_for(conn, app.id, "http://p", 2.0).id == view.id   # read back at once
        repo.update_app(conn, app.id, desired="running")        # not waited for
        assert repo.set_view_termination(conn, view.id, 5.0) == 1     # waited for: counted
        assert repo.set_view_termination(conn, "no-such-view", 5.0) == 0
        assert repo.get_app(conn, app.id).desired == "running"
    with pytest.raises(IntegrityError):
        with store.write() as conn:
            repo.add_event(conn, first.id, repo.LIFECYCLE_TOPIC, 9, {}, 3.0)
            conn.execute(applications.insert(), {"id": "urn:uuid:twin", "name": "busy",
                                                 "state": "instantiated", "desired": "instantiated",
                                                 "generation": 0, "created": 3.0, "event_seq": 1})
    with store.read() as conn:      # neither the event nor the application
        assert conn.execute(select(func.count()).select_from(events)
                            .where(events.c.seq == 9)).scalar() == 0
        assert repo.get_app(conn, "urn:uuid:twin") is None
        assert repo.get_app(conn, app.id).desired == "running"
    new_app(store, "after")     # the store goes on
    store.dispose()


def test_statements_sent_past_sqlalchemy_read_and_write_as_through_it(db_url):
    """``send`` and ``rows`` (on PostgreSQL the driver directly, in the write transaction's
    pipeline): a column's default is filled in as SQLAlchemy fills it, a row read is the row
    SQLAlchemy reads, a statement marked ``not_waited`` changes the rows it names only, and a
    refused INSERT fails the transaction at the next read, as SQLAlchemy's IntegrityError,
    with nothing of it written."""
    from sqlalchemy import insert
    from sqlalchemy.exc import IntegrityError
    from cddlm.application.store import rows, send
    store = make(db_url)
    app, other = new_app(store, "sent"), new_app(store, "untouched")
    with store.write() as conn:
        send(conn, insert(work), {"app_id": app.id, "path": "a", "action": "deploy",
                                  "generation": 1, "not_before": 1.5, "created": 1.5})
        locked = repo.lock_app(conn, app.id)
        assert rows(conn, select(work.c.path, work.c.attempts, work.c.not_before)
                    .where(work.c.app_id == app.id), {}) == [("a", 0, 1.5)]
        repo.update_app(conn, app.id, desired="running", termination_info={"normal": True})
    with store.read() as conn:
        through_sqlalchemy = conn.execute(repo._LOCK_APP, {"app_id": app.id}).first()._mapping
        assert {k: getattr(locked, k) for k in repo.App.SIMPLE if k != "desired"} == \
            {k: through_sqlalchemy.get(k) for k in repo.App.SIMPLE if k != "desired"}
        assert repo.get_app(conn, app.id).termination_info == {"normal": True}
        assert repo.get_app(conn, app.id).desired == "running"
        assert repo.get_app(conn, other.id).desired == "instantiated"
    with pytest.raises(IntegrityError):
        with store.write() as conn:
            repo.add_event(conn, app.id, repo.LIFECYCLE_TOPIC, 9, {}, 3.0)
            send(conn, insert(work), {"app_id": "urn:uuid:nobody", "path": "a",
                                      "action": "deploy", "generation": 1, "not_before": 1.0,
                                      "created": 1.0})
            rows(conn, select(work.c.path), {})
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(events)
                            .where(events.c.seq == 9)).scalar() == 0
    store.dispose()


def test_the_prebuilt_statements_have_a_shape_the_driver_takes(db_url):
    """``store._shape`` reads SQLAlchemy's compiled statements through parts of SQLAlchemy that
    are its own: should a release change them, the store falls back to SQLAlchemy (right, but
    slower) and this test says so. Every statement ``send`` and ``rows`` are given in
    production compiles to a shape."""
    from cddlm.application import audit, store as st
    from cddlm.application.enactment import queue
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite statements go through SQLAlchemy (no pipeline)")
    dialect = make(db_url).engine.dialect
    statements = {"insert app": (repo._INSERT_APP, None), "insert event": (repo._INSERT_EVENT, None),
                  "lock app": (repo._LOCK_APP, ("app_id",)), "states": (repo._STATES, ("app_id",)),
                  "queued": (queue._QUEUED, ("app_id",)), "audit": (audit._INSERT, None)}
    for what, (statement, names) in statements.items():
        names = names or tuple(c.key for c in statement.table.columns)     # (an INSERT's)
        assert st._shape(dialect, statement, names) is not None, what


def test_upgrade_from_the_first_schema_keeps_the_data(db_url):
    """A portal database made by revision 0001 upgrades in place (views gain a termination
    time, the name constraint becomes the live-name index)."""
    from tests.conftest import schema_at
    with schema_at(db_url, "0001") as (store, conn):
        conn.execute(text("INSERT INTO applications (id, name, state, desired, generation, "
                          "created, event_seq) VALUES ('urn:uuid:old', 'old', 'terminated', "
                          "'terminated', 0, 1.0, 1)"))
        conn.execute(text("INSERT INTO views (id, app_id, portal, created) "
                          "VALUES ('v1', 'urn:uuid:old', 'http://p', 1.0)"))
    store.migrate()
    again = new_app(store, "old")
    with store.read() as conn:
        assert repo.get_view(conn, "v1").app_id == "urn:uuid:old"
        assert repo.app_by_name(conn, "old").id == again.id
    from sqlalchemy.exc import IntegrityError
    with pytest.raises(IntegrityError):   # foreign keys are enforced again after migrating
        with store.write() as conn:
            repo.new_view(conn, "urn:uuid:nobody", "http://p", 2.0)
    store.dispose()


def test_claims_lease_and_expire(db_url):
    store = make(db_url)
    app = new_app(store)
    pg = not store.is_sqlite
    with store.write() as conn:
        queue.add(conn, app.id, [("a", "deploy"), ("b", "deploy"), ("a", "start")], 1, 10.0)
        queue.add(conn, app.id, [("a", "deploy")], 1, 10.0)   # duplicate: ignored
        assert conn.execute(select(func.count()).select_from(work)).scalar() == 3
    with store.write() as conn:
        mine = queue.claim(conn, "engine-1", 10.0, 30.0, 10, pg)
    # one item per component at a time
    assert sorted((i.path, i.action) for i in mine) == [("a", "deploy"), ("b", "deploy")]
    with store.write() as conn:
        assert queue.claim(conn, "engine-2", 11.0, 30.0, 10, pg) == []
    with store.write() as conn:   # engine-1's leases expired: engine-2 takes them over
        theirs = queue.claim(conn, "engine-2", 50.0, 30.0, 10, pg)
        assert {i.id for i in theirs} == {i.id for i in mine}
        assert all(i.attempts == 2 for i in theirs)
        assert not queue.extend_many(conn, [mine[0].id], "engine-1", 99.0)   # engine-1 lost it
        queue.finish(conn, theirs[0].id)
    # recording outcomes: only by the holder of every item (the loser's record must not
    # commit: the caller raises; the winner's removes them)
    with store.write() as conn:
        assert not queue.finish_held(conn, [i.id for i in theirs[1:]], "engine-1")
    with store.write() as conn:
        assert conn.execute(select(func.count()).select_from(work)).scalar() == 2
        assert queue.finish_held(conn, [i.id for i in theirs[1:]], "engine-2")
        assert conn.execute(select(func.count()).select_from(work)).scalar() == 1
    store.dispose()


def test_an_idle_worker_learns_when_the_next_item_may_be_claimed_in_one_read(db_url):
    """``next_ready``: None on an empty queue; an unclaimed item when it is due; a leased one
    when its lease runs out (or when due, if later)."""
    store = make(db_url)
    app = new_app(store)
    pg = not store.is_sqlite
    with store.single() as conn:
        assert queue.next_ready(conn) is None
    with store.write() as conn:
        queue.add(conn, app.id, [("a", "deploy")], 1, 10.0)
    with store.single() as conn:
        assert queue.next_ready(conn) == 10.0
    with store.write() as conn:
        assert len(queue.claim(conn, "engine-1", 10.0, 30.0, 10, pg)) == 1
    with store.single() as conn:
        assert queue.next_ready(conn) == 40.0       # its lease's end
    with store.write() as conn:
        queue.add(conn, app.id, [("b", "deploy")], 1, 25.0)
    with store.single() as conn:
        assert queue.next_ready(conn) == 25.0
    store.dispose()


def test_concurrent_claimers_never_share_an_item(db_url):
    store = make(db_url)
    app = new_app(store)
    with store.write() as conn:
        queue.add(conn, app.id, [("c%d" % i, "deploy") for i in range(60)], 1, 0.0)
    claimed: list[int] = []
    lock = threading.Lock()

    def worker(name):
        while True:
            with store.write() as conn:
                items = queue.claim(conn, name, 1.0, 30.0, 3, not store.is_sqlite)
            if not items:
                return
            with lock:
                claimed.extend(i.id for i in items)

    threads = [threading.Thread(target=worker, args=("w%d" % n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == 60 and len(set(claimed)) == 60
    store.dispose()


def test_dead_engines_release_their_leases(db_url):
    store = make(db_url)
    app = new_app(store)
    with store.write() as conn:
        queue.register_engine(conn, "dead", None, 0.0)
        queue.register_engine(conn, "alive", None, 0.0)
        queue.add(conn, app.id, [("a", "deploy")], 1, 0.0)
        queue.claim(conn, "dead", 1.0, 1000.0, 1, not store.is_sqlite)
        queue.heartbeat(conn, "alive", 100.0)
        assert queue.release_dead(conn, 100.0, 15.0, False, "alive") == 1
        assert [i.path for i in queue.claim(conn, "alive", 100.0, 30.0, 1, not store.is_sqlite)] == ["a"]
    store.dispose()


def test_destroying_an_application_removes_its_records(db_url):
    store = make(db_url)
    app = new_app(store)
    with store.write() as conn:
        repo.new_view(conn, app.id, "http://p", 1.0)
        queue.add(conn, app.id, [("a", "deploy")], 1, 1.0)
        repo.delete_app(conn, app.id)
    with store.read() as conn:
        assert repo.get_app(conn, app.id) is None
        assert conn.execute(select(func.count()).select_from(history)).scalar() == 0
        assert conn.execute(select(func.count()).select_from(work)).scalar() == 0
    store.dispose()


def test_url_normalisation():
    assert normalise_url("postgresql://u@h/db").startswith("postgresql+psycopg://")
    assert normalise_url("postgres://u@h/db").startswith("postgresql+psycopg://")
    with pytest.raises(BadArgument):
        normalise_url("mysql://x")


def test_concurrent_creates_with_one_client_token_make_one_application(db_url, tmp_path):
    from concurrent.futures import ThreadPoolExecutor
    from cddlm.application.options import CLIENT_TOKEN, Option
    from cddlm.application.service import Service
    from cddlm.config import Settings
    store = make(db_url)
    service = Service(store, Settings(state_dir=str(tmp_path)))
    token = [Option(CLIENT_TOKEN, True, "string", "same-token", "same-token")]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(lambda _: service.create("once", None, token, "http://p")[0].id,
                                range(50)))
    assert len(set(results)) == 1
    with store.read() as conn:
        assert repo.count_by_state(conn) == {"instantiated": 1}
    store.dispose()


def test_the_hot_read_through_the_driver_answers_and_survives_a_lost_connection(db_url):
    """``Store.first`` (the application a view names, read through the driver directly) gives
    what SQLAlchemy gives; a connection the database dropped is ``StoreUnavailable`` once, then
    a new connection answers."""
    from cddlm.errors import StoreUnavailable
    store = make(db_url)
    try:
        app_id = new_app(store, "hot").id
        with store.write() as conn:
            view = repo.new_view(conn, app_id, "http://p", 1.0)
        found = repo.app_by_view(store, view.id, 2.0)
        with store.read() as conn:
            expected = repo.get_app(conn, app_id)
        assert found.id == app_id and found.name == "hot" and found.state == expected.state
        assert found.created == expected.created and found.view_termination_time is None
        assert repo.app_by_view(store, "no-such-view", 2.0) is None
        if store.is_sqlite:
            return
        import psycopg
        backend = store._local.conn.connection.dbapi_connection.info.backend_pid
        with psycopg.connect(db_url.split("?")[0], autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        with pytest.raises(StoreUnavailable):
            repo.app_by_view(store, view.id, 2.0)
        assert repo.app_by_view(store, view.id, 2.0).id == app_id
    finally:
        store.dispose()


def test_a_light_lock_reads_the_state_and_refuses_the_component_tree(db_url):
    """``lock_app(light=True)`` (a record of outcomes) has every small column of the full read
    and refuses, rather than answers empty, a column it did not read."""
    store = make(db_url)
    try:
        app_id = new_app(store, "light").id
        with store.write() as conn:
            conn.execute(applications.update().where(applications.c.id == app_id)
                         .values(deployment='{"name": "root"}', properties='{"a": "1"}'))
        with store.write() as conn:
            full = repo.lock_app(conn, app_id)
            light = repo.lock_app(conn, app_id, light=True)
        for key in repo.App.SIMPLE[:-1]:
            assert getattr(light, key) == getattr(full, key), key
        assert full.deployment == {"name": "root"} and full.properties == {"a": "1"}
        for heavy in repo.HEAVY:
            with pytest.raises(LookupError):
                getattr(light, heavy)
        assert light.termination_info == full.termination_info
    finally:
        store.dispose()


def test_the_large_columns_of_an_application_come_last_in_its_row_and_survive_the_move(db_url):
    """Migration 0006 (SQLite): the descriptor, component tree, placement, properties and
    options move to the end of the row (a state read no longer walks their overflow pages);
    every value, every index and the application's children are kept, and it can be undone."""
    from alembic import command
    from alembic.config import Config
    from cddlm.application.store import MIGRATIONS
    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL keeps large values out of the row: 0006 changes nothing there")
    store = Store(db_url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    big = '{"name": "root", "x": "%s"}' % ("y" * 100000)
    with store.write() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0005")
        conn.execute(text("INSERT INTO applications (id, name, state, desired, generation, "
                          "created, event_seq, deployment, descriptor, owner) VALUES "
                          "('urn:uuid:big', 'big', 'running', 'running', 3, 1.0, 7, :big, "
                          "'<d/>', 'ann')"), {"big": big})
        conn.execute(text("INSERT INTO views (id, app_id, portal, created) "
                          "VALUES ('v1', 'urn:uuid:big', 'http://p', 1.0)"))
    store.migrate()

    def layout() -> tuple[list[str], set[str]]:
        with store.read() as conn:
            columns = [r[1] for r in conn.exec_driver_sql("PRAGMA table_info(applications)")]
            indexes = {r[1] for r in conn.exec_driver_sql("PRAGMA index_list(applications)")}
        return columns, indexes
    columns, indexes = layout()
    assert set(columns[-5:]) == {"descriptor"} | repo.HEAVY
    assert "ix_applications_live_owner_name" in indexes
    app = repo.app_by_view(store, "v1", 2.0, light=True)
    assert (app.id, app.state, app.generation, app.event_seq, app.owner) == (
        "urn:uuid:big", "running", 3, 7, "ann")
    with store.read() as conn:
        assert repo.get_app(conn, "urn:uuid:big").deployment["x"] == "y" * 100000
    with pytest.raises(Exception):    # the live name is unique per owner again
        with store.write() as conn:
            repo.create_app(conn, 2.0, id=repo.new_id(), name="big", owner="ann")
    with store.engine.connect() as conn:      # as Store.migrate does: foreign keys off
        conn.execution_options(cddlm_single=True).exec_driver_sql("PRAGMA foreign_keys=OFF")
        conn.commit()
        conn.execution_options(cddlm_single=False, cddlm_write=True)
        with conn.begin():
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0005")
        conn.execution_options(cddlm_single=True).exec_driver_sql("PRAGMA foreign_keys=ON")
        conn.commit()
    columns_before, indexes_before = layout()
    assert columns_before.index("deployment") < columns_before.index("owner")
    assert indexes_before == indexes
    assert repo.app_by_view(store, "v1", 2.0).deployment["x"] == "y" * 100000
    store.dispose()


def test_a_pooled_connection_is_pinged_only_after_resting(db_url, monkeypatch):
    """PostgreSQL: a connection given back less than ``PING_IDLE`` ago is handed out without a
    ping (a round trip of every write), one that rested longer is pinged, and one whose
    server end went meanwhile is replaced, unseen by the write."""
    if db_url.startswith("sqlite"):
        pytest.skip("SQLite's connections are files, not pinged")
    import psycopg
    from cddlm.application import store as store_module
    store = make(db_url)
    pings = []
    ping = store.engine.dialect.do_ping
    monkeypatch.setattr(store.engine.dialect, "do_ping", lambda c: pings.append(c) or ping(c))
    try:
        new_app(store, "first")
        new_app(store, "at-once")
        assert pings == []                       # handed back a moment ago: not pinged
        with store.write() as conn:
            backend = conn.connection.dbapi_connection.info.backend_pid
        monkeypatch.setattr(store_module, "PING_IDLE", 0.0)   # every connection rested enough
        with psycopg.connect(db_url.split("?")[0], autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        assert new_app(store, "after-its-end").name == "after-its-end"
        assert len(pings) >= 1
    finally:
        store.dispose()
