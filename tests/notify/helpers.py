"""Shared by the notification tests: consumers, a SOAP caller for the in-process portal, and
the checks every received Notify must pass."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path
from typing import Callable, Iterator

from lxml import etree

from cddlm import ns
from cddlm.application.options import Option
from cddlm.application.service import DescriptorInput
from cddlm import httpserver
from cddlm.listener import Event, Listener
from tests.conftest import WsgiClient, free_port, shared_dir
from tests.schemas import validate_envelope

NATIVE = "urn:cddlm:lang:components:1"
SLEEPER = ('<application xmlns="urn:cddlm:lang:components:1"><component name="s" type="process">'
           '<attribute name="argv"><item>sleep</item><item>300</item></attribute></component></application>')
PREFIXES = ('xmlns:soapenv="%s" xmlns:wsnt="%s" xmlns:api="%s" xmlns:wsa="%s" xmlns:wsrf-rp="%s" '
            'xmlns:xsi="%s"' % (ns.SOAP11_ENV, ns.WSNT, ns.API, ns.WSA, ns.WSRF_RP, ns.XSI))
NSMAP = {"soapenv": ns.SOAP11_ENV, "wsnt": ns.WSNT, "api": ns.API, "wsa": ns.WSA, "xsi": ns.XSI,
         "wsrf-bf": ns.WSRF_BF}


@contextlib.contextmanager
def wsgi_server(app, port: int = 0) -> Iterator[str]:
    """Serve a WSGI callable on loopback; yields its base URL."""
    server = httpserver.serve(app, "127.0.0.1", port, httpserver.ServerOptions(threads=4),
                              name="test-server")
    try:
        yield server.url
    finally:
        server.stop(timeout=1)


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """An address that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield "http://127.0.0.1:%d/hole" % sock.getsockname()[1]
    finally:
        sock.close()


def unreachable() -> str:
    """An address where nothing listens (connections are refused)."""
    return "http://127.0.0.1:%d/nobody" % free_port()


def consumer(port: int = 0) -> Listener:
    return Listener(port=port, keep_envelopes=True).start()


def collect(listener: Listener, count: int, timeout: float = 10.0,
            where: Callable[[Event], bool] = lambda e: True) -> list[Event]:
    """The first ``count`` events (that ``where`` accepts), waiting up to ``timeout``."""
    out: list[Event] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        event = listener.get(timeout=max(0.01, deadline - time.monotonic()))
        if event is not None and where(event):
            out.append(event)
    return out


def check_envelopes(listener: Listener, shared: Path | None = None) -> int:
    """Every Notify a listener received validates against xsd/ (and the standards when the
    workspace has them); returns how many there were."""
    for path, data in listener.envelopes:
        problems = validate_envelope(data, shared if shared is not None else shared_dir())
        assert not problems, (path, problems, data[:600])
        assert etree.fromstring(data).find("{%s}Body/{%s}Notify" % (ns.SOAP11_ENV, ns.WSNT)) is not None
    return len(listener.envelopes)


class Soap:
    """SOAP calls to an in-process portal (its WSGI application, no socket)."""

    def __init__(self, portal):
        self.portal = portal
        self.client = WsgiClient(portal.wsgi)

    def call(self, to: str, body: str, headers: str = "", fault: str | None = None) -> etree._Element:
        path = "/" + to.split("/", 3)[3] if to.startswith("http") else to
        data = ('<soapenv:Envelope %s><soapenv:Header>%s</soapenv:Header><soapenv:Body>%s'
                '</soapenv:Body></soapenv:Envelope>' % (PREFIXES, headers, body)).encode()
        status, out = self.client.post(path, data)
        doc = etree.fromstring(out)
        found = doc.find(".//detail")
        if fault is None:
            assert status == 200 and found is None, out[:800]
        else:
            assert found is not None and etree.QName(found[0]).localname == fault, out[:800]
        return doc

    def subscribe(self, to: str, consumer_url: str, topic: str = "api:Lifecycle", extra: str = "") -> str:
        """Subscribe; returns the subscription manager's address."""
        doc = self.call(to, '<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>%s</wsa:Address>'
                            '</wsnt:ConsumerReference><wsnt:Filter><wsnt:TopicExpression Dialect="%s">%s'
                            '</wsnt:TopicExpression>%s</wsnt:Filter></wsnt:Subscribe>'
                        % (consumer_url, ns.TOPIC_SIMPLE, topic, extra))
        return doc.findtext(".//{%s}SubscriptionReference/{%s}Address" % (ns.WSNT, ns.WSA))

    def manage(self, sub: str, local: str, fault: str | None = None) -> etree._Element:
        return self.call(sub, "<wsnt:%s/>" % local, fault=fault)

    def status(self, sub: str) -> dict:
        doc = self.call(sub, '<wsrf-rp:GetResourceProperty xmlns:ext="%s">ext:subscriptionStatus'
                             '</wsrf-rp:GetResourceProperty>' % ns.EXT)
        el = doc.find(".//{%s}subscriptionStatus" % ns.EXT)
        return {etree.QName(c).localname: c.text for c in el}

    # -- the application's lifecycle, through the use cases ----------------------------------------
    def create(self, name: str | None = None, subscribe: str | None = None) -> tuple[str, str]:
        """A new application (subscribing ``subscribe`` with the create option); returns its
        id and its view's address."""
        options = [Option("urn:cddlm:option:subscribe", True, "string", subscribe, subscribe)] \
            if subscribe else []
        app, view = self.portal.service.create(name, None, options, self.portal.url)
        return app.id, self.portal.url + "/cddlm/applications/" + view.id

    def wait_state(self, app_id: str, state: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while self.portal.service.get(app_id).state != state:
            assert time.monotonic() < deadline, "%s is still %s" % (app_id, self.portal.service.get(app_id).state)
            time.sleep(0.02)

    def lifecycle(self, app_id: str) -> None:
        """initialize, run, terminate: three more events (initialized, running, terminated)."""
        service = self.portal.service
        service.initialize(app_id, DescriptorInput(NATIVE, body=etree.fromstring(SLEEPER)), [], [])
        self.wait_state(app_id, "initialized")
        service.run(app_id)
        self.wait_state(app_id, "running")
        service.terminate(app_id, "test over")
        self.wait_state(app_id, "terminated")
