"""A front portal delegates each host's share of an application to that host's portal: the
components run in the host's own network namespace (/proc/PID/ns/net), the front reports them
per host with their sub-application, and terminate stops every one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import requests
from lxml import etree

from cddlm import ns
from cddlm.client import Credentials, Portal
from tests.conftest import ROOT
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
    if n < 2 or pinned:
        return root
    group = etree.SubElement(root, "{%s}group" % N, name="spread")
    for name in names:
        etree.SubElement(group, "{%s}member" % N).text = name
    etree.SubElement(root, "{%s}policy" % N, type="anti-collocation", level="host", group="spread",
                     hard="true")
    return root


def cddlm_status(url: str, app_id: str) -> str:
    done = subprocess.run([sys.executable, "-m", "cddlm.cli", "status", app_id], capture_output=True,
                          text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, CDDLM_PORTAL=url, XDG_CONFIG_HOME="/nonexistent"))
    assert done.returncode == 0, done.stderr
    return done.stdout


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
        # the front names, per component, its host and the sub-application running it
        assert c["subApplicationId"] == subs[0].id and c["subApplication"] == subs[0].reference.address
    (info,) = app.property("deploymentInfo")
    refs = {c.get("path"): c.find("{%s}applicationReference" % ns.API)
            for c in info.iterfind("{%s}placement/{%s}component" % (ns.API, ns.API))}
    for path, c in comps.items():
        rid = refs[path].findtext("{%s}ReferenceParameters/{%s}ResourceId" % (ns.WSA, ns.API))
        assert rid == c["subApplicationId"]
    status = cddlm_status(cluster.front.url, app.id)
    assert "SUB-APPLICATION" in status and all(c["subApplicationId"] in status for c in comps.values())
    # push: the front portal takes host portals' notifications (a hint to ping now) unsigned
    base = cluster.front.url.rsplit("/cddlm/", 1)[0]
    for host in ("h1", "no-such-host"):
        r = requests.post(base + "/cddlm/agents/" + host, data=b"<anything/>", timeout=10)
        assert r.status_code == 202
    assert app.state() == "running"
    app.terminate("done")
    assert app.wait_for("terminated", timeout=60) == "terminated"
    # every sub-application is terminated and destroyed, and its processes are gone
    for host in cluster.hosts:
        assert wait_until(lambda: host_portal_client(host).applications() == [], 20)


SEQUENCE = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="steps" type="sequence">
    <component name="a" type="process">
      <attribute name="argv"><item>sleep</item><item>600</item></attribute>
      <attribute name="host">h1</attribute>
    </component>
    <component name="b" type="process">
      <attribute name="argv"><item>sh</item><item>-c</item><item>sleep 2; echo up; exec sleep 600</item></attribute>
      <attribute name="readiness"><item name="log">up</item></attribute>
      <attribute name="host">h2</attribute>
    </component>
    <component name="c" type="process">
      <attribute name="argv"><item>sleep</item><item>600</item></attribute>
      <attribute name="host">h1</attribute>
    </component>
  </component>
</application>"""


def started_at(pid: int) -> int:
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])     # clock ticks after boot


def test_sequence_order_holds_across_hosts(cluster):
    front = Portal(cluster.front.url, failover=False)
    app = front.create()
    app.initialize(ns.NATIVE, text=SEQUENCE)
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    h1, h2 = cluster.hosts[0], cluster.hosts[1]
    # a and c share h1 but a sequence orders them around b (on h2): two start groups, two
    # sub-applications on h1
    subs = host_portal_client(h1).applications()
    assert len(subs) == 2
    pids = {c["path"]: c["pid"] for s in subs + host_portal_client(h2).applications()
            for c in s.components() if c["pid"]}
    ticks = os.sysconf("SC_CLK_TCK")
    assert started_at(pids["steps/c"]) - started_at(pids["steps/b"]) >= 1.5 * ticks, pids
    assert started_at(pids["steps/b"]) >= started_at(pids["steps/a"])
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated"


CROSS = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="app" type="sequence">
    <component name="db" type="process">
      <attribute name="argv"><item>sleep</item><item>600</item></attribute>
      <attribute name="host">h2</attribute>
    </component>
    <component name="web" type="process">
      <attribute name="argv"><item>sleep</item><item>600</item></attribute>
      <attribute name="env"><item name="DB_PID"><ref path="app/db/pid" lazy="true"/></item></attribute>
      <attribute name="host">h1</attribute>
    </component>
  </component>
</application>"""


def environ(pid: int) -> dict[bytes, bytes]:
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)


def test_a_lazy_reference_reaches_a_runtime_value_on_another_host(cluster):
    front = Portal(cluster.front.url, failover=False)
    app = front.create()
    app.initialize(ns.NATIVE, text=CROSS)
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    h1, h2 = cluster.hosts[0], cluster.hosts[1]
    (db,) = [c for s in host_portal_client(h2).applications() for c in s.components() if c["pid"]]
    (web,) = [c for s in host_portal_client(h1).applications() for c in s.components() if c["pid"]]
    # the web tier on h1 got the pid of the database on h2, through h2's portal
    assert environ(web["pid"])[b"DB_PID"] == str(db["pid"]).encode()
    assert h2.runs_here(db["pid"]) and h1.runs_here(web["pid"])
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated"
