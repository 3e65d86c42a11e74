"""The push path alone: with the front portal's own looks at its hosts minutes apart (its liveness
pass and its host monitor), a component killed on its host reaches the front application
within 2 s, through the host portal's Lifecycle notification to ``/cddlm/agents/HOST``."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cddlm import ns
from cddlm.client import Portal
from tests.multihost.cluster import MultiHost
from tests.multihost.test_delegation import spread
from tests.multihost.test_failures import remote_pids

# seconds between the front's own looks (liveness pass, host monitor): longer than the test
# takes to get to the kill on any machine (at 60 s, a slow start of the three portals on a
# loaded machine could leave the premise, checked below, unmet)
LOOK_EVERY = 300.0


@pytest.fixture
def quiet_front(tmp_path):
    # the host monitor looks every lease / 4 seconds; the later --liveness-interval wins
    before = time.monotonic()       # the front starts after this: its first look is later
    with MultiHost(tmp_path, n=2, lease=4 * LOOK_EVERY,
                   front_args=["--liveness-interval", str(LOOK_EVERY)]) as mh:
        yield mh, before


def test_a_remote_failure_reaches_the_front_through_notifications_alone(quiet_front):
    quiet_front, before = quiet_front
    front = Portal(quiet_front.front.url, failover=False)
    app = front.create(name="push")
    app.initialize(ns.NATIVE, body=spread(2))
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    victim = quiet_front.hosts[0]
    (path, pid), = remote_pids(victim).items()
    assert victim.runs_here(pid)        # the process of the host's namespace
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    state = app.wait_for("failed", timeout=10, interval=0.05)
    seen = time.monotonic() - killed
    assert state == "failed", app.ping()
    assert seen <= 2.0, "the failure took %.1f s to reach the front" % seen
    # (state() reads the record, it checks nothing); and no look of the front's own saw it:
    # the first comes LOOK_EVERY seconds after the front started
    assert time.monotonic() - before < LOOK_EVERY
    reason = app.ping()["terminationInfo"]["reason"]
    assert "host %s" % victim.name in reason and path in reason, reason
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated"
