"""What ``cddlm.client`` (and so every portal calling another) puts on the wire (issue 29
items 2 and 3): SOAPAction and WS-Addressing (wsa:To, wsa:Action, wsa:MessageID) on every
message, the typed operations zeep sends and the ones built with lxml alike; and the protocol
from the project's own WSDL, so a portal that answers SOAP but serves no ``?wsdl`` is spoken
to all the same. A recording proxy sits between the client and a live portal (whose EPRs name
the proxy, ``--public-url``), keeping every request as it was sent."""

from __future__ import annotations

from lxml import etree

from cddlm import ns
from cddlm.client import Listener, Portal
from tests.conftest import free_port
from tests.rogue import Proxy, Rogue, answer, http_answer, wait_for

SLEEPER = ('<application xmlns="urn:cddlm:lang:components:1"><component name="w" type="process">'
           '<attribute name="argv"><item>sleep</item><item>600</item></attribute></component></application>')
WSA = "{%s}" % ns.WSA


def proxied(live_portal, refuse=None):
    proxy = Proxy()
    if refuse is not None:
        proxy.refuse = refuse
    rogue = Rogue(proxy).__enter__()
    port = free_port()          # (the portal names the proxy as its address: its own is this)
    proxy.target = "http://127.0.0.1:%d" % port
    live_portal(port=port, extra=["--public-url", rogue.base])
    return rogue


def addressed(r, to: str) -> str:
    """The body element's local name of a request that carries SOAPAction, and wsa:Action (the
    same), wsa:To (``to``) and wsa:MessageID."""
    env = etree.fromstring(r.body)
    header = env.find("{%s}Header" % ns.SOAP11_ENV)
    body = env.find("{%s}Body" % ns.SOAP11_ENV)[0]
    action = header.findtext(WSA + "Action")
    assert action and r.headers.get("soapaction") == '"%s"' % action, (body.tag, r.headers)
    assert header.findtext(WSA + "To") == to, body.tag
    assert (header.findtext(WSA + "MessageID") or "").startswith("urn:uuid:"), body.tag
    return etree.QName(body).localname


def test_every_message_carries_soapaction_and_addressing(live_portal):
    rogue = proxied(live_portal)
    consumer = Rogue(answer(202)).__enter__()
    try:
        portal = Portal(rogue.url, failover=False)
        app = portal.create(name="wire")                              # zeep
        app.initialize(ns.NATIVE, text=SLEEPER)
        app.run()
        app.state()                                                   # lxml from here on
        app.property_many("state", "stateHistory")
        app.logs("w")
        portal.list_applications()
        with Listener() as listener:
            sub = app.subscribe(listener.url("x"))
            sub.renew("PT2H")
            sub.unsubscribe()
        app.subscribe(consumer.url)                                  # the portal's Notify too
        app.terminate("done")
        assert wait_for(lambda: consumer.requests, 30)
    finally:
        rogue.stop()
        consumer.stop()
    seen = {addressed(r, rogue.base + r.path) for r in rogue.requests if r.method == "POST"}
    assert {addressed(r, consumer.url) for r in consumer.requests} == {"Notify"}
    assert {"createRequest", "initializeRequest", "GetResourceProperty", "GetMultipleResourceProperties",
            "logsRequest", "listApplicationsRequest", "Subscribe", "Renew", "Unsubscribe",
            "terminateRequest"} <= seen, seen
    # the client read no WSDL: the protocol is its own
    assert not [r for r in rogue.requests if r.method == "GET"]


def test_a_portal_that_serves_no_wsdl_is_spoken_to_all_the_same(live_portal):
    def no_wsdl(request):
        return http_answer(404, b"no such page", "text/plain") if request.method == "GET" else None
    rogue = proxied(live_portal, no_wsdl)
    try:
        app = Portal(rogue.url, failover=False).create(name="no-wsdl")
        app.initialize(ns.NATIVE, text=SLEEPER)
        app.run()
        assert app.wait_for("running", timeout=30) == "running"
        app.terminate()
        assert app.wait_for("terminated", timeout=30) == "terminated"
    finally:
        rogue.stop()
