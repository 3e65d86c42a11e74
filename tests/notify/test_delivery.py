"""Delivery end to end: an in-process portal with its engine and delivery workers, and real
HTTP consumers on loopback (``cddlm.listener``). Every Notify received is validated."""

from __future__ import annotations

import time

import pytest

from cddlm.xsdtypes import parse_datetime
from cddlm.notify.outbound import NO_ANSWER
from tests.conftest import free_port, make_portal
from tests.notify.helpers import Soap, black_hole, check_envelopes, collect, consumer, unreachable

FAST = dict(delivery_backoff_initial=0.2, delivery_backoff_max=1.0, delivery_timeout=1.0,
            delivery_connect_timeout=0.5)
STATES = ["instantiated", "initialized", "running", "terminated"]


@pytest.fixture
def make(tmp_path):
    portals = []

    def factory(**settings):
        p = make_portal(tmp_path / ("p%d" % len(portals)), **dict(FAST, **settings))
        portals.append(p)
        return Soap(p)

    yield factory
    for p in portals:
        p.stop()


def test_a_full_lifecycle_reaches_a_consumer_promptly_while_others_are_dead_or_hang(make):
    soap = make()
    with consumer() as good, black_hole() as hole:
        app, view = soap.create("web", subscribe=good.url("good"))
        dead = soap.subscribe(view, unreachable())
        stuck = soap.subscribe(view, hole)
        soap.lifecycle(app)
        events = collect(good, 4, timeout=5)
        assert [(e.sequence, e.state) for e in events] == list(enumerate(STATES, 1))
        assert all(e.resource_id == app and e.producer == view for e in events)
        lag = [e.received - parse_datetime(e.timestamp) for e in events]
        assert max(lag) < 1.0, lag                              # promptly, despite the others
        assert check_envelopes(good) >= 1
        deadline = time.monotonic() + 10
        while not soap.status(stuck).get("lastError"):             # its first attempt timed out
            assert time.monotonic() < deadline
            time.sleep(0.1)
        for sub in (dead, stuck):
            status = soap.status(sub)
            assert status["state"] == "active" and status["undelivered"] == "3"
        # a refused connection and a silent port read the same: subscriptions are no port scanner
        assert soap.status(dead)["lastError"] == soap.status(stuck)["lastError"] == NO_ANSWER


def test_a_consumer_down_for_30_seconds_then_back_gets_every_event_in_order(make):
    soap = make()
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    apps = []
    for i in range(3):
        apps.append(soap.create("late-%d" % i, subscribe="%s/app%d" % (url, i))[0])
        soap.lifecycle(apps[-1])
    watcher = soap.subscribe(soap.portal.url + "/cddlm/portal", url + "/created", "api:ApplicationCreated")
    created = soap.create("after")[0]
    down_since = time.monotonic()
    # its first attempt fails at once (refused): awaited, where a fixed 2 s assumed the
    # delivery worker had made it by then
    deadline = time.monotonic() + 25
    while not (status := soap.status(watcher)).get("failingSince"):
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    assert status["undelivered"] == "1" and status["failingSince"] and status["nextAttempt"]
    time.sleep(max(0.0, 30 - (time.monotonic() - down_since)))
    with consumer(port) as back:
        events = collect(back, 13, timeout=30)      # (within a backoff, 1 s, but for a failure)
        assert check_envelopes(back) >= 4
    for i, app in enumerate(apps):
        mine = [e for e in events if e.path == "/app%d" % i]
        assert [(e.sequence, e.state, e.resource_id) for e in mine] == \
            [(n, s, app) for n, s in enumerate(STATES, 1)]
    assert [e.resource_id for e in events if e.path == "/created"] == [created]
    # the portal records a send after the consumer has it: give it its next round
    deadline = time.monotonic() + 5
    while soap.status(watcher)["undelivered"] != "0" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert soap.status(watcher)["state"] == "active" and soap.status(watcher)["undelivered"] == "0"


def test_unsubscribe_stops_delivery(make):
    soap = make()
    with consumer() as listener:
        app, view = soap.create(subscribe=listener.url("a"))
        (first,) = collect(listener, 1, timeout=5)
        soap.manage(first.subscription, "Unsubscribe")
        soap.lifecycle(app)
        time.sleep(0.5)
        assert listener.get(timeout=0.1) is None
        soap.manage(first.subscription, "Unsubscribe", fault="ResourceUnknownFault")
    assert first.sequence == 1


def test_pause_queues_and_resume_delivers_in_order(make):
    soap = make()
    with consumer() as listener:
        app, view = soap.create()
        sub = soap.subscribe(view, listener.url("p"))
        soap.manage(sub, "PauseSubscription")
        soap.lifecycle(app)
        # the three events queued for it (by the delivery worker, in its own time: awaited),
        # and none of them sent
        deadline = time.monotonic() + 30
        while soap.status(sub)["undelivered"] != "3":
            assert time.monotonic() < deadline, soap.status(sub)
            time.sleep(0.05)
        assert listener.get(timeout=0.5) is None and soap.status(sub)["undelivered"] == "3"
        soap.manage(sub, "ResumeSubscription")
        events = collect(listener, 3, timeout=5)
        assert [e.state for e in events] == STATES[1:]
        check_envelopes(listener)


def test_after_the_retry_horizon_a_subscription_fails_and_drops_its_queue(make):
    soap = make(delivery_retry_horizon=1.0, delivery_backoff_initial=0.1, delivery_backoff_max=0.2)
    app, view = soap.create(subscribe=unreachable())
    sub = soap.subscribe(view, unreachable())
    soap.portal.service.terminate(app)                         # an event for it
    deadline = time.monotonic() + 10
    while soap.status(sub)["state"] != "failed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status = soap.status(sub)
    assert status["undelivered"] == "0" and "retry horizon" in status["failure"]
    soap.manage(sub, "ResumeSubscription", fault="ResumeFailedFault")
    soap.manage(sub, "PauseSubscription", fault="PauseFailedFault")
    while soap.portal.service.dynamic_info()["undelivered"]:    # the option's one fails too
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_expired_subscriptions_stop_by_themselves(make):
    soap = make()
    with consumer() as listener:
        app, view = soap.create()
        sub = soap.subscribe(view, listener.url("x"), extra="")
        soap.call(sub, "<wsnt:Renew><wsnt:TerminationTime>PT0.5S</wsnt:TerminationTime></wsnt:Renew>")
        time.sleep(1.5)
        soap.manage(sub, "PauseSubscription", fault="ResourceUnknownFault")
        soap.lifecycle(app)
        time.sleep(0.5)
        assert listener.get(timeout=0.1) is None


def test_creations_and_content_filters(make):
    soap = make()
    with consumer() as listener:
        soap.subscribe(soap.portal.url + "/cddlm/portal", listener.url("new"), "api:ApplicationCreated")
        made = [soap.create("c%d" % i)[0] for i in range(3)]
        created = collect(listener, 3, timeout=5)
        assert [e.resource_id for e in created] == made and [e.name for e in created] == ["c0", "c1", "c2"]
        view = created[1].application.address                  # the event's EPR works
        soap.subscribe(view, listener.url("running"), extra=(
            '<wsnt:MessageContent Dialect="http://www.w3.org/TR/1999/REC-xpath-19991116">'
            "api:state = 'running'</wsnt:MessageContent>"))
        soap.lifecycle(made[1])
        (only,) = collect(listener, 1, timeout=5)
        time.sleep(0.5)
        assert (only.path, only.state, only.sequence) == ("/running", "running", 3)
        assert listener.get(timeout=0.1) is None
        check_envelopes(listener)
