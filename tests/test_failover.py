"""Two live portals (``cddlm portal serve`` subprocesses) on one PostgreSQL store: they find
each other (``ext:portals``), and when the one a client talks to is killed, ``cddlm.client``
fails over to the other, rebinds its application EPR and reaches its subscription's manager
there, and the notifications that follow name the live portal; and what one portal changes,
the other serves at once."""

from __future__ import annotations

import signal
import time

import pytest

from cddlm import ns
from cddlm.client import Listener, Portal, Unreachable
from tests.conftest import free_port, pg_schema_url, postgres_available

pytestmark = pytest.mark.skipif(not postgres_available(),
                                reason="portals sharing a store need PostgreSQL; none answers on "
                                       "127.0.0.1:5432 (database test, trust auth)")


@pytest.fixture
def two_portals(live_portal, tmp_path):
    with pg_schema_url() as url:
        shared = ["--hosts-dir", str(tmp_path / "hosts"), "--heartbeat", "0.5"]
        a, b = live_portal(db=url, extra=shared), live_portal(db=url, extra=shared)
        yield a, b
        a.stop()        # before the schema is dropped under them
        b.stop()


def test_the_client_fails_over_and_rebinds_when_its_portal_dies(two_portals):
    a, b = two_portals
    client = Portal(b.url)
    assert client.peers == [a.url]                      # learnt from ext:portals
    app = client.create(name="ha")
    assert app.reference.address.startswith(b.url.rsplit("/cddlm/", 1)[0] + "/")
    with Listener() as listener:
        sub = app.subscribe(listener.url("ha"))
        assert sub.address.startswith(b.url.rsplit("/cddlm/", 1)[0] + "/")
        b.stop(signal.SIGKILL)                          # no goodbye: its rows stay behind
        assert app.state() == "instantiated"            # the call went to a, through a new view
        base_a = a.url.rsplit("/cddlm/", 1)[0]
        assert client.url == a.url and app.reference.address.startswith(base_a + "/")
        assert app.id == client.lookup("ha").id
        # notifications name the EPRs the subscriber used (spec 6.3), b's, while b may live;
        # once b has left the store's heartbeats (three of them) they name a, where its calls go
        deadline = time.monotonic() + 10
        while client.refresh_peers():
            assert time.monotonic() < deadline, "b is still among the live portals"
            time.sleep(0.2)
        app.terminate("failed over")
        assert app.wait_for("terminated", timeout=20) == "terminated"
        event = listener.get(timeout=20)
        assert event is not None and event.state == "terminated" and event.sequence == 2
        assert event.producer == app.reference.address   # the notification names a's view
        assert event.subscription.startswith(base_a + "/cddlm/subscriptions/")
        deadline = time.monotonic() + 10                # the manager, reached through a,
        while sub.status()["delivered"] != "1":         # records the delivery once it is done
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert sub.address.startswith(base_a + "/")
        sub.unsubscribe()
    assert client.refresh_peers() == []                 # b's heartbeat went stale: a alone
    portals = client.property("portals", ns.EXT)[0]
    assert len(portals) == 1 and portals[0].get("self") == "true"


def test_a_refused_connection_is_told_apart_and_not_retried_without_peers(two_portals):
    a, _ = two_portals
    client = Portal(a.url, failover=False)
    client._bind("http://127.0.0.1:%d/cddlm/portal" % free_port())     # nothing listens there
    with pytest.raises(Unreachable) as info:
        client.create(name="nowhere")
    assert info.value.sent is False                      # refused: it never reached a portal


def test_a_portal_serves_another_portals_changes_at_once(two_portals):
    """Each portal answers state reads from the row it read last while nothing has changed it;
    a change committed through the other portal reaches it as a PostgreSQL notice. Read
    through both portals side by side, the terminated state shows on the second within a
    quarter of a second of the first, for each of three applications (rows are held for a
    second at most: without the notices the lag would be anywhere up to that second)."""
    a, b = two_portals
    on_a, on_b = Portal(a.url), Portal(b.url)
    for n in range(3):
        app_a = on_a.create(name="seen-%d" % n)
        app_b = on_b.lookup("seen-%d" % n)
        assert app_b.reference.address.startswith(b.url.rsplit("/cddlm/", 1)[0] + "/")
        for _ in range(20):                 # both portals now hold the row
            assert app_a.state() == app_b.state() == "instantiated"
        app_a.terminate()
        # how long b went on answering the held row after a answered the change, at least:
        # from the end of a's first answer "terminated" to the start of b's last answer not
        # (the requests' own times, long on a loaded machine, are not counted as b's lag)
        fresh_a = stale_b = None
        seen_b = False
        deadline = time.monotonic() + 30
        while not (fresh_a is not None and seen_b) and time.monotonic() < deadline:
            if fresh_a is None and app_a.state() == "terminated":
                fresh_a = time.monotonic()
            asked = time.monotonic()
            if not seen_b:
                seen_b = app_b.state() == "terminated"
                if not seen_b and fresh_a is not None:
                    stale_b = asked
        assert fresh_a is not None and seen_b, (fresh_a, seen_b)
        lag = stale_b - fresh_a if stale_b is not None else 0.0
        assert lag < 0.25, lag
