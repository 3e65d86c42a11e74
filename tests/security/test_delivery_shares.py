"""One tenant cannot take every notification sender (issue 27, item 9). Alice makes 95
subscriptions (within her quota) to consumers that never answer: half to a socket that accepts
and stays silent, half to one whose queue is full (connections are never accepted). Bob's one
subscription, to a live listener, must still hear of each change of his application within a
second, throughout."""

from __future__ import annotations

import contextlib
import datetime as dt
import socket
import time
from typing import Iterator

from cddlm.client import Credentials, Listener, Portal
from tests.notify.helpers import black_hole
from tests.security import wire
from tests.security.conftest import PASSWORDS

SUBSCRIPTIONS = 95
ATTACK_SECONDS = 15.0


@contextlib.contextmanager
def never_accepting() -> Iterator[str]:
    """An address whose listen queue is full: a connection attempt waits until it times out."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    port = sock.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield "http://127.0.0.1:%d/stuck" % port
    finally:
        for s in fillers + [sock]:
            s.close()


def client(net, user: str) -> Portal:
    return Portal(net.url, credentials=Credentials(user, PASSWORDS[user]), failover=False)


def latency(event) -> float:
    """Seconds from the event's commit (its api:timestamp) to its arrival at the listener."""
    stamp = dt.datetime.fromisoformat(event.timestamp.replace("Z", "+00:00")).timestamp()
    return event.received - stamp


def test_one_tenant_cannot_take_every_notification_sender(net):
    alice, bob = client(net, "alice"), client(net, "bob")
    with black_hole() as silent, never_accepting() as stuck, Listener() as listener:
        target = alice.create(name="noisy")
        subs = [target.subscribe("%s/%d" % (silent if i % 2 else stuck, i))
                for i in range(SUBSCRIPTIONS)]
        target.initialize(wire.NATIVE, body=wire.fragment(wire.sleeper()))
        target.run()                       # every one of the 95 has events to (not) deliver
        target.wait_for("running", timeout=30)
        latencies: list[tuple[str, float]] = []
        started = time.monotonic()
        rounds = 0
        while time.monotonic() - started < ATTACK_SECONDS:
            rounds += 1
            app = bob.create(name="quiet-%d" % rounds)
            app.subscribe(listener.url("bob-%d" % rounds))
            app.initialize(wire.NATIVE, body=wire.fragment(wire.sleeper()))
            app.run()
            app.wait_for("running", timeout=30)
            app.terminate()
            app.wait_for("terminated", timeout=30)
            for _ in range(3):              # initialized, running, terminated
                event = listener.get(timeout=30)
                assert event is not None, "bob's notification never came (round %d)" % rounds
                latencies.append((event.state, latency(event)))
        # the attack was on all along: alice's requests kept senders waiting (2 to 5 s each)
        failing = sum(1 for sub in subs if sub.status().get("lastError"))
        target.terminate()
        assert failing >= ATTACK_SECONDS * 2 / 5, "only %d of alice's attempts failed" % failing
    worst = max(seconds for _, seconds in latencies)
    print("bob's notifications: worst %.3f s of %d; %d of alice's subscriptions failing"
          % (worst, len(latencies), failing))
    assert rounds >= 3 and worst < 1.0, "bob waited %.2f s (%s)" % (worst, latencies)
