"""Notifications with a real portal process (``cddlm portal serve``): delivery across a crash
and restart, the client library's subscriptions, and ``cddlm watch``."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from lxml import etree

from cddlm.client import Portal, PortalFault
from tests.cli.helpers import reader
from tests.conftest import ROOT, free_port
from tests.notify.helpers import NATIVE, SLEEPER, check_envelopes, collect, consumer

SUBSCRIBE = "urn:cddlm:option:subscribe"


def live_subscriptions(state_dir: Path) -> list[tuple]:
    with sqlite3.connect(str(state_dir / "portal.db")) as db:
        return db.execute("SELECT producer, status FROM subscriptions").fetchall()


def test_a_portal_killed_between_an_event_and_its_delivery_delivers_it_after_restart(live_portal):
    port = free_port()
    lp = live_portal()
    portal = Portal(lp.url)
    app = portal.create(name="crash", options={SUBSCRIBE: "http://127.0.0.1:%d/crash" % port})
    app.initialize(NATIVE, body=etree.fromstring(SLEEPER))
    app.run()
    assert app.wait_for("running", timeout=20) == "running"
    time.sleep(0.3)                                          # a failed attempt or two
    lp.stop(signal.SIGKILL)                                  # three events, none delivered
    with consumer(port) as back:
        again = live_portal(state_dir=lp.state_dir)
        events = collect(back, 3, timeout=15)
        assert [(e.sequence, e.state) for e in events] == \
            [(1, "instantiated"), (2, "initialized"), (3, "running")]
        assert check_envelopes(back) >= 1
        Portal(again.url).lookup("crash").terminate("test over")
        (last,) = collect(back, 1, timeout=10)
        assert (last.sequence, last.state) == (4, "terminated")


def test_the_client_library_subscribes_renews_and_reads_current_messages(live_portal):
    lp = live_portal()
    portal = Portal(lp.url)
    try:
        portal.current_message()
        raise AssertionError("expected NoCurrentMessageOnTopicFault")
    except PortalFault as e:
        assert e.fault == "NoCurrentMessageOnTopicFault"
    with consumer() as listener:
        sub = portal.subscribe(listener.url("all"), termination="PT1M")
        app = portal.create(name="lib")
        (created,) = collect(listener, 1, timeout=5)
        assert created.resource_id == app.id and created.subscription == sub.address
        assert portal.current_message().findtext("{*}ResourceId") == app.id
        assert app.current_message().findtext("{*}state") == "instantiated"
        assert sub.renew("2999-01-01T00:00:00Z").startswith("2999-01-01")
        sub.pause()
        assert sub.status()["state"] == "paused"
        sub.resume()
        sub.unsubscribe()
        try:
            sub.status()
            raise AssertionError("expected ResourceUnknownFault")
        except PortalFault as e:
            assert e.fault == "ResourceUnknownFault"


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_cddlm_watch_prints_events_as_they_arrive(live_portal):
    lp = live_portal()
    portal = Portal(lp.url)
    watch = [sys.executable, "-m", "cddlm.cli", "watch", "--portal", lp.url]
    everything = subprocess.Popen(watch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    lines: list[str] = []
    reading = reader(everything, lines)
    try:
        assert everything.stderr.readline().startswith("watching every application")   # set up
        app = portal.create(name="watched")
        one = subprocess.Popen(watch + ["watched"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
        _wait(lambda: len(live_subscriptions(lp.state_dir)) == 3, 20, "watch APP subscribed")
        app.initialize(NATIVE, body=etree.fromstring(SLEEPER))
        app.run()
        app.wait_for("running", timeout=20)
        app.terminate("seen")
        out, _ = one.communicate(timeout=20)                  # it ends with the application
        assert one.returncode == 0
        assert [line.split()[-1] for line in out.splitlines()] == ["#1", "#2", "#3", "#4"]
        assert "running -> terminated" in out.splitlines()[-1]
        _wait(lambda: any("running -> terminated" in line for line in lines), 20, "watch saw it all")
        everything.send_signal(signal.SIGINT)                 # Ctrl-C: unsubscribe and stop
        assert everything.wait(timeout=20) == 0
        reading.join(timeout=5)
    finally:
        if everything.poll() is None:
            everything.kill()
    mine = [line for line in lines if " watched " in " %s " % line]
    assert "created" in mine[0] and app.id in mine[0]
    assert [line.split()[-1] for line in mine[1:]] == ["#1", "#2", "#3", "#4"]
    assert live_subscriptions(lp.state_dir) == []             # nothing left behind


def test_watching_every_application_pages_through_them_and_skips_the_terminated(live_portal):
    """``cddlm watch`` without an application follows every application that may still change,
    however many (listed page by page), not the newest the ``applications`` property holds."""
    import io
    from cddlm.client import Listener
    from cddlm.follow import Follower
    lp = live_portal()
    portal = Portal(lp.url)
    apps = [portal.create(name="paged-%d" % i) for i in range(5)]
    apps[1].terminate("done with it")
    apps[1].wait_for("terminated", timeout=20)
    out = io.StringIO()
    with Listener("127.0.0.1", 0) as listener:
        follower = Follower(portal, listener, out)
        try:
            follower.follow_portal(page=2)       # three pages
            followed = set(follower.subscriptions) - {"portal"}
            assert followed == {a.id for i, a in enumerate(apps) if i != 1}
            assert {follower.labels[a] for a in followed} == {"paged-0", "paged-2", "paged-3",
                                                              "paged-4"}
            assert len(live_subscriptions(lp.state_dir)) == 5
        finally:
            follower.close()
    assert live_subscriptions(lp.state_dir) == []
