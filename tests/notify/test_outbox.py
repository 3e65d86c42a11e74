"""The delivery queue on SQLite and PostgreSQL: fan-out, claims under leases, outcomes,
backoff, the retry horizon, expiry and pruning."""

from __future__ import annotations

import json
import threading
import time

import pytest
from lxml import etree
from sqlalchemy import func, select, text, update

from cddlm import ns
from cddlm.application import repository as repo
from cddlm.application.repository import View
from cddlm.application.store import Store
from cddlm.application.tables import deliveries, events, subscriptions
from cddlm.config import Settings
from cddlm.notify import outbox, parse, records, topics
from cddlm.notify.messages import payload
from cddlm.xpathsafe import XPathPool

SETTINGS = Settings(delivery_backoff_initial=1.0, delivery_backoff_max=8.0, delivery_retry_horizon=100.0)
PORTAL = "http://127.0.0.1:8080"


@pytest.fixture
def store(db_url):
    s = Store(db_url)
    s.migrate()
    yield s
    s.dispose()


def request(address="http://127.0.0.1:9/c", kind=topics.APPLICATION, content=None):
    holder = None
    if content:
        holder = etree.fromstring('<wsnt:Filter xmlns:wsnt="%s" xmlns:api="%s"><wsnt:MessageContent '
                                  'Dialect="%s">%s</wsnt:MessageContent></wsnt:Filter>'
                                  % (ns.WSNT, ns.API, ns.XPATH_DIALECT, content))
    from cddlm import wsa
    consumer = wsa.Reference(address)
    return parse.SubscribeRequest(consumer, parse.consumer_xml(consumer),
                                  topics.parse_filter(holder, kind), None)


def new_app(store, now=1.0):
    with store.write() as conn:
        app = repo.create_app(conn, now, id=repo.new_id())
        return app.id, repo.new_view(conn, app.id, PORTAL, now)


def advance(store, app_id, state, now):
    with store.write() as conn:
        repo.record_state(conn, repo.get_app(conn, app_id), state, now)


def subscribe(store, app_id, view: View | None, now, **kw) -> str:
    with store.write() as conn:
        start = records.lock_sequence(conn, app_id) if view is not None else 0
        return records.insert_subscription(conn, request(**kw), app_id if view else topics.PORTAL,
                                           view.id if view else None, PORTAL, start, now)


@pytest.fixture(scope="module")
def pool():
    p = XPathPool(1, seconds=2.0)
    yield p
    p.close()


def matched(conn, now, pool) -> dict:
    """The filters of the next fan-out evaluated beforehand, as the dispatcher does."""
    out = {}
    for pair in outbox.filter_pairs(conn, now, 1000):
        filters = [tuple(f) for f in json.loads(pair.message_filter)]
        ok, = pool.filter(filters, [etree.tostring(payload(pair.event.topic, pair.event.data))], 2.0)
        out[(pair.sub_id, pair.event.id)] = ok
    return out


def fan_out_in(conn, store, now: float, matched_pairs) -> int:
    """``outbox.fan_out`` in ``conn``, waiting (on PostgreSQL) for the fan-out lock, which is
    the database's: another test's portal in another schema of the database may hold it, and
    ``fan_out`` would then leave this schema's events for a later round."""
    if not store.is_sqlite:
        conn.execute(text("SELECT pg_advisory_xact_lock(%d)" % outbox.FAN_OUT_LOCK))
    return outbox.fan_out(conn, now, 1000, not store.is_sqlite, matched_pairs)


@pytest.fixture
def fan_out(pool):
    def run(store, now=10.0):
        with store.read() as conn:
            results = matched(conn, now, pool)
        with store.write() as conn:
            return fan_out_in(conn, store, now, results)
    return run


def queued(store, sub_id) -> list[int]:
    """The sequences queued for a subscription, in order."""
    with store.read() as conn:
        return [r[0] for r in conn.execute(
            select(events.c.seq).join(deliveries, deliveries.c.event_id == events.c.id)
            .where(deliveries.c.subscription_id == sub_id).order_by(events.c.id))]


def claim(store, owner="p1", now=10.0, limit=10, batch=100, take=lambda a, o, w: True):
    with store.write() as conn:
        return outbox.claim(conn, owner, now, 30.0, limit, batch, not store.is_sqlite, take)


def test_fan_out_gives_each_subscription_what_happens_after_it(store, fan_out):
    app, view = new_app(store)                                  # event 1: instantiated
    with store.write() as conn:                                 # the create option: from sequence 1
        early = records.insert_subscription(conn, request(), app, view.id, PORTAL, 0, 1.0)
    advance(store, app, "initialized", 2.0)                     # event 2
    late = subscribe(store, app, view, 3.0)                     # starts after sequence 2
    filtered = subscribe(store, app, view, 3.0, content="api:state = 'terminated'")
    advance(store, app, "running", 4.0)
    advance(store, app, "terminated", 5.0)
    other, other_view = new_app(store)
    assert fan_out(store) == 5 and fan_out(store) == 0          # each event once
    assert queued(store, early) == [1, 2, 3, 4]
    assert queued(store, late) == [3, 4]
    assert queued(store, filtered) == [4]
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(events)
                            .where(events.c.fanned_out.is_(False))).scalar() == 0
        due = dict(conn.execute(select(subscriptions.c.id, subscriptions.c.due)).all())
    assert due[early] == 10.0 and due[filtered] == 10.0


def test_portal_subscriptions_receive_creations_and_paused_ones_keep_queueing(store, fan_out):
    watcher = subscribe(store, topics.PORTAL, None, 1.0, kind=topics.PORTAL)
    with store.write() as conn:
        records.change(conn, watcher, paused=True)
    with store.write() as conn:
        repo.add_event(conn, topics.PORTAL, topics.CREATED, 0,
                       {"ResourceId": "urn:uuid:a", "view": "v", "portal": PORTAL, "timestamp": 2.0}, 2.0)
        repo.add_event(conn, topics.PORTAL, topics.CREATED, 0,       # long before it subscribed
                       {"ResourceId": "urn:uuid:b", "view": "v", "portal": PORTAL, "timestamp": 1.0},
                       1.0 - outbox.PORTAL_SLACK - 1)
    fan_out(store)
    with store.read() as conn:
        assert conn.execute(select(func.count()).select_from(deliveries)).scalar() == 1
    assert claim(store) == []                                    # paused: not delivered
    with store.write() as conn:
        records.change(conn, watcher, paused=False)
    (batch,) = claim(store)
    with store.read() as conn:
        loaded = outbox.load_events(conn, list(batch.events))
    assert [loaded[i].data["ResourceId"] for i in batch.events] == ["urn:uuid:a"]


def test_failed_and_expired_subscriptions_get_nothing(store, fan_out):
    app, view = new_app(store)
    failed = subscribe(store, app, view, 1.5)
    expired = subscribe(store, app, view, 1.5)
    with store.write() as conn:
        records.change(conn, failed, status=records.FAILED)
        records.change(conn, expired, termination_time=5.0)
    advance(store, app, "initialized", 2.0)
    fan_out(store, now=10.0)
    assert queued(store, failed) == [] and queued(store, expired) == []


def test_claims_are_ordered_batched_leased_and_expire(store, fan_out):
    app, view = new_app(store)
    with store.write() as conn:
        sub = records.insert_subscription(conn, request(), app, view.id, PORTAL, 0, 1.0)
    for i, state in enumerate(("initialized", "running", "terminated")):
        advance(store, app, state, 2.0 + i)
    fan_out(store)
    (batch,) = claim(store, batch=3)
    with store.read() as conn:
        loaded = outbox.load_events(conn, list(batch.events))
    assert [loaded[i].data["sequence"] for i in batch.events] == [1, 2, 3] and batch.sub_id == sub
    assert claim(store, owner="p2", now=11.0) == []              # leased by p1
    assert claim(store, owner="p2", now=11.0 + 30.0, take=lambda a, o, w: False) == []   # host busy
    (again,) = claim(store, owner="p2", now=11.0 + 30.0, batch=3)   # the lease ran out
    assert again.events == batch.events
    with store.write() as conn:
        outbox.record(conn, "p2", 45.0, [outbox.Outcome(again, 41.0, None)], SETTINGS)
        outbox.record(conn, "p1", 45.0, [outbox.Outcome(batch, 41.0, None)], SETTINGS)  # lost lease
    assert queued(store, sub) == [4]
    with store.read() as conn:
        row = records.get(conn, sub)
    assert (row.owner, row.due, row.delivered, row.undelivered) == (None, 45.0, 3, 1)
    (rest,) = claim(store, now=46.0)
    with store.write() as conn:
        outbox.record(conn, "p1", 47.0, [outbox.Outcome(rest, 46.0, None)], SETTINGS)
        row = records.get(conn, sub)
    assert (row.due, row.delivered, row.last_delivered) == (None, 4, 47.0)


def test_failures_back_off_then_fail_the_subscription_and_drop_its_queue(store, fan_out):
    app, view = new_app(store)
    with store.write() as conn:
        sub = records.insert_subscription(conn, request(), app, view.id, PORTAL, 0, 1.0)
    advance(store, app, "initialized", 2.0)
    fan_out(store)
    now, delays = 10.0, []
    while True:
        (batch,) = claim(store, now=now)
        with store.write() as conn:
            outbox.record(conn, "p1", now + 0.5, [outbox.Outcome(batch, now, "refused")], SETTINGS)
            row = records.get(conn, sub)
        if row.status == records.FAILED:
            break
        delays.append(row.due - (now + 0.5))
        assert claim(store, now=row.due - 0.01) == []            # not before its time
        now = row.due
    for i, delay in enumerate(delays):                           # doubling, capped, jittered down
        nominal = min(SETTINGS.delivery_backoff_max, SETTINGS.delivery_backoff_initial * 2 ** i)
        assert 0.8 * nominal - 1e-6 <= delay <= nominal + 1e-6, (i, delay)
    assert now + 0.5 - 10.0 >= SETTINGS.delivery_retry_horizon
    assert row.undelivered == 0 and row.failing_since == 10.0 and "refused" in row.failure
    assert row.due is None and claim(store, now=now + 100) == []
    advance(store, app, "running", now)                         # failed: nothing more queued
    fan_out(store, now=now + 1)
    assert queued(store, sub) == []


def test_concurrent_claimers_never_share_a_subscription(store, fan_out):
    subs = []
    for _ in range(12):
        app, view = new_app(store)
        with store.write() as conn:
            subs.append(records.insert_subscription(conn, request(), app, view.id, PORTAL, 0, 1.0))
    fan_out(store)
    got: dict[str, list[str]] = {}
    barrier = threading.Barrier(4)

    lock = threading.Lock()
    deadline = time.monotonic() + 20

    def worker(name):
        barrier.wait()
        mine = []
        # a claimer skips rows another one has locked, so a round may find nothing while the
        # others hold them: claim until every subscription is taken (or the deadline passes)
        while time.monotonic() < deadline:
            with lock:
                if sum(len(m) for m in got.values()) >= len(subs):
                    break
            mine += [b.sub_id for b in claim(store, owner=name, limit=2)]
            with lock:
                got[name] = list(mine)

    threads = [threading.Thread(target=worker, args=("p%d" % i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed = [s for mine in got.values() for s in mine]
    assert sorted(claimed) == sorted(subs)                       # each exactly once


def test_ending_expiring_and_pruning(store, fan_out):
    app, view = new_app(store)
    with store.write() as conn:
        ending = records.insert_subscription(conn, request(), app, view.id, PORTAL, 0, 1.0)
    short = subscribe(store, app, view, 1.0)
    with store.write() as conn:
        records.change(conn, short, termination_time=20.0)
    advance(store, app, "terminated", 2.0)
    with store.write() as conn:                                 # destroyed before fan-out
        records.producer_gone(conn, app)
        repo.delete_app(conn, app)
        assert outbox.expire(conn, 10.0) == 0                    # its last events are not out yet
    fan_out(store)
    assert queued(store, ending) == [1, 2]                       # ended, yet it gets them
    with store.write() as conn:
        assert outbox.expire(conn, 21.0) == 1                    # the short one expired
    (batch,) = claim(store, now=21.0)
    with store.write() as conn:
        outbox.record(conn, "p1", 22.0, [outbox.Outcome(batch, 21.0, None)], SETTINGS)
        assert outbox.expire(conn, 22.0) == 1                    # drained: gone
        assert records.get(conn, ending) is None
    keep, _ = new_app(store, now=1.0)
    advance(store, keep, "initialized", 2.0)
    fan_out(store)
    with store.write() as conn:
        assert outbox.prune_events(conn, 5000.0, 3600.0) == 3    # keep's first, and the dead app's
        left = conn.execute(select(events.c.producer, events.c.seq)).all()
    assert left == [(keep, 2)]                                   # the newest of a live producer



def test_the_maintenance_pass_learns_what_it_has_to_do_in_one_read(store):
    app, view = new_app(store)
    sub = subscribe(store, app, view, 1.0)
    with store.write() as conn:
        records.change(conn, sub, termination_time=20.0)
    with store.read() as conn:
        assert outbox.maintenance(conn, 10.0, "p1")[::2] == (False, False)
        assert outbox.maintenance(conn, 21.0, "p1").expirable is True     # past its time
    with store.write() as conn:                 # leased by a portal with no engine row
        conn.execute(update(subscriptions).where(subscriptions.c.id == sub)
                     .values(owner="gone", lease_expires=100.0))
    with store.read() as conn:
        assert outbox.maintenance(conn, 10.0, "p1").orphaned is True
        assert outbox.maintenance(conn, 10.0, "gone").orphaned is False   # its own lease

def test_pruning_in_steps_looks_only_at_its_window(store, fan_out):
    """A sweep prunes a range of event ids at a time (delivery._prune_step): what lies
    outside the window stays for a later step, and the steps together prune what one pass
    would: every event but each live producer's newest."""
    first, _ = new_app(store, now=1.0)
    advance(store, first, "initialized", 2.0)
    advance(store, first, "running", 2.0)
    second, _ = new_app(store, now=1.0)
    advance(store, second, "initialized", 2.0)
    advance(store, second, "running", 2.0)
    fan_out(store)
    with store.write() as conn:
        order = [tuple(r) for r in conn.execute(select(events.c.id, events.c.producer)
                                                .order_by(events.c.id))]
        assert [p for _, p in order] == [first] * 3 + [second] * 3
        low, high = outbox.event_ids(conn)
        assert (low, high) == (order[0][0], order[-1][0])
        # the window of the first application's two older events: only they go
        assert outbox.prune_events(conn, 5000.0, 3600.0, low - 1, order[1][0]) == 2
        left = [i for i, in conn.execute(select(events.c.id).order_by(events.c.id))]
        assert left == [i for i, _ in order[2:]]
        # the rest of the sweep, one id a step
        for upto in range(order[2][0], high + 1):
            outbox.prune_events(conn, 5000.0, 3600.0, upto - 1, upto)
        left = [tuple(r) for r in conn.execute(select(events.c.id, events.c.producer)
                                               .order_by(events.c.id))]
        assert left == [order[2], order[5]]          # each producer's newest
        assert outbox.event_ids(conn) == (order[2][0], order[5][0])


@pytest.fixture
def pg_store():
    """PostgreSQL only: SQLite serialises every writer, the advisory lock is PostgreSQL's."""
    from tests.conftest import pg_schema_url, postgres_available
    if not postgres_available():
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 (database test, trust auth)")
    with pg_schema_url() as url:
        s = Store(url)
        s.migrate()
        yield s
        s.dispose()


def test_only_one_portal_fans_out_at_a_time(pg_store):
    store = pg_store
    app, view = new_app(store)
    subscribe(store, app, view, 0.5)
    advance(store, app, "initialized", 2.0)
    with store.write() as first:
        assert fan_out_in(first, store, 10.0, {}) == 2
        with store.write() as second:
            assert outbox.fan_out(second, 10.0, 1000, True, {}) == 0


def test_events_nobody_wants_are_marked_in_bulk_without_fan_out(store, fan_out):
    lonely, _ = new_app(store)
    watched, view = new_app(store)
    subscribe(store, watched, view, 1.5)
    advance(store, watched, "initialized", 2.0)
    with store.read() as conn:
        assert outbox.pending(conn, 10.0)[0] is True and outbox.maintenance(conn, 10.0, "me").unwanted is True
    with store.write() as conn:
        assert outbox.mark_unwanted(conn, 10.0) == 2           # lonely's and watched's first event
    with store.read() as conn:
        assert outbox.maintenance(conn, 10.0, "me").unwanted is False and outbox.pending(conn, 10.0)[0] is True
    assert fan_out(store) == 1                                   # only the wanted one is left
    with store.read() as conn:
        assert outbox.pending(conn, 10.0)[0] is False


def test_an_event_whose_filter_was_not_evaluated_waits_for_the_next_round(store, fan_out):
    """Filters are evaluated before the fan-out transaction: a pair nobody evaluated (a
    subscription made in between) holds its event back, whole, instead of evaluating there."""
    app, view = new_app(store)                                  # event 1, before both
    plain = subscribe(store, app, view, 0.5)
    filtered = subscribe(store, app, view, 1.5, content="api:state = 'initialized'")
    advance(store, app, "initialized", 2.0)                    # event 2
    with store.write() as conn:
        assert fan_out_in(conn, store, 10.0, {}) == 1   # event 1 only
    assert queued(store, plain) == [] and queued(store, filtered) == []
    assert fan_out(store) == 1                                  # now evaluated: both get event 2
    assert queued(store, plain) == [2] and queued(store, filtered) == [2]
    with store.write() as conn:                                  # a filter past its budget
        outbox.fail_filters(conn, {filtered: "the message filter took longer than its budget"}, 11.0)
    with store.read() as conn:
        sub = records.get(conn, filtered, count=False)
    assert sub.status == "failed" and "budget" in sub.failure and queued(store, filtered) == []
