"""The foreign test portal is what it claims (no WSDL, options ignored, plain faults, 503 pages),
and cddlm's client speaks to it from the project's own WSDL: it never asks for ``?wsdl``, and
every message it sends carries SOAPAction, wsa:Action, wsa:To and wsa:MessageID (issue 29,
items 2 and 3)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from lxml import etree

from cddlm import ns, transport
from cddlm.client import Portal, PortalFault

SOAP = "{%s}" % ns.SOAP11_ENV
WSA = "{%s}" % ns.WSA


def addressing(entry: dict) -> dict:
    """The SOAPAction and the wsa headers of one request the foreign portal logged."""
    env = etree.fromstring(entry["xml"].encode())
    header = env.find(SOAP + "Header")
    found = {"SOAPAction": (entry["soapaction"] or "").strip('"')}
    for name in ("Action", "To", "MessageID"):
        el = header.find(WSA + name) if header is not None else None
        found[name] = (el.text or "").strip() if el is not None else None
    found["body"] = etree.QName(env.find(SOAP + "Body")[0]).localname
    return found


def assert_addressed(entries: list[dict]) -> None:
    assert entries
    for entry in entries:
        a = addressing(entry)
        assert a["SOAPAction"] and a["Action"] == a["SOAPAction"], a
        assert a["To"] and a["To"].startswith("http://127.0.0.1:"), a
        assert a["MessageID"] and a["MessageID"].startswith("urn:uuid:"), a


def test_it_serves_no_wsdl_and_the_client_never_asks_for_one(foreign):
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(foreign.url + "?wsdl", timeout=10)
    assert caught.value.code == 404
    portal = Portal(foreign.url, failover=False)
    app = portal.create(name="one", options={"urn:cddlm:option:client-token": "t-1"})
    app.initialize("urn:foreign:lang", text="hello", version="2.1")
    app.run()
    assert app.ping()["state"] == "running"
    app.terminate("done")
    assert app.ping()["state"] == "terminated"
    app.destroy()
    assert portal.applications() == []
    assert all(e["method"] == "POST" and "?" not in e["path"] for e in foreign.log())
    assert_addressed(foreign.log())
    # it ignores options: the same client token makes a second application
    portal.create(options={"urn:cddlm:option:client-token": "t-2"})
    portal.create(options={"urn:cddlm:option:client-token": "t-2"})
    assert len(foreign.apps()) == 2


def test_its_faults_are_plain_soap_faults_and_its_503_an_html_page(foreign):
    app = Portal(foreign.url, failover=False).create()
    with pytest.raises(PortalFault) as caught:
        app.initialize("urn:foreign:lang", text="refuse-plain")
    assert caught.value.code == "soap:Client" and caught.value.fault == "Problem"
    assert caught.value.detail.find("{%s}Timestamp" % ns.WSRF_BF) is None     # no BaseFault
    with pytest.raises(PortalFault) as caught:
        app.initialize("urn:foreign:lang", text="refuse-bare")
    assert caught.value.detail is None and caught.value.message == "the descriptor is refused, bare"
    foreign.mode("503")
    with pytest.raises(transport.NotSoap) as caught:      # not zeep's garbage
        app.ping()
    assert caught.value.status == 503 and "Service Unavailable" in caught.value.text
    with pytest.raises(transport.NotSoap) as caught:      # a typed (zeep) operation too
        app.run()
    assert caught.value.status == 503 and caught.value.content_type == "text/html"
    foreign.mode("ok")
    assert app.ping()["state"] == "instantiated"
