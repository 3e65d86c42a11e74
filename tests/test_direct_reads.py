"""The hot reads answered without Spyne's plumbing (``soap.Exchange.direct``) say on the wire
exactly what the Spyne path says: the same status, headers and bytes (but for the fresh
wsa:MessageID and timestamps) for answers and for every kind of fault: unknown properties and
prefixes, mustUnderstand headers, replies asked elsewhere, unknown views, malformed bodies,
SOAP 1.2, and authentication refused (401 with its challenge) or passed."""

from __future__ import annotations

import re

import pytest

from cddlm import ns
from cddlm.application.tenancy import Principal
from cddlm.errors import AuthenticationFailed
from cddlm.portal import wsgi
from tests.conftest import WsgiClient, make_portal

DECLS = ('xmlns:soapenv="%s" xmlns:wsa="%s" xmlns:wsrf-rp="%s" xmlns:api="%s" xmlns:x="urn:x"'
         % (ns.SOAP11_ENV, ns.WSA, ns.WSRF_RP, ns.API))
GET = "<wsrf-rp:GetResourceProperty>%s</wsrf-rp:GetResourceProperty>"
MULTI = ("<wsrf-rp:GetMultipleResourceProperties>%s</wsrf-rp:GetMultipleResourceProperties>" % "".join(
    "<wsrf-rp:ResourceProperty>api:%s</wsrf-rp:ResourceProperty>" % p for p in ("name", "id", "state")))
ADDRESSED = ("<wsa:MessageID>urn:uuid:req-1</wsa:MessageID><wsa:Action>http://docs.oasis-open.org/"
             "wsrf/rpw-2/GetResourceProperty/GetResourcePropertyRequest</wsa:Action>")


def envelope(body: str, headers: str = "", decls: str = DECLS, env: str = ns.SOAP11_ENV) -> bytes:
    return ('<?xml version="1.0"?><soapenv:Envelope %s><soapenv:Header>%s</soapenv:Header>'
            '<soapenv:Body>%s</soapenv:Body></soapenv:Envelope>' % (
                decls.replace(ns.SOAP11_ENV, env), headers, body)).encode()


CASES = {
    "state": ("app", envelope(GET % "api:state", ADDRESSED)),
    "several": ("app", envelope(MULTI)),
    "history": ("app", envelope(GET % "api:stateHistory")),
    "unknown property": ("app", envelope(GET % "api:nothing", ADDRESSED)),
    "undeclared prefix": ("app", envelope(GET % "nope:state")),
    "elements, not a QName": ("app", envelope(GET % "<api:state/>")),
    "mustUnderstand": ("app", envelope(GET % "api:state", '<x:h soapenv:mustUnderstand="1"/>')),
    "reply elsewhere": ("app", envelope(GET % "api:state", ADDRESSED + "<wsa:ReplyTo><wsa:Address>"
                                        "http://elsewhere.example/</wsa:Address></wsa:ReplyTo>")),
    "two body elements": ("app", envelope(GET % "api:state" + GET % "api:name")),
    "unknown view": ("/cddlm/applications/0123456789abcdef", envelope(GET % "api:state", ADDRESSED)),
    "no view": ("/cddlm/applications/", envelope(GET % "api:state")),
    "portal property": ("/cddlm/portal", envelope(GET % "api:dynamicInfo", ADDRESSED)),
    "portal document": ("/cddlm/portal", envelope("<wsrf-rp:GetResourcePropertyDocument/>")),
    "portal unknown": ("/cddlm/portal", envelope(GET % "api:state")),
    "lookup by name": ("/cddlm/portal", envelope("<api:lookupRequest><api:name>same</api:name>"
                                                 "</api:lookupRequest>", ADDRESSED)),
    "lookup by id": ("/cddlm/portal", envelope("<api:lookupRequest><api:ResourceId>{id}"
                                               "</api:ResourceId></api:lookupRequest>")),
    "lookup unknown": ("/cddlm/portal", envelope("<api:lookupRequest><api:name>nobody</api:name>"
                                                 "</api:lookupRequest>")),
    "lookup invalid": ("/cddlm/portal", envelope("<api:lookupRequest><api:nonsense/>"
                                                 "</api:lookupRequest>")),
    "SOAP 1.2": ("app", envelope(GET % "api:state", env="http://www.w3.org/2003/05/soap-envelope")),
    "not well-formed": ("app", b"<soapenv:Envelope"),
    "a DTD": ("app", b'<!DOCTYPE x [<!ENTITY e "e">]><x>&e;</x>'),
    "too deep": ("app", envelope(GET % "api:state", "<x:a>" * 300 + "</x:a>" * 300)),
    "not an envelope": ("app", b"<x/>"),
    "a write": ("app", envelope("<api:runRequest/>")),
}


def _normal(data: bytes) -> bytes:
    data = re.sub(rb"<wsa:MessageID>urn:uuid:[0-9a-f-]+</wsa:MessageID>", b"<wsa:MessageID/>", data)
    return re.sub(rb"(Timestamp|CurrentTime|time|uptime)>[^<]*<", rb"\1>T<", data)


def _pair(portal, authenticate=None):
    """(with the direct path, Spyne only): two routers over the same endpoints."""
    portal_ep, app_ep = portal.handlers.endpoints()
    endpoints = {"/cddlm/portal": portal_ep, "/cddlm/applications": app_ep}
    direct = wsgi.build(endpoints, portal.settings.limits, portal.portal_url, None, authenticate)
    spyne_only = wsgi.build(endpoints, portal.settings.limits, portal.portal_url, None, authenticate)
    spyne_only.exchanges = {}
    return WsgiClient(direct), WsgiClient(spyne_only)


@pytest.fixture
def portal(tmp_path):
    p = make_portal(tmp_path)
    yield p
    p.stop()


def _compare(portal, direct, spyne, path: str, data: bytes, headers: dict | None = None):
    answers = [c.request("POST", path, data, headers) for c in (direct, spyne)]
    (s1, h1, b1), (s2, h2, b2) = answers
    assert (s1, h1) == (s2, h2)
    assert _normal(b1) == _normal(b2), (b1, b2)
    return s1, b1


def test_every_read_and_fault_is_the_same_on_both_paths(portal):
    app, view = portal.service.create("same", None, [], portal.url)
    direct, spyne = _pair(portal)
    statuses = {}
    for name, (to, data) in CASES.items():
        path = "/cddlm/applications/" + view.id if to == "app" else to
        data = data.replace(b"{id}", app.id.encode())
        statuses[name], body = _compare(portal, direct, spyne, path, data)
    assert statuses["state"] == statuses["several"] == statuses["portal property"] == 200
    assert statuses["lookup by name"] == statuses["lookup by id"] == 200
    assert statuses["lookup unknown"] == statuses["lookup invalid"] == 500
    # and the reads really went around Spyne: with its applications gone they still answer
    direct.app.apps = {}
    for name in ("state", "several", "unknown property", "mustUnderstand", "unknown view",
                 "not well-formed", "a DTD", "lookup by name", "lookup invalid"):
        to, data = CASES[name]
        path = "/cddlm/applications/" + view.id if to == "app" else to
        assert direct.request("POST", path, data)[0] == statuses[name], name
    assert statuses["unknown property"] == statuses["mustUnderstand"] == 500


def test_authentication_is_the_same_on_both_paths(portal):
    app, view = portal.service.create("guarded", None, [], portal.url)

    def authenticate(environ, headers):
        if environ.get("HTTP_AUTHORIZATION") != "Basic b2s6b2s=":
            raise AuthenticationFailed("who are you?", challenge='Basic realm="cddlm"')
        return Principal("admin", admin=True)

    direct, spyne = _pair(portal, authenticate)
    path = "/cddlm/applications/" + view.id
    status, body = _compare(portal, direct, spyne, path, envelope(GET % "api:state", ADDRESSED))
    assert status == 401 and b"FailedAuthentication" in body
    status, body = _compare(portal, direct, spyne, path, envelope(GET % "api:state", ADDRESSED),
                            {"Authorization": "Basic b2s6b2s="})
    assert status == 200 and b">instantiated<" in body and b"<wsa:RelatesTo>urn:uuid:req-1<" in body


def test_each_property_read_alone_is_its_part_of_the_document(portal):
    """A GetResourceProperty of most properties reads the application without its component
    tree, placement and properties (``HEAVY``); each property read alone, or all of them at
    once, is exactly its part of the whole document (which reads everything)."""
    from lxml import etree
    from cddlm.application import repository as repo
    from cddlm.portal.handlers import APP_DOCUMENT, HEAVY_PROPERTIES
    from tests.test_components import comp, deploy, wait
    app_id = deploy(portal, comp("p", argv=["sleep", "60"]), properties=[("colour", "blue")])
    try:
        assert wait(portal, app_id, "running") == "running"
        direct, _ = _pair(portal)
        with portal.service.store.write() as conn:
            view = repo.new_view(conn, app_id, portal.url, 1.0)
        path = "/cddlm/applications/" + view.id
        status, _, body = direct.request("POST", path, envelope(
            "<wsrf-rp:GetResourcePropertyDocument/>"))
        assert status == 200
        doc = etree.fromstring(body).find(".//" + APP_DOCUMENT)
        names = sorted({el.tag for el in doc if el.tag != "{%s}CurrentTime" % ns.WSRF_RL})
        assert set(HEAVY_PROPERTIES) <= set(names) | {"{%s}placementAudit" % ns.EXT}
        spaces = sorted({etree.QName(n).namespace for n in names})
        prefix = {space: "p%d" % i for i, space in enumerate(spaces)}
        decls = DECLS + "".join(' xmlns:%s="%s"' % (p, space) for space, p in prefix.items())

        def qname(tag: str) -> str:
            q = etree.QName(tag)
            return "%s:%s" % (prefix[q.namespace], q.localname)

        def normal(els) -> list[bytes]:
            return [_normal(etree.tostring(e, method="c14n", exclusive=True)) for e in els]
        for name in names:
            status, _, body = direct.request("POST", path, envelope(GET % qname(name), decls=decls))
            assert status == 200, (name, body[:500])
            got = etree.fromstring(body).find(".//{%s}GetResourcePropertyResponse" % ns.WSRF_RP)
            assert normal(got) == normal(doc.findall(name)), name
        status, _, body = direct.request("POST", path, envelope(
            "<wsrf-rp:GetMultipleResourceProperties>%s</wsrf-rp:GetMultipleResourceProperties>"
            % "".join("<wsrf-rp:ResourceProperty>%s</wsrf-rp:ResourceProperty>" % qname(n)
                      for n in names), decls=decls))
        assert status == 200
        got = etree.fromstring(body).find(".//{%s}GetMultipleResourcePropertiesResponse" % ns.WSRF_RP)
        assert normal(got) == normal(e for n in names for e in doc.findall(n))
        assert b"colour" in etree.tostring(doc.find("{%s}deploymentInfo" % ns.API))
    finally:
        portal.service.terminate(app_id, "done")


RESPONSES = {
    "plain": '<r:x xmlns:r="urn:r">text</r:x>',
    "an EPR declaring wsa again": '<api:r xmlns:api="%s"><api:e xmlns:wsa="%s"><wsa:Address>a'
                                  '</wsa:Address></api:e><wsa:b xmlns:wsa="%s"/></api:r>'
                                  % (ns.API, ns.WSA, ns.WSA),
    "wsa declared at the top": '<wsa:r xmlns:wsa="%s"><wsa:Address>a</wsa:Address></wsa:r>' % ns.WSA,
    "wsa under another prefix": '<r xmlns="urn:r"><a:x xmlns:a="%s"/></r>' % ns.WSA,
    "the prefix wsa bound elsewhere": '<wsa:r xmlns:wsa="urn:not-wsa"><wsa:x xmlns:wsa="%s"/>'
                                      '</wsa:r>' % ns.WSA,
    "the envelope's namespace": '<r xmlns="urn:r"><s:x xmlns:s="%s"/></r>' % ns.SOAP11_ENV,
    "the envelope's prefix": '<soapenv:r xmlns:soapenv="urn:r"/>',
    "a default namespace": '<r xmlns="%s"><x xmlns="urn:r">t&amp;&lt;&#13;é</x></r>' % ns.WSA,
}


@pytest.mark.parametrize("shape", sorted(RESPONSES))
@pytest.mark.parametrize("relates", [None, "urn:uuid:1", "a&b<c>d\"e'\r\tü"])
@pytest.mark.parametrize("version", [ns.WSA, "http://schemas.xmlsoap.org/ws/2004/08/addressing"])
def test_the_envelope_written_as_text_is_the_envelope_lxml_writes(shape, relates, version):
    """``Exchange.envelope_bytes`` (text around the answer) says what lxml says of the
    envelope built as elements (``Exchange.envelope``), whatever the answer declares."""
    from lxml import etree
    from cddlm import wsa
    from cddlm.portal import soap

    def state() -> soap._State:
        s = soap._State("application")
        s.addressing = wsa.Addressing(version=version, message_id=relates)
        s.operation = soap.Operation(lambda req: None, "urn:action&<")
        s.response = etree.fromstring(RESPONSES[shape])
        return s
    def fresh(data: bytes) -> bytes:      # the new wsa:MessageID, in any version
        return re.sub(rb"urn:uuid:[0-9a-f-]{36}", b"urn:uuid:fresh", data)
    text = soap.Exchange.envelope_bytes(state(), None)
    built = etree.tostring(soap.Exchange.envelope(state(), None), encoding="UTF-8",
                           xml_declaration=True)
    assert fresh(text) == fresh(built)
    inner = state()          # an answer inside another document: lxml's way alike
    holder = etree.Element("holder", nsmap={"wsa": "urn:elsewhere"})
    holder.append(inner.response)
    assert fresh(soap.Exchange.envelope_bytes(inner, None)) == fresh(built)


def test_a_request_through_spyne_makes_no_full_collection(portal):
    """Spyne ends each request with a full pass of the garbage collector once a second (for
    file uploads the portal takes none of), which stopped every thread: the portal turns it
    off and leaves collection to its thresholds (``app.GC_THRESHOLDS``)."""
    import gc

    from spyne import context
    full = []

    def seen(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(info)
    client = WsgiClient(portal.wsgi)
    context._LAST_GC_RUN = 0.0      # as if the last pass was long ago
    gc.callbacks.append(seen)
    try:
        status, data = client.post("/cddlm/portal", envelope(
            "<api:createRequest><api:name>collected</api:name></api:createRequest>"))
    finally:
        gc.callbacks.remove(seen)
    assert status == 200 and b"applicationReference" in data
    assert full == []
