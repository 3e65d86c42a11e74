"""A share run as soon as it is sent (early run: ``RemoteRunner._starts_with_deploy``): its host
portal deploys and starts it in one go, and the front shows each component as its host portal
reports it (starting, running) as soon as it looks, not ``deployed`` until every host has
deployed and the front's own start comes."""

from __future__ import annotations

import os
import signal

from cddlm import ns
from cddlm.client import Portal
from tests.multihost.cluster import MultiHost
from tests.multihost.test_delegation import host_portal_client, spread
from tests.netns import wait_until


def states(app) -> dict[str, str]:
    return {c["path"]: c["state"] for c in app.components()}


def test_a_share_running_on_its_host_is_running_at_the_front_before_the_other_hosts_deploy(tmp_path):
    # a long lease: the frozen host portal below is slow, not down
    with MultiHost(tmp_path, n=2, lease=120.0) as mh:
        fast, slow = mh.hosts
        front = Portal(mh.front.url, failover=False)
        os.kill(slow.proc.pid, signal.SIGSTOP)      # it answers nothing until SIGCONT
        try:
            app = front.create()
            app.initialize(ns.NATIVE, body=spread(2, pinned={"s0": fast.name, "s1": slow.name}))
            app.run()

            def there() -> str | None:
                subs = host_portal_client(fast).applications()
                return next((c["state"] for s in subs for c in s.components() if c["path"] == "s0"),
                            None)
            assert wait_until(lambda: there() == "running", 60), there()
            # the front's deploy look sees it running: so is it at the front, while the slow
            # host's share is not even sent
            assert wait_until(lambda: states(app)["s0"] == "running", 20), states(app)
            assert states(app)["s1"] == "pending" and app.state() == "instantiated"
        finally:
            os.kill(slow.proc.pid, signal.SIGCONT)
        assert app.wait_for("running", timeout=60) == "running", app.ping()
        assert states(app) == {"s0": "running", "s1": "running"}
        app.terminate()
        assert app.wait_for("terminated", timeout=60) == "terminated"
        assert all(host_portal_client(h).applications() == [] for h in mh.hosts)
