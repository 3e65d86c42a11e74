"""A front portal delegates each host's share of an application to that host's portal: the
components run in the host's own network namespace (/proc/PID/ns/net), the front reports them
per host with their sub-application, and terminate stops every one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lxml import etree

from cddlm import ns
from cddlm.client import Credentials, Portal
from tests.multihost.cluster import FRONT_PASSWORD, FRONT_USER, MultiHost
from tests.netns import wait_until

N = ns.NATIVE


def spread(n: int, seconds: int = 600, pinned: dict[str, str] | None = None) -> etree._Element:
    """``n`` sleep components in an anti-collocation group (one per host when n <= hosts)."""
    root = etree.Element("{%s}application" % N, nsmap={None: N})
    names = ["s%d" % i for i in range(n)]
    for name in names:
        c = etree.SubElement(root, "{%s}component" % N, name=name, type="process")
        argv = etree.SubElement(c, "{%s}attribute" % N, name="argv")
        for word in ("sleep", str(seconds)):
            etree.SubElement(argv, "{%s}item" % N).text = word
        if pinned and name in pinned:
            etree.SubElement(c, "{%s}attribute" % N, name="host").text = pinned[name]
    group = etree.SubElement(root, "{%s}group" % N, name="spread")
    for name in names:
        etree.SubElement(group, "{%s}member" % N).text = name
    etree.SubElement(root, "{%s}policy" % N, type="anti-collocation", level="host", group="spread",
                     hard="true")
    return root


def host_portal_client(h) -> Portal:
    return Portal(h.url, failover=False, credentials=Credentials(FRONT_USER, FRONT_PASSWORD))


@pytest.fixture
def cluster(tmp_path):
    with MultiHost(tmp_path) as mh:
        yield mh


def test_an_application_spread_over_three_host_portals_runs_in_their_namespaces(cluster):
    front = Portal(cluster.front.url, failover=False)
    app = front.create(name="spread")
    app.initialize(ns.NATIVE, body=spread(3))
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    comps = {c["path"]: c for c in app.components()}
    assert sorted(c["host"] for c in comps.values()) == ["h1", "h2", "h3"]
    by_name = {h.name: h for h in cluster.hosts}
    for path, c in comps.items():
        host = by_name[c["host"]]
        # the host portal runs it, in a sub-application made for this host's share
        remote = host_portal_client(host)
        subs = remote.applications()
        assert len(subs) == 1
        (rc,) = [x for x in subs[0].components() if x["path"] == path]
        assert rc["state"] == "running" and rc["pid"]
        assert host.runs_here(rc["pid"]), (path, host.name)
        for other in cluster.hosts:
            if other is not host and other.netns is not None:
                assert not other.runs_here(rc["pid"])
        pid = rc["pid"]
        assert os.path.exists("/proc/%d" % pid)
    app.terminate("done")
    assert app.wait_for("terminated", timeout=60) == "terminated"
    # every sub-application is terminated and destroyed, and its processes are gone
    for host in cluster.hosts:
        assert wait_until(lambda: host_portal_client(host).applications() == [], 20)
