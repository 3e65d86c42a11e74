"""A host's share goes as a batch (issue 28): each host portal is asked once to create, initialize,
run, terminate and destroy its sub-application, however many components it holds, and is
pinged far fewer times than it runs components; counted by the host portals' own /metrics."""

from __future__ import annotations

import time

from lxml import etree

from cddlm import ns
from cddlm.application.users import UsersFile
from cddlm.client import Portal
from tests.multihost.cluster import FRONT_PASSWORD, FRONT_USER, MultiHost
from tests.multihost.test_delegation import host_portal_client
from tests.ops.test_metrics import samples, scrape

N = ns.NATIVE
PER_HOST = 40
OPERATIONS = ("create", "initialize", "run", "terminate", "destroy")


def pinned(hosts: list[str], per_host: int) -> etree._Element:
    root = etree.Element("{%s}application" % N, nsmap={None: N})
    for host in hosts:
        for i in range(per_host):
            c = etree.SubElement(root, "{%s}component" % N, name="%s-%d" % (host, i), type="process")
            argv = etree.SubElement(c, "{%s}attribute" % N, name="argv")
            for word in ("sleep", "600"):
                etree.SubElement(argv, "{%s}item" % N).text = word
            etree.SubElement(c, "{%s}attribute" % N, name="host").text = host
    return root


def calls(base: str, token: str) -> dict[str, float]:
    """SOAP requests a portal answered, by operation (any outcome but the listed faults)."""
    status, _, text = scrape(base, token)
    assert status == 200, text
    out: dict[str, float] = {}
    for (name, labels), value in samples(text).items():
        if name == "cddlm_requests_total":
            labels = dict(labels)
            key = labels["operation"] if labels["outcome"] == "ok" else \
                "%s %s" % (labels["operation"], labels["outcome"])
            out[key] = out.get(key, 0) + value
    return out


def metrics_tokens(tmp_path, n: int) -> dict[str, str]:
    """The host portals' users (the front, and someone to read /metrics): host -> token."""
    tokens = {}
    for i in range(1, n + 1):
        users = UsersFile(str(tmp_path / ("h%d-users.json" % i)))
        users.add(FRONT_USER, FRONT_PASSWORD, "user", digest=True)
        users.add("ops", "ops-secret-1", "admin")
        tokens["h%d" % i] = users.new_token("ops", "metrics")
    return tokens


def test_each_host_portal_is_asked_once_per_step_of_its_share(tmp_path):
    tokens = metrics_tokens(tmp_path, 3)
    # the front's liveness pass pings too: seldom here, so that the rounds' pings are counted
    with MultiHost(tmp_path, n=3, front_args=["--liveness-interval", "5"]) as mh:
        bases = {h.name: h.url.rsplit("/cddlm/", 1)[0] for h in mh.hosts}
        before = {name: calls(base, tokens[name]) for name, base in bases.items()}
        app = Portal(mh.front.url, failover=False).create()
        app.initialize(ns.NATIVE, body=pinned(sorted(bases), PER_HOST))
        app.run()
        assert app.wait_for("running", timeout=120) == "running", app.ping()
        for h in mh.hosts:
            (sub,) = host_portal_client(h).applications()
            assert sum(c["state"] == "running" for c in sub.components()) == PER_HOST
        app.terminate()
        assert app.wait_for("terminated", timeout=120) == "terminated"
        for name, base in bases.items():
            after = calls(base, tokens[name])
            asked = {op: after.get(op, 0) - before[name].get(op, 0) for op in set(after) | set(before[name])}
            for op in OPERATIONS:
                assert asked.get(op) == 1, (name, op, asked)
            faults = {op: n for op, n in asked.items() if " " in op and n}
            assert not faults, (name, faults)
            # the pings of rounds and liveness passes, not one (or more) per component and step
            assert asked.get("ping", 0) < PER_HOST, (name, asked)


def test_a_running_share_is_not_pinged_by_every_liveness_pass_while_its_host_notifies(tmp_path):
    """The front's liveness pass (every 0.2 s here) pings a share it saw all running again only
    after a notification from its host portal, or after remote.CALM seconds: its host portal
    notifies the front of every change (the push path, proven alone in test_push.py)."""
    tokens = metrics_tokens(tmp_path, 2)
    with MultiHost(tmp_path, n=2, front_args=["--liveness-interval", "0.2"]) as mh:
        bases = {h.name: h.url.rsplit("/cddlm/", 1)[0] for h in mh.hosts}
        app = Portal(mh.front.url, failover=False).create()
        app.initialize(ns.NATIVE, body=pinned(sorted(bases), 5))
        app.run()
        assert app.wait_for("running", timeout=120) == "running", app.ping()
        # the pass that sees the shares running first, then a window of 30 passes
        time.sleep(0.5)
        before = {name: calls(base, tokens[name]).get("ping", 0) for name, base in bases.items()}
        time.sleep(6.0)
        for name, base in bases.items():
            pinged = calls(base, tokens[name]).get("ping", 0) - before[name]
            assert pinged <= 5, (name, pinged)     # (a ping every pass: 12 to 30)
        assert app.state() == "running"
        app.terminate()
        assert app.wait_for("terminated", timeout=120) == "terminated"
