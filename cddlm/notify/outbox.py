"""The delivery queue over the outbox: fan-out, claims, outcomes and clean-up. SQL only; the
threads that drive it are in ``delivery``.

Fan-out turns events (written with their state change) into one ``deliveries`` row per
matching subscription and marks them ``fanned_out``. A subscription receives what happens
after it exists: for an application, events with a sequence above ``start_seq`` (its
application's sequence when it was made, read under the application's row lock; 0 for the
subscribe option, so it gets sequence 1); for the portal, ApplicationCreated events fanned
out after it exists, except those created long before it. Fan-out is serialised (the write
lock on SQLite, a transaction-scoped advisory lock on PostgreSQL) and marks events rather than
keeping an id watermark: ids are not handed out in commit order. One application's events
are always committed in sequence order (each one updates the application row), so they
are fanned out in that order too.

A subscription is delivered by one portal at a time: a claim takes subscriptions whose head
is due under a lease (``owner``, ``lease_expires``; ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL) with up to ``batch`` of their deliveries in event order, sent as one Notify.
Success deletes those rows; failure keeps them and sets the next attempt with exponential
backoff, and once a subscription has been failing for the retry horizon it is marked
``failed`` and its queue is dropped. Paused subscriptions keep queueing and are not claimed.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple

from sqlalchemy import (and_, bindparam, case, delete, exists, func, insert, or_, select, text,
                        tuple_, update)
from sqlalchemy.engine import Connection

from cddlm import ns
from cddlm.application.tables import applications, deliveries, engines, events, subscriptions
from cddlm.config import Settings
from cddlm.notify.records import ENDED, FAILED, LIVE

PORTAL_SLACK = 60.0         # seconds: an ApplicationCreated event older than its subscription
FAN_OUT_LOCK = 4242005      # PostgreSQL advisory lock key
s, d, e = subscriptions.c, deliveries.c, events.c
_UNFANNED = e.fanned_out == False  # noqa: E712  (an equality the index serves)
_UNEXPIRED = or_(s.termination_time.is_(None), s.termination_time > bindparam("now"))


@dataclass(frozen=True)
class Event:
    id: int
    producer: str
    topic: str
    data: dict


@dataclass(frozen=True)
class Batch:
    """Claimed deliveries of one subscription, in order."""
    sub_id: str
    portal: str
    producer: str
    view: str | None
    topic: str
    consumer: str              # EPR XML
    address: str
    subscriber: str            # the principal who made it (senders are shared fairly by them)
    attempts: int
    failing_since: float | None
    events: tuple[int, ...]        # event ids, in order


@dataclass(frozen=True)
class Outcome:
    batch: Batch
    started: float
    error: str | None          # None: delivered


# -- fan-out ----------------------------------------------------------------------------------
# a subscription to the portal hears of the applications of its scope (a user: their own)
_MATCHES = and_(s.producer == e.producer, s.topic == e.topic, s.status.in_(LIVE), _UNEXPIRED,
                or_(and_(e.producer == ns.PORTAL_PRODUCER, e.created >= s.created - PORTAL_SLACK,
                         or_(s.scope.is_(None), s.scope == e.owner)),
                    and_(e.producer != ns.PORTAL_PRODUCER, e.seq > s.start_seq)))
_IN_IDS = e.id.in_(bindparam("ids", expanding=True))
# the range lets (producer, topic, id) serve the join, not every event of the producer
_IN_RANGE = and_(e.id.between(bindparam("low"), bindparam("high")), _IN_IDS)


@dataclass(frozen=True)
class FilterPair:
    """A subscription with a content filter and an event it may want (read before fan-out)."""
    sub_id: str
    message_filter: str        # JSON: [[XPath, namespaces], ...]
    event: Event


def filter_pairs(conn: Connection, now: float, limit: int) -> list[FilterPair]:
    """The (filtered subscription, event) pairs of the next ``limit`` events to fan out: read
    first, so that their filters are evaluated outside any transaction."""
    ids = [r[0] for r in conn.execute(select(e.id).where(_UNFANNED).order_by(e.id).limit(limit))]
    if not ids:
        return []
    params = {"ids": ids, "now": now, "low": ids[0], "high": ids[-1]}
    parsed: dict[int, Event] = {}            # each event's message read once, for every pair
    out = []
    for r in conn.execute(select(s.id.label("sid"), s.message_filter, e.id, e.producer, e.topic,
                                 e.message).select_from(events.join(subscriptions, _MATCHES))
                          .where(_IN_RANGE, s.message_filter.is_not(None)), params):
        event = parsed.get(r.id)
        if event is None:
            event = parsed[r.id] = Event(r.id, r.producer, r.topic, json.loads(r.message))
        out.append(FilterPair(r.sid, r.message_filter, event))
    return out


def fan_out(conn: Connection, now: float, limit: int, postgres: bool,
            matched: Mapping[tuple[str, int], bool]) -> int:
    """Queue deliveries for up to ``limit`` events not fanned out yet; returns how many
    events it handled. Subscriptions without a content filter are matched in SQL; for the
    others ``matched[(sub id, event id)]`` says, as evaluated beforehand (``filter_pairs``).
    An event with a pair nobody evaluated (a subscription made since) is left for the next
    round, whole, so that no filter is ever evaluated inside this transaction."""
    if postgres and not conn.execute(text("SELECT pg_try_advisory_xact_lock(%d)" % FAN_OUT_LOCK)).scalar():
        return 0   # another portal is fanning out; it takes these events
    ids = [r[0] for r in conn.execute(select(e.id).where(_UNFANNED).order_by(e.id).limit(limit))]
    if not ids:
        return 0
    pairs = events.join(subscriptions, _MATCHES)
    params = {"ids": ids, "now": now, "low": ids[0], "high": ids[-1]}
    filtered = conn.execute(select(s.id, e.id).select_from(pairs)
                            .where(_IN_RANGE, s.message_filter.is_not(None)), params).all()
    later = {eid for sid, eid in filtered if (sid, eid) not in matched}
    if later:
        ids = [i for i in ids if i not in later]
        if not ids:
            return 0
        params = {"ids": ids, "now": now, "low": ids[0], "high": ids[-1]}
    conn.execute(insert(deliveries).from_select(
        ["subscription_id", "event_id", "queued"],
        select(s.id, e.id, bindparam("now")).select_from(pairs)
        .where(_IN_RANGE, s.message_filter.is_(None))), params)
    wanted = [{"subscription_id": sid, "event_id": eid, "queued": now} for sid, eid in filtered
              if eid not in later and matched[(sid, eid)]]
    if wanted:
        conn.execute(insert(deliveries), wanted)
    conn.execute(update(subscriptions).where(s.id.in_(
        select(d.subscription_id).where(d.event_id.in_(bindparam("ids", expanding=True))).distinct()))
        .values(due=func.coalesce(s.due, now)), params)
    conn.execute(update(events).where(_IN_IDS).values(fanned_out=True), params)
    return len(ids)


def fail_filters(conn: Connection, failures: Mapping[str, str], now: float) -> None:
    """Subscriptions whose message filter passed its budget fail, with the reason, and their
    queues are dropped: such a filter would cost as much on every message."""
    for sub_id, reason in failures.items():
        failed = conn.execute(update(subscriptions).where(s.id == sub_id, s.status.in_(LIVE)).values(
            status=FAILED, failure=reason, due=None, owner=None, lease_expires=None,
            failing_since=now, last_error=reason)).rowcount
        if failed:
            conn.execute(delete(deliveries).where(d.subscription_id == sub_id))


# -- claims -----------------------------------------------------------------------------------
_CLAIMABLE = and_(s.due <= bindparam("now"), s.paused.is_(False), s.status.in_(LIVE),
                  or_(s.owner.is_(None), s.lease_expires < bindparam("now")), _UNEXPIRED)


# due subscriptions taken in turns by subscriber: each one's most overdue, then each one's
# next ... (a subscriber with a thousand due subscriptions does not hide another's one)
_TURNS = (select(s.id, func.row_number().over(partition_by=s.subscriber, order_by=(s.due, s.id))
                 .label("turn")).where(_CLAIMABLE).subquery())


def claim(conn: Connection, owner: str, now: float, lease: float, limit: int, batch: int,
          postgres: bool, take: Callable[[str, str, set[str]], bool]) -> list[Batch]:
    """Lease up to ``limit`` due subscriptions, in turns by subscriber (those ``take(address,
    subscriber, waiting)`` accepts; ``waiting``: the subscribers with due subscriptions seen),
    with the ids of their first ``batch`` queued events."""
    query = (select(s.id, s.portal, s.producer, s.producer_view, s.topic, s.consumer,
                    s.consumer_address, s.subscriber, s.attempts, s.failing_since)
             .join(_TURNS, _TURNS.c.id == s.id).order_by(_TURNS.c.turn, s.due).limit(limit * 4)
             .where(_CLAIMABLE))    # again on the row itself: PostgreSQL checks it again on
                                    # a row another claimer has just leased (and skips it)
    if postgres:
        query = query.with_for_update(skip_locked=True, of=subscriptions)
    rows = conn.execute(query, {"now": now}).all()
    waiting = {r.subscriber for r in rows}
    chosen = []
    for r in rows:
        if len(chosen) == limit:
            break
        if take(r.consumer_address, r.subscriber, waiting):
            chosen.append(r)
    if not chosen:
        return []
    ids = [r.id for r in chosen]
    conn.execute(update(subscriptions).where(s.id.in_(bindparam("ids", expanding=True)))
                 .values(owner=owner, lease_expires=now + lease), {"ids": ids})
    ranked = (select(d.subscription_id, d.event_id,
                     func.row_number().over(partition_by=d.subscription_id,
                                            order_by=d.event_id).label("rank"))
              .where(d.subscription_id.in_(bindparam("ids", expanding=True))).subquery())
    queued: dict[str, list[int]] = {i: [] for i in ids}
    for sid, eid in conn.execute(select(ranked.c.subscription_id, ranked.c.event_id)
                                 .where(ranked.c.rank <= batch)
                                 .order_by(ranked.c.subscription_id, ranked.c.event_id), {"ids": ids}):
        queued[sid].append(eid)
    empty = [i for i, q in queued.items() if not q]
    if empty:   # nothing left (dropped or unsubscribed meanwhile): not due any more
        conn.execute(update(subscriptions).where(s.id.in_(bindparam("ids", expanding=True)))
                     .values(due=None, owner=None, lease_expires=None), {"ids": empty})
    return [Batch(r.id, r.portal, r.producer, r.producer_view, r.topic, r.consumer,
                  r.consumer_address, r.subscriber, r.attempts, r.failing_since,
                  tuple(queued[r.id]))
            for r in chosen if queued[r.id]]


def load_events(conn: Connection, ids: list[int]) -> dict[int, Event]:
    """The events with these ids (claims name events by id; a dispatcher caches their
    messages, since every subscriber of a topic gets the same ones)."""
    return {r.id: Event(r.id, r.producer, r.topic, json.loads(r.message))
            for r in conn.execute(select(e.id, e.producer, e.topic, e.message).where(_IN_IDS),
                                  {"ids": ids})}


# -- outcomes ---------------------------------------------------------------------------------
def record(conn: Connection, owner: str, now: float, outcomes: list[Outcome], settings: Settings) -> None:
    """Write what the senders found: delivered rows go, failures back off or fail."""
    done = [o for o in outcomes if o.error is None]
    if done:
        _delete_sent(conn, [(o.batch.sub_id, i) for o in done for i in o.batch.events])
        more = exists().where(d.subscription_id == s.id)
        conn.execute(update(subscriptions)
                     .where(s.id == bindparam("sid"), s.owner == owner)
                     .values(owner=None, lease_expires=None, attempts=0, failing_since=None,
                             last_error=None, delivered=s.delivered + bindparam("n"),
                             last_delivered=now, due=case((more, now), else_=None)),
                     [{"sid": o.batch.sub_id, "n": len(o.batch.events)} for o in done])
    for o in outcomes:
        if o.error is not None:
            _failed(conn, owner, now, o, settings)


_UNNEST = text("DELETE FROM deliveries WHERE (subscription_id, event_id) IN "
               "(SELECT * FROM unnest(CAST(:sids AS varchar[]), CAST(:eids AS integer[])))")


def _delete_sent(conn: Connection, sent: list[tuple[str, int]]) -> None:
    """Delete delivered (subscription, event) rows: on PostgreSQL as two arrays (a hash join;
    a long row-value IN list plans badly there), on SQLite as row values in chunks."""
    if conn.dialect.name == "postgresql":
        conn.execute(_UNNEST, {"sids": [p[0] for p in sent], "eids": [p[1] for p in sent]})
        return
    for k in range(0, len(sent), 5000):          # SQLite takes up to 32766 parameters
        conn.execute(delete(deliveries).where(tuple_(d.subscription_id, d.event_id).in_(
            bindparam("pairs", expanding=True))), {"pairs": sent[k:k + 5000]})


def backoff(attempts: int, settings: Settings) -> float:
    """Seconds before the next attempt after ``attempts`` consecutive failures (jittered down
    by up to a fifth, so consumers that fail together do not retry together)."""
    delay = min(settings.delivery_backoff_max,
                settings.delivery_backoff_initial * 2 ** min(attempts - 1, 30))
    return delay * random.uniform(0.8, 1.0)


def _failed(conn: Connection, owner: str, now: float, o: Outcome, settings: Settings) -> None:
    attempts = o.batch.attempts + 1
    since = o.batch.failing_since if o.batch.failing_since is not None else o.started
    mine = and_(s.id == o.batch.sub_id, s.owner == owner)
    if now - since >= settings.delivery_retry_horizon:
        failed = conn.execute(update(subscriptions).where(mine).values(
            status=FAILED, failure="no delivery for %.0f s (retry horizon): %s"
            % (now - since, o.error), due=None, owner=None, lease_expires=None, attempts=attempts,
            failing_since=since, last_error=o.error)).rowcount
        if failed:
            conn.execute(delete(deliveries).where(d.subscription_id == o.batch.sub_id))
        return
    conn.execute(update(subscriptions).where(mine).values(
        attempts=attempts, failing_since=since, last_error=o.error,
        due=now + backoff(attempts, settings), owner=None, lease_expires=None))


def release(conn: Connection, owner: str) -> None:
    """Give up every lease ``owner`` holds (a portal stopping)."""
    conn.execute(update(subscriptions).where(s.owner == owner).values(owner=None, lease_expires=None))


# leased by a portal whose engine is no longer registered (released as dead), other than ``me``
_ORPHANED = and_(s.owner.is_not(None), s.owner != bindparam("me"),
                 ~exists().where(engines.c.id == s.owner))


def release_orphaned(conn: Connection, me: str) -> int:
    """Free the leases of portals whose engines are gone (a dead engine's row is deleted by
    the engine that finds it dead), so their deliveries resume without waiting for the lease
    to expire; an expired lease remains claimable anyway."""
    return conn.execute(update(subscriptions).where(_ORPHANED).values(owner=None, lease_expires=None),
                        {"me": me}).rowcount


# -- looking and cleaning -----------------------------------------------------------------------
_SUBSCRIBED = exists().where(_MATCHES)                      # some subscription is owed it
_ANY_LIVE = select(s.id).where(s.status.in_(LIVE)).limit(1)


def pending(conn: Connection, now: float) -> tuple[bool, float | None]:
    """Whether events some subscription may want wait for fan-out, and when the next
    claimable subscription is due (reads only: most events have no subscriber, and an idle
    dispatcher should not take the write lock the engine needs)."""
    if conn.execute(_ANY_LIVE).first() is None:
        return False, None   # nobody subscribes to anything: nothing to fan out or send
    wanted = conn.execute(select(e.id).where(_UNFANNED, _SUBSCRIBED).limit(1), {"now": now}).first()
    due = conn.execute(select(func.min(s.due)).where(
        s.due.is_not(None), s.paused.is_(False), s.status.in_(LIVE),
        or_(s.owner.is_(None), s.lease_expires < now))).scalar()
    return wanted is not None, due


class Maintenance(NamedTuple):
    """What the maintenance pass has to do: subscriptions to end (``expire``), events nobody
    is subscribed to (``mark_unwanted``), leases of portals that are gone
    (``release_orphaned``)."""
    expirable: bool
    unwanted: bool
    orphaned: bool


_MAINTENANCE = select(
    exists().where(or_(s.termination_time <= bindparam("now"), s.status == ENDED)),
    exists().where(_UNFANNED, ~_SUBSCRIBED),
    exists().where(_ORPHANED))


def maintenance(conn: Connection, now: float, me: str) -> Maintenance:
    """What the maintenance pass has to do, in one read (an idle portal writes nothing and
    asks once)."""
    return Maintenance(*(bool(v) for v in conn.execute(_MAINTENANCE, {"now": now, "me": me}).one()))


def mark_unwanted(conn: Connection, now: float) -> int:
    """Mark fanned out the events no live subscription matches, in bulk (the maintenance
    pass), instead of a write per event. No gap can follow: a subscription that starts after
    an event's sequence committed before that event did, so it is visible wherever the event
    is; and an ApplicationCreated event older than a portal subscription is not owed to it."""
    return conn.execute(update(events).where(_UNFANNED, ~_SUBSCRIBED).values(fanned_out=True),
                        {"now": now}).rowcount


def expire(conn: Connection, now: float) -> int:
    """Subscriptions past their termination time end, with their queues; subscriptions of
    destroyed applications end once their queues are delivered."""
    expired = select(s.id).where(s.termination_time <= now)
    conn.execute(delete(deliveries).where(d.subscription_id.in_(expired)))
    gone = conn.execute(delete(subscriptions).where(s.termination_time <= now)).rowcount
    unfanned = exists().where(e.producer == s.producer, _UNFANNED)
    gone += conn.execute(delete(subscriptions).where(
        s.status == ENDED, ~exists().where(d.subscription_id == s.id), ~unfanned)).rowcount
    return gone


def prune_events(conn: Connection, now: float, retention: float, after: int | None = None,
                 upto: int | None = None) -> int:
    """Delete delivered events older than ``retention``, keeping each live producer's newest
    event on each topic (GetCurrentMessage); only those with ids in (``after``, ``upto``]
    when given (a range of the primary key: a sweep in bounded steps holds the store briefly
    each time, where one pass over every event held it for as long as the outbox is large)."""
    newer = events.alias("newer")
    has_newer = exists().where(newer.c.producer == e.producer, newer.c.topic == e.topic,
                               newer.c.id > e.id)
    gone_app = and_(e.producer != ns.PORTAL_PRODUCER, ~exists().where(applications.c.id == e.producer))
    window = ([e.id > after] if after is not None else []) + ([e.id <= upto] if upto is not None else [])
    return conn.execute(delete(events).where(
        *window, e.fanned_out.is_(True), e.created < now - retention,
        ~exists().where(d.event_id == e.id),
        or_(has_newer, gone_app))).rowcount


def event_ids(conn: Connection) -> tuple[int, int]:
    """(the oldest event id, the newest), (0, 0) for an empty outbox: what a prune sweeps."""
    # two statements: SQLite answers a lone min() or max() from the index, both together by a scan
    low = conn.execute(select(func.min(e.id))).scalar()
    high = conn.execute(select(func.max(e.id))).scalar()
    return (low or 0), (high or 0)
