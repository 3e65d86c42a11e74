"""Subscription rows: what the use cases read and write (the delivery queue is ``outbox``).

Functions take an open connection, so the caller decides the transaction: the subscribe
option's subscription commits with the application it subscribes to.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.engine import Connection

from cddlm.application import repository as repo
from cddlm.application.store import not_waited, send
from cddlm.application.tables import LOCAL_OWNER, deliveries, events, subscriptions
from cddlm.notify.parse import SubscribeRequest

ACTIVE, FAILED, ENDED = "active", "failed", "ended"
LIVE = (ACTIVE, ENDED)          # still delivering (ended: its producer is gone, queue draining)


@dataclass
class Subscription:
    id: str
    producer: str
    producer_view: str | None
    portal: str
    topic: str
    filter_xml: str
    message_filter: str | None
    consumer: str
    consumer_address: str
    created: float
    termination_time: float | None
    start_seq: int
    paused: bool
    status: str
    failure: str | None
    due: float | None
    attempts: int
    failing_since: float | None
    last_error: str | None
    owner: str | None
    lease_expires: float | None
    delivered: int
    last_delivered: float | None
    subscriber: str | None = None       # the principal who made it
    scope: str | None = None            # ApplicationCreated: whose applications (None: all)
    undelivered: int = 0

    @property
    def state(self) -> str:
        """active | paused | failed | ended, as ``api:subscriptionStatus`` reports it."""
        return "paused" if self.paused and self.status == ACTIVE else self.status


_COLUMNS = [f.name for f in fields(Subscription) if f.name != "undelivered"]
_GET = select(*[subscriptions.c[n] for n in _COLUMNS]).where(subscriptions.c.id == bindparam("sid"))
_UNDELIVERED = select(func.count()).select_from(deliveries) \
    .where(deliveries.c.subscription_id == subscriptions.c.id).scalar_subquery().label("undelivered")
_GET_COUNTED = _GET.add_columns(_UNDELIVERED)
_COUNT = select(func.count()).select_from(deliveries).where(deliveries.c.subscription_id == bindparam("sid"))


def new_id() -> str:
    return uuid.uuid4().hex


def insert_subscription(conn: Connection, request: SubscribeRequest, producer: str,
                        view: str | None, portal: str, start_seq: int, now: float,
                        subscriber: str = LOCAL_OWNER, scope: str | None = None) -> str:
    sub_id = new_id()
    conn.execute(insert(subscriptions).values(
        id=sub_id, producer=producer, producer_view=view, portal=portal,
        topic=request.filter.topic, filter_xml=request.filter.xml,
        message_filter=request.filter.message_filter_json(), consumer=request.consumer_xml,
        consumer_address=request.consumer.address, created=now,
        termination_time=request.termination_time, start_seq=start_seq, paused=False,
        status=ACTIVE, attempts=0, delivered=0, subscriber=subscriber, scope=scope))
    return sub_id


def get(conn: Connection, sub_id: str, *, count: bool = True) -> Subscription | None:
    """The subscription; ``undelivered`` is counted only when ``count`` (else it is 0)."""
    row = conn.execute(_GET_COUNTED if count else _GET, {"sid": sub_id}).first()
    return Subscription(**row._mapping) if row is not None else None


def undelivered(conn: Connection, sub_id: str) -> int:
    """How many messages are queued for the subscription."""
    return conn.execute(_COUNT, {"sid": sub_id}).scalar() or 0


def change(conn: Connection, sub_id: str, **values: Any) -> int:
    return conn.execute(update(subscriptions).where(subscriptions.c.id == sub_id)
                        .values(**values)).rowcount


def remove(conn: Connection, sub_id: str) -> int:
    """Delete a subscription and its queue (Unsubscribe, Destroy)."""
    conn.execute(delete(deliveries).where(deliveries.c.subscription_id == sub_id))
    return conn.execute(delete(subscriptions).where(subscriptions.c.id == sub_id)).rowcount


def lock_sequence(conn: Connection, app_id: str) -> int | None:
    """The application's last event sequence, with its row locked until commit, so no state
    change commits between reading it and the subscription that starts after it."""
    app = repo.lock_app(conn, app_id)
    return app.event_seq if app is not None else None


_PRODUCER_GONE = not_waited(
    update(subscriptions).where(subscriptions.c.producer == bindparam("app_id"),
                                subscriptions.c.status == ACTIVE).values(status=ENDED))


def producer_gone(conn: Connection, app_id: str) -> None:
    """The application is destroyed: its subscriptions deliver what is queued (and its last
    events, which may not be fanned out yet), then ``outbox.expire`` removes them."""
    send(conn, _PRODUCER_GONE, {"app_id": app_id})


def view_to_name(conn: Connection, app_id: str, recorded: str | None, portal: str,
                 now: float) -> str | None:
    """The application view a notification delivered by ``portal`` names (spec 6.3: when the
    subscriber's portal changes, so do the EPRs in its notifications): the view the
    subscription was made through when it is live and on ``portal``, else ``portal``'s own
    view of the application (made now if it has none). A destroyed application's last events
    name the view they were made through."""
    if recorded:
        view = repo.get_view(conn, recorded)
        if view is not None and view.portal == portal and (
                view.termination_time is None or view.termination_time > now):
            return recorded
    view = repo.view_for(conn, app_id, portal, now)
    if view is not None:
        return view.id
    if repo.get_app(conn, app_id) is None:
        return recorded
    return repo.new_view(conn, app_id, portal, now).id


def latest_event(conn: Connection, producer: str, topic: str,
                 scope: str | None = None) -> dict | None:
    """The newest event of a producer on a topic (of ``scope``'s applications only, when given:
    the portal's ApplicationCreated events as a user may see them)."""
    query = select(events.c.message).where(events.c.producer == producer, events.c.topic == topic)
    if scope is not None:
        query = query.where(events.c.owner == scope)
    row = conn.execute(query.order_by(events.c.id.desc()).limit(1)).first()
    return json.loads(row[0]) if row is not None else None

