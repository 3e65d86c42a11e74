"""A portal with a datacenter of several local hosts: placement before enactment, each host
its own directory, the placement audit, capacity held and released, hosts marked down."""

from __future__ import annotations

import re

import os
import time

import pytest
import yaml
from lxml import etree

from cddlm import ns, xmlsafe
from cddlm.application.service import DescriptorInput
from cddlm.errors import PlacementError
from tests.conftest import WsgiClient, make_portal, _terminate_all
from tests.schemas import validate_envelope

DATACENTER = {
    "resources": ["cpu"],
    "levels": ["rack", "host"],
    "location": [
        {"name": "rack1", "level": "rack", "children": [
            {"name": "h1", "level": "host", "agent": "local", "capacity": {"cpu": 2}},
            {"name": "h2", "level": "host", "agent": "local", "capacity": {"cpu": 2}}]},
        {"name": "rack2", "level": "rack", "children": [
            {"name": "h3", "level": "host", "agent": "local", "capacity": {"cpu": 2}}]},
    ],
}


def descriptor(n: int, cpu: int = 1, policy: str = "", hard: bool = True) -> DescriptorInput:
    comps = "".join(
        '<component name="w%d" type="process"><attribute name="argv"><item>sleep</item>'
        '<item>300</item></attribute><attribute name="demand"><item name="cpu">%d</item>'
        '</attribute></component>' % (i, cpu) for i in range(n))
    members = "".join("<member>w%d</member>" % i for i in range(n))
    body = ('<application xmlns="urn:cddlm:lang:components:1">%s<group name="all">%s</group>%s'
            '</application>' % (comps, members, policy))
    return DescriptorInput(ns.NATIVE, body=xmlsafe.parse(body.encode()))


@pytest.fixture
def dc_portal(tmp_path):
    path = tmp_path / "dc.yaml"
    path.write_text(yaml.safe_dump(DATACENTER))
    p = make_portal(tmp_path, datacenter_file=str(path))
    yield p
    _terminate_all(p)
    p.stop()


def wait(service, app_id, state, timeout=15.0):
    deadline = time.monotonic() + timeout
    while service.get(app_id).state != state:
        assert time.monotonic() < deadline, service.get(app_id).state
        time.sleep(0.05)


def running_spread(portal, name: str):
    """Three components that must not share a host, running."""
    svc = portal.service
    app, _ = svc.create(name, None, [], portal.url)
    svc.initialize(app.id, descriptor(3, policy='<policy type="anti-collocation" level="host" group="all"/>'),
                   [], [])
    svc.run(app.id)
    wait(svc, app.id, "running")
    return svc, app


def test_anti_collocation_spreads_over_hosts_each_with_its_own_directory(dc_portal):
    svc, app = running_spread(dc_portal, "spread")
    placement = svc.get(app.id).placement["components"]
    hosts = {p["host"] for p in placement.values()}
    assert hosts == {"h1", "h2", "h3"}
    for path, where in placement.items():
        workdir = svc.resolve(app.id, path)["workdir"]
        assert os.path.join("hosts", where["host"], "apps") in workdir and os.path.isdir(workdir)
    audit = svc.get(app.id).placement["audit"]
    policy = audit["policies"][0]
    assert policy["met"] is True and sorted(policy["members"].values()) == ["h1", "h2", "h3"]


def test_audit_property_and_soft_violation_over_soap(dc_portal):
    svc = dc_portal.service
    app, view = svc.create("soft", None, [], dc_portal.url)
    # four components, three hosts: soft anti-collocation cannot hold for every pair
    svc.initialize(app.id, descriptor(4, policy='<policy type="anti-collocation" level="host" '
                                                'group="all" hard="false" weight="1"/>'), [], [])
    client = WsgiClient(dc_portal.wsgi)
    body = ('<soapenv:Envelope xmlns:soapenv="%s" xmlns:wsrf-rp="%s" xmlns:ext="%s"><soapenv:Body>'
            '<wsrf-rp:GetResourceProperty>ext:placementAudit</wsrf-rp:GetResourceProperty>'
            '</soapenv:Body></soapenv:Envelope>' % (ns.SOAP11_ENV, ns.WSRF_RP, ns.EXT))
    status, data = client.post("/cddlm/applications/" + view.id, body.encode())
    assert status == 200 and not validate_envelope(data, None)
    audit = etree.fromstring(data).find(".//{%s}placementAudit" % ns.EXT)
    policy = audit.find("{%s}policy" % ns.EXT)
    assert policy.get("met") == "false" and policy.get("hard") == "false"
    assert len(policy.findall("{%s}member" % ns.EXT)) == 4


def test_infeasible_placement_is_a_fault_and_enacts_nothing(dc_portal):
    svc = dc_portal.service
    app, _ = svc.create("too-big", None, [], dc_portal.url)
    with pytest.raises(PlacementError) as e:
        svc.initialize(app.id, descriptor(4, policy='<policy type="anti-collocation" level="host" group="all"/>'),
                       [], [])
    assert e.value.conflicts and "anti-collocation on all" in e.value.conflicts[0]
    # the conflicting policy is named once, with the group it is on (it was named twice)
    assert str(e.value).count("policy 0") == 1 and "anti-collocation on all" in str(e.value), e.value
    after = svc.get(app.id)
    assert after.state == "instantiated" and after.deployment is None
    assert not os.path.exists(os.path.join(dc_portal.settings.hosts_root, "h1", "apps"))


def test_capacity_is_held_until_termination(dc_portal):
    svc = dc_portal.service
    first, _ = svc.create("first", None, [], dc_portal.url)
    svc.initialize(first.id, descriptor(3, cpu=2), [], [])    # fills all three hosts
    second, _ = svc.create("second", None, [], dc_portal.url)
    with pytest.raises(PlacementError):
        svc.initialize(second.id, descriptor(1, cpu=1), [], [])
    svc.terminate(first.id)
    wait(svc, first.id, "terminated")
    svc.initialize(second.id, descriptor(1, cpu=1), [], [])
    assert svc.get(second.id).desired == "initialized"


def test_a_host_marked_down_fails_its_components_and_is_avoided(dc_portal):
    svc, app = running_spread(dc_portal, "victim")
    svc.mark_host("h2", True, "maintenance")
    wait(svc, app.id, "failed")
    info = svc.get(app.id).termination_info
    assert "host h2 is down" in info["reason"] and "maintenance" in info["reason"]
    assert {h["name"]: h["down"] for h in svc.dynamic_info()["hosts"]}["h2"] is True
    other, _ = svc.create("elsewhere", None, [], dc_portal.url)
    svc.initialize(other.id, descriptor(2), [], [])
    assert {p["host"] for p in svc.get(other.id).placement["components"].values()} <= {"h1", "h3"}
    svc.mark_host("h2", False)
    assert {h["name"]: h["down"] for h in svc.dynamic_info()["hosts"]}["h2"] is False


def live_dc_portal(live_portal, folder, datacenter: dict):
    """A live portal on ``datacenter`` (written to a file in ``folder``)."""
    path = folder / "dc.yaml"
    path.write_text(yaml.safe_dump(datacenter))
    return live_portal(extra=["--datacenter", str(path)])


def apart(folder, name: str, n: int, level: str = "host"):
    """A descriptor file of ``n`` components no two of which may share a ``level``."""
    path = folder / (name + ".xml")
    path.write_bytes(etree.tostring(descriptor(n, policy='<policy type="anti-collocation" '
                                                         'level="%s" group="all"/>' % level).body))
    return path


def test_host_and_audit_commands(live_portal, tmp_path):
    from tests.cli.helpers import cddlm
    lp = live_dc_portal(live_portal, tmp_path, DATACENTER)
    spread = apart(tmp_path, "spread", 2, "rack")
    cddlm("deploy", str(spread), "--name", "spread", portal=lp.url)
    out = cddlm("audit", "spread", portal=lp.url).stdout
    assert "anti-collocation at rack: met" in out and "rack1" in out and "rack2" in out
    out = cddlm("host", "ls", portal=lp.url).stdout
    assert all(re.search(r"^%s +local +up " % h, out, re.M) for h in ("h1", "h2", "h3"))
    cddlm("host", "down", "h3", "--reason", "disk", portal=lp.url)
    assert re.search(r"^h3 +local +down ", cddlm("host", "ls", portal=lp.url).stdout, re.M)
    assert "failed" in cddlm("status", "spread", portal=lp.url).stdout
    r = cddlm("host", "down", "nowhere", portal=lp.url, check=False)
    assert r.returncode == 1 and "unknown host" in r.stderr
    cddlm("host", "up", "h3", portal=lp.url)
    cddlm("terminate", "spread", portal=lp.url)


def test_create_hostname_is_the_default_host(dc_portal):
    svc = dc_portal.service
    app, _ = svc.create("pinned", "h3", [], dc_portal.url)
    svc.initialize(app.id, descriptor(2), [], [])
    assert {p["host"] for p in svc.get(app.id).placement["components"].values()} == {"h3"}
    with pytest.raises(Exception) as e:
        svc.create("nowhere", "h9", [], dc_portal.url)
    assert "not a host of this portal" in str(e.value)


def test_a_refused_placement_names_the_hosts_left_out_as_down(live_portal, tmp_path):
    """Hosts marked down (a killed host portal: unreachable) are left out of placement; a
    deploy whose hard policies then cannot hold is refused saying which, a bounded list, since
    that is the likely cause (the refusal named only the policy)."""
    from cddlm.client import Portal
    from tests.cli.helpers import cddlm
    many = {"resources": ["cpu"], "levels": ["host"], "location": [
        {"name": "h%d" % i, "level": "host", "agent": "local", "capacity": {"cpu": 2}}
        for i in range(1, 10)]}
    lp = live_dc_portal(live_portal, tmp_path, many)
    spread = apart(tmp_path, "spread", 3)
    cddlm("host", "down", "h2", "--reason", "unreachable since 10:00:00 UTC: cannot connect",
          portal=lp.url)
    portal = Portal(lp.url, failover=False)
    for h in ("h3", "h4", "h5", "h6", "h7", "h8"):
        portal.set_host_state(h, True, "maintenance")
    r = cddlm("deploy", str(spread), "--name", "spread", portal=lp.url, check=False)
    assert r.returncode == 1, r
    assert r.stderr.count("anti-collocation") == 1, r.stderr
    assert "hosts left out as down or unreachable: h2, h3, h4, h5, h6 and 2 more" in r.stderr, r.stderr
    # two hosts down, seven up, eight components: both named
    for h in ("h3", "h4", "h5", "h6", "h7"):
        portal.set_host_state(h, False)
    two = apart(tmp_path, "two", 8)
    r = cddlm("deploy", str(two), "--name", "two", portal=lp.url, check=False)
    assert r.returncode == 1 and "left out as down or unreachable: h2, h8;" in r.stderr, r.stderr
    # with no host down, the refusal says nothing of hosts
    portal.set_host_state("h2", False)
    portal.set_host_state("h8", False)
    ten = apart(tmp_path, "ten", 10)
    r = cddlm("deploy", str(ten), "--name", "ten", portal=lp.url, check=False)
    assert r.returncode == 1 and "anti-collocation" in r.stderr and "left out" not in r.stderr, r.stderr
    assert "ten" not in cddlm("ls", portal=lp.url).stdout
