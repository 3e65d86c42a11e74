"""The use cases of WS-BaseNotification: subscribe (through the SOAP operation or the create
option), the subscription manager's operations, and GetCurrentMessage.

Errors are domain errors: ``NotificationError`` names the wsnt fault, ``ResourceUnknown`` a
subscription that does not exist (or has expired). Every check happens before the write
transaction, so a refused request changes nothing.

A subscription belongs to the principal who made it: only they and administrators reach its
manager (someone else's answers as one that does not exist), and a user's subscription to the
portal's ApplicationCreated topic hears of their own applications only (``tenancy``).
"""

from __future__ import annotations

import time
from typing import Callable

from lxml import etree
from sqlalchemy.engine import Connection

from cddlm.application import audit, repository as repo, tenancy
from cddlm.application.options import Option
from cddlm.application.repository import View
from cddlm.application.tenancy import LOCAL_ADMIN, Principal
from cddlm.application.store import Store
from cddlm.config import Settings
from cddlm.errors import BadArgument, NotificationError, QueryError, ResourceUnknown
from cddlm.notify import messages, parse, records, topics
from cddlm.notify.outbound import Resolver, check_address, resolve
from cddlm.notify.records import FAILED, Subscription
from cddlm.xpathsafe import XPathPool


class Subscriptions:
    def __init__(self, store: Store, settings: Settings, xpath: XPathPool, *,
                 clock: Callable[[], float] = time.time, resolver: Resolver = resolve):
        self.store = store
        self.settings = settings
        self.xpath = xpath          # tries message-content filters (a helper process, a budget)
        self.clock = clock
        self.resolver = resolver
        self.on_change: list[Callable[[], None]] = []   # woken when deliveries may resume

    def _check(self, request: parse.SubscribeRequest) -> parse.SubscribeRequest:
        check_address(request.consumer.address, self.settings.consumer_networks, self.resolver)
        return request

    def _try_filters(self, kind: str) -> topics.Tryer:
        """Message-content filters tried on a sample message of ``kind``, in a helper process
        and within the filter budget: errors an XPath shows only when evaluated, and a filter
        too costly even on the sample, are refused now."""
        def tried(filters: list[tuple[str, dict]]) -> None:
            limits = self.settings.limits
            try:
                self.xpath.filter(filters, [etree.tostring(messages.SAMPLES[kind]())],
                                  limits.filter_seconds, strict=True, wait=limits.query_wait_seconds)
            except QueryError as e:
                raise topics.fault("InvalidMessageContentExpressionFault",
                                   "a message content filter cannot be used: %s" % e.message) from None
        return tried

    # -- the create option (called by Service.create) ----------------------------------------------
    def prepare(self, option: Option, now: float) -> parse.SubscribeRequest:
        """Read and check the option before the create transaction (a create fault otherwise)."""
        try:
            return self._check(parse.read_option(option, now, self.settings.default_subscription_seconds,
                                                 self._try_filters(topics.APPLICATION)))
        except NotificationError as e:
            raise BadArgument("option %s: %s" % (option.name, e.message)) from None

    def insert(self, conn: Connection, request: parse.SubscribeRequest, app_id: str, view: View,
               portal: str, now: float, *, principal: Principal = LOCAL_ADMIN) -> str:
        """In the create transaction: the subscription receives every event from sequence 1."""
        tenancy.check_subscriptions(conn, principal, self.settings.quotas, now)
        return records.insert_subscription(conn, request, app_id, view.id, portal, 0, now,
                                           principal.name)

    def producer_gone(self, conn: Connection, app_id: str, now: float) -> None:
        """``now`` is unused (kept for the caller, ``Service.destroy``)."""
        records.producer_gone(conn, app_id)

    # -- NotificationProducer -----------------------------------------------------------------
    def subscribe(self, body: etree._Element, kind: str, producer: str, view: str | None,
                  portal: str, *, principal: Principal = LOCAL_ADMIN) -> tuple[str, float | None]:
        """A ``wsnt:Subscribe`` sent to the portal (``producer`` "portal") or to an application
        view (``producer`` its id, ``view`` the view's id, found through ``principal``); returns
        the new subscription's id and termination time (its manager is on ``portal``)."""
        now = self.clock()
        request = self._check(parse.read_subscribe(body, kind, now,
                                                   self.settings.default_subscription_seconds,
                                                   self._try_filters(kind)))
        with self.store.write() as conn:
            start = 0
            scope = None
            if kind == topics.APPLICATION:
                start = records.lock_sequence(conn, producer)
                if start is None:
                    raise ResourceUnknown("application %s does not exist" % producer)
            else:
                scope = tenancy.owner_scope(principal)
            tenancy.check_subscriptions(conn, principal, self.settings.quotas, now)
            sub_id = records.insert_subscription(conn, request, producer, view, portal, start, now,
                                                 principal.name, scope)
            audit.record(conn, principal, "subscribe", now,
                         app_id=producer if kind == topics.APPLICATION else None,
                         app_owner=_app_owner(conn, producer) if kind == topics.APPLICATION else None,
                         detail="%s to %s" % (sub_id, request.consumer.address))
        return sub_id, request.termination_time

    def current_message(self, topic_el: etree._Element, kind: str, producer: str, *,
                        principal: Principal = LOCAL_ADMIN) -> etree._Element:
        topic = topics.topic_of(topic_el, kind)
        scope = tenancy.owner_scope(principal) if kind != topics.APPLICATION else None
        with self.store.read() as conn:
            data = records.latest_event(conn, producer, topic, scope)
        if data is None:
            raise NotificationError("NoCurrentMessageOnTopicFault",
                                    "nothing has been published on %s yet" % topic)
        return messages.payload(topic, data)

    # -- SubscriptionManager --------------------------------------------------------------------
    def get(self, sub_id: str, *, principal: Principal = LOCAL_ADMIN) -> Subscription:
        """The subscription, without its ``undelivered`` count (see ``undelivered``), when
        ``principal`` may reach it."""
        with self.store.read() as conn:
            sub = records.get(conn, sub_id, count=False)
        if sub is None or (sub.termination_time is not None and sub.termination_time <= self.clock()) \
                or not tenancy.visible(sub.subscriber, principal):
            raise ResourceUnknown("no subscription %s" % sub_id)
        return sub

    def undelivered(self, sub_id: str) -> int:
        """How many messages are queued for the subscription."""
        with self.store.read() as conn:
            return records.undelivered(conn, sub_id)

    def renew(self, sub_id: str, requested: etree._Element, *,
              principal: Principal = LOCAL_ADMIN) -> tuple[float | None, float]:
        """A new termination time; returns it and the current time."""
        now = self.clock()
        self.get(sub_id, principal=principal)
        when = parse.requested_time(requested, now, "UnacceptableTerminationTimeFault")
        self._change(sub_id, termination_time=when)
        return when, now

    def unsubscribe(self, sub_id: str, *, principal: Principal = LOCAL_ADMIN) -> None:
        sub = self.get(sub_id, principal=principal)
        with self.store.write() as conn:
            if not records.remove(conn, sub_id):
                raise ResourceUnknown("no subscription %s" % sub_id)
            audit.record(conn, principal, "unsubscribe", self.clock(),
                         app_id=sub.producer if sub.producer != "portal" else None,
                         app_owner=_app_owner(conn, sub.producer), detail=sub_id)

    def pause(self, sub_id: str, *, principal: Principal = LOCAL_ADMIN) -> None:
        sub = self.get(sub_id, principal=principal)
        if sub.status == FAILED:
            raise NotificationError("PauseFailedFault", "the subscription has failed: %s" % sub.failure)
        self._change(sub_id, paused=True)

    def resume(self, sub_id: str, *, principal: Principal = LOCAL_ADMIN) -> None:
        """Deliver again, from the first message queued while paused (a failure streak before
        the pause counts from now)."""
        sub = self.get(sub_id, principal=principal)
        if sub.status == FAILED:
            raise NotificationError("ResumeFailedFault", "the subscription has failed (%s); "
                                    "subscribe again" % sub.failure)
        if sub.paused:
            self._change(sub_id, paused=False, failing_since=None)
        for callback in self.on_change:
            callback()

    def _change(self, sub_id: str, **values) -> None:
        with self.store.write() as conn:
            if not records.change(conn, sub_id, **values):
                raise ResourceUnknown("no subscription %s" % sub_id)


def _app_owner(conn: Connection, producer: str) -> str | None:
    app = repo.get_app(conn, producer) if producer != "portal" else None
    return app.owner if app is not None else None
