"""A real portal (``cddlm portal serve`` as a subprocess on a real port) driven by zeep, by the
client library and by raw lxml envelopes over HTTP."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import requests
import zeep
from lxml import etree

from cddlm import ns
from cddlm.client import Portal, PortalFault
from tests.conftest import free_port

API = "{%s}" % ns.API
NATIVE = "urn:cddlm:lang:components:1"
SLEEPER = etree.fromstring(b'<application xmlns="urn:cddlm:lang:components:1">'
                           b'<component name="s" type="process"><attribute name="argv">'
                           b'<item>sleep</item><item>300</item></attribute></component></application>')


def envelope(body: str, headers: str = "") -> bytes:
    return ('<soapenv:Envelope xmlns:soapenv="%s" xmlns:api="%s" xmlns:wsa="%s" xmlns:wsrf-rp="%s">'
            '<soapenv:Header>%s</soapenv:Header><soapenv:Body>%s</soapenv:Body></soapenv:Envelope>'
            % (ns.SOAP11_ENV, ns.API, ns.WSA, ns.WSRF_RP, headers, body)).encode()


def post(url: str, body: str, headers: str = "", session=None) -> tuple[int, etree._Element]:
    r = (session or requests).post(url, data=envelope(body, headers),
                                   headers={"Content-Type": "text/xml; charset=utf-8"}, timeout=30)
    return r.status_code, etree.fromstring(r.content)


def test_lifecycle_with_zeep_from_the_served_wsdl(live_portal):
    lp = live_portal()
    client = zeep.Client(lp.url + "?wsdl")
    created = client.service.create(name="zeep-app")
    assert created.ResourceId.startswith("urn:uuid:")
    address = created.applicationReference.Address._value_1
    assert address.startswith(lp.url.rsplit("/cddlm/", 1)[0] + "/cddlm/applications/")
    found = client.service.lookup(name="zeep-app")
    assert found.Address._value_1 == address
    app = client.create_service("{%s}ApplicationBinding" % ns.API_WSDL, address)
    app.initialize(descriptor={"language": NATIVE, "body": {"_value_1": SLEEPER}})
    app.run()
    deadline = time.monotonic() + 15
    while app.GetResourceProperty(etree.QName(ns.API, "state"))[0] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    ping = app.ping()
    assert ping.state == "running"
    assert ping.health._value_1[0].healthy is True
    with pytest.raises(zeep.exceptions.Fault) as fault:
        app.destroy()
    assert fault.value.detail[0].tag == API + "WrongStateFault"
    app.terminate(reason="zeep says so")
    deadline = time.monotonic() + 15
    while app.GetResourceProperty(etree.QName(ns.API, "state"))[0] != "terminated":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    app.destroy()
    with pytest.raises(zeep.exceptions.Fault) as gone:
        client.service.lookup(ResourceId=created.ResourceId)
    assert gone.value.detail[0].tag == API + "NoSuchApplicationFault"


def test_listing_with_zeep_and_the_client(live_portal):
    """ext:listApplications from the served WSDL (a generated client's typed call) and through
    cddlm.client, page by page, and `cddlm ls` in one request."""
    lp = live_portal()
    client = zeep.Client(lp.url + "?wsdl")
    ids = [client.service.create(name="listed-%d" % i).ResourceId for i in range(3)]
    first = client.service.listApplications(limit=2)
    assert [a.id for a in first.application] == ids[:2]
    assert first.application[0].name == "listed-0" and first.application[0].state == "instantiated"
    assert first.application[0].owner == "admin" and first.application[0].created.year >= 2024
    rest = client.service.listApplications(limit=2, after=first.next)
    assert [a.id for a in rest.application] == ids[2:] and rest.next is None
    with pytest.raises(zeep.exceptions.Fault) as refused:
        client.service.listApplications(after="no-such-marker")
    assert refused.value.detail[0].tag == API + "BadArgumentFault"
    portal = Portal(lp.url, failover=False)
    assert [r["id"] for r in portal.each_application(1)] == ids
    assert portal.list_applications() == (portal.list_applications(10)[0], None)


def test_lifecycle_with_raw_envelopes(live_portal):
    lp = live_portal()
    status, doc = post(lp.url, "<api:createRequest><api:name>raw</api:name></api:createRequest>",
                       "<wsa:MessageID>urn:uuid:raw-1</wsa:MessageID>")
    assert status == 200
    assert doc.findtext(".//{%s}RelatesTo" % ns.WSA) == "urn:uuid:raw-1"
    address = doc.findtext(".//{%s}Address" % ns.WSA)
    descriptor = etree.tostring(SLEEPER).decode()
    status, doc = post(address, '<api:initializeRequest><api:descriptor language="%s"><api:body>%s'
                                '</api:body></api:descriptor></api:initializeRequest>' % (NATIVE, descriptor))
    assert status == 200 and doc.find(".//" + API + "initializeResponse") is not None
    status, doc = post(address, "<api:runRequest/>")
    assert status == 200
    deadline = time.monotonic() + 15
    while True:
        _, doc = post(address, "<wsrf-rp:GetResourceProperty>api:state</wsrf-rp:GetResourceProperty>")
        if doc.findtext(".//" + API + "state") == "running":
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    _, doc = post(address, "<api:terminateRequest/>")
    assert doc.find(".//" + API + "terminateResponse") is not None


def test_client_library_and_view_rebind(live_portal):
    lp = live_portal()
    portal = Portal(lp.url)
    app = portal.create(name="lib")
    app.initialize(NATIVE, body=SLEEPER, properties={"colour": "blue"})
    app.run()
    assert app.wait_for("running", timeout=15) == "running"
    assert app.resolve("s/argv") == ["sleep", "300"]
    assert isinstance(int(app.resolve("s/pid")), int)
    again = portal.rebind(app.reference)
    assert again.reference == app.reference
    app.destroy_view()
    with pytest.raises(PortalFault) as gone:
        app.state()
    assert gone.value.fault == "ResourceUnknownFault"
    found = portal.lookup("lib")
    assert found.id == app.id and found.reference.address != app.reference.address
    found.terminate()
    assert found.wait_for("terminated", timeout=15) == "terminated"
    found.destroy()


@pytest.mark.parametrize("how", ["graceful", "sigkill"])
def test_restart_keeps_every_epr_and_state(live_portal, tmp_path, how):
    port = free_port()
    state = tmp_path / "state"
    lp = live_portal(port=port, state_dir=state)
    portal = Portal(lp.url)
    running = portal.create(name="keeps-running")
    running.initialize(NATIVE, body=SLEEPER)
    running.run()
    running.wait_for("running", timeout=15)
    pid = int(running.resolve("s/pid"))
    waiting = portal.create(name="waits")
    history = running.history()
    lp.stop(signal.SIGTERM if how == "graceful" else signal.SIGKILL)
    os.kill(pid, 0)   # the component survived its portal
    lp2 = live_portal(port=port, state_dir=state)
    assert lp2.url == lp.url
    portal2 = Portal(lp2.url)
    same = portal2.application(running.reference)   # the EPR handed out before the restart
    assert same.state() == "running"
    assert same.history() == history
    assert int(same.resolve("s/pid")) == pid
    assert portal2.application(waiting.reference).state() == "instantiated"
    os.kill(pid, signal.SIGKILL)   # it dies while the restarted portal watches it
    assert same.wait_for("failed", timeout=15) == "failed"
    info = same.ping()["terminationInfo"]
    assert info["component"] == "s" and info["normal"] is False
    assert "adopted after a portal restart" in info["reason"]   # not this portal's child
    same.terminate()
    assert same.wait_for("terminated", timeout=15) == "terminated"


def test_bad_input_changes_nothing_and_disturbs_nobody(live_portal):
    lp = live_portal()
    portal = Portal(lp.url)
    app = portal.create(name="bystander")
    address = app.reference.address
    errors: list[str] = []
    seen = {"n": 0}
    stop = threading.Event()

    def bystander():
        session = requests.Session()
        while not stop.is_set():
            try:
                status, doc = post(address, "<wsrf-rp:GetResourceProperty>api:state"
                                   "</wsrf-rp:GetResourceProperty>", session=session)
                if status != 200 or doc.findtext(".//" + API + "state") != "instantiated":
                    errors.append("%d %s" % (status, etree.tostring(doc)[:200]))
                seen["n"] += 1
            except Exception as e:  # noqa: BLE001 - any error is a finding
                errors.append(repr(e))

    thread = threading.Thread(target=bystander)
    thread.start()
    bomb = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;">'
            '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;">]><soapenv:Envelope xmlns:soapenv="%s"><soapenv:Body>'
            '<api:createRequest xmlns:api="%s"><api:name>&c;</api:name></api:createRequest>'
            '</soapenv:Body></soapenv:Envelope>' % (ns.SOAP11_ENV, ns.API))
    bad = [b"<not-closed", bomb.encode(), envelope("<api:createRequest><api:bogus/></api:createRequest>"),
           envelope("<api:createRequest><api:name>bystander</api:name></api:createRequest>"),
           envelope("<api:initializeRequest/>"), envelope("<x:y xmlns:x='urn:x'/>"),
           envelope("<wsrf-rp:GetResourceProperty>nope:state</wsrf-rp:GetResourceProperty>"),
           envelope('<api:createRequest><api:options><api:option name="urn:a"><api:string>1</api:string>'
                    '</api:option><api:option name="urn:a"><api:string>2</api:string></api:option>'
                    '</api:options></api:createRequest>')]
    try:
        for body in bad:
            r = requests.post(lp.url, data=body, headers={"Content-Type": "text/xml"}, timeout=30)
            assert r.status_code == 500, body[:80]
            doc = etree.fromstring(r.content)
            assert doc.find(".//{%s}Fault" % ns.SOAP11_ENV) is not None
        big = b"<x>" + b"a" * (10 * 1024 * 1024 + 10) + b"</x>"
        started = time.monotonic()
        r = requests.post(lp.url, data=big, headers={"Content-Type": "text/xml"}, timeout=60)
        assert r.status_code == 500 and b"exceeds the limit" in r.content
        assert time.monotonic() - started < 10
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:3]
    assert seen["n"] > 0
    assert [a.id for a in portal.applications()] == [app.id]


def test_wsdl_imports_resolve_over_http(live_portal):
    lp = live_portal()
    wsdl = requests.get(lp.url + "?wsdl", timeout=10)
    assert wsdl.status_code == 200
    doc = etree.fromstring(wsdl.content)
    locations = [el.get("schemaLocation") for el in doc.iter("{http://www.w3.org/2001/XMLSchema}import")]
    assert locations and all(loc.startswith(lp.url.rsplit("/cddlm/", 1)[0] + "/cddlm/wsdl/")
                              for loc in locations)
    for loc in locations:
        assert requests.get(loc, timeout=10).status_code == 200
    address = doc.find(".//{http://schemas.xmlsoap.org/wsdl/soap/}address").get("location")
    assert address == lp.url
