"""SOAP conversations as data files (``tests/conversations/**.yaml``) run against the real WSGI
application with a real store and real processes. Each file is a list of steps: a request
(a body wrapped in an envelope, or a raw request) and what the response must be; every
response is also validated against ``xsd/`` and the standard schemas.

File keys:
  portals:  extra portals (e.g. [B]) sharing the store with the first (A); such a file runs
            on a fresh PostgreSQL schema (skipped where none answers), as portals sharing a
            store must
  consumer: true starts a notification consumer on loopback; {consumer} is its URL
  datacenter: a datacenter (CONTRACT section 10, as YAML) the portals are started with
  limits:   fields of cddlm.config.Limits the portals are started with (e.g. a small bound)
  documents: {path: text, or {status, location}}: an HTTP server on loopback serves them
           ({documents} is its base URL); the portal may fetch descriptors under
           {documents}/allowed/ only (--allow-descriptor-url)
Step keys:
  to:      portal | subscriptions/ID | "{var}" (an address saved earlier: it goes to the
           portal whose base URL it starts with)
  via:     the portal a "portal" or relative request goes to (default A)
  body:    the body element (the standard prefixes are declared on the envelope)
  headers: header blocks;  raw: the whole request as given (not wrapped)
  expect:  status, fault (detail element QName), faultcode, xpath (boolean expressions),
           save {name: XPath string expression}; a fault must leave the store as it was
           (applications, views, subscriptions and their settings)
  wait:    {to, state, timeout} polls api:state until it has that value; {to, body, xpath,
           timeout} sends body until xpath holds of the response
  sleep:   seconds
  stop:    a portal to stop (its address answers no more)
  notified: {timeout, xpath, save}: the next wsnt:Notify the consumer receives (validated
           like a response) and what must hold of it
Values may use {name} placeholders: saved values, {uniq} (unique per file), and each
portal's base URL ({A}, {B} ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
import uuid
from pathlib import Path

import pytest
import yaml
from lxml import etree

from cddlm import ns
from cddlm.config import Limits
from cddlm.listener import Listener
from tests.conftest import (WsgiClient, _terminate_all, make_portal, pg_schema_url,
                            postgres_available, shared_dir)
from tests.schemas import validate_envelope

CASES = sorted((Path(__file__).parent / "conversations").rglob("*.yaml"))
PREFIXES = {"soapenv": ns.SOAP11_ENV, "api": ns.API, "wsa": ns.WSA, "wsrf-rp": ns.WSRF_RP,
            "wsrf-rl": ns.WSRF_RL, "wsrf-r": ns.WSRF_R, "wsrf-bf": ns.WSRF_BF, "wsnt": ns.WSNT,
            "wstop": ns.WSTOP, "ext": ns.EXT, "xsi": ns.XSI}
ENVELOPE = ('<soapenv:Envelope %s><soapenv:Header>%s</soapenv:Header>'
            '<soapenv:Body>%s</soapenv:Body></soapenv:Envelope>')


def _fill(text: str, values: dict) -> str:
    return re.sub(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: str(values.get(m.group(1), m.group(0))),
                  text)


def _path(to: str) -> str:
    if to == "portal":
        return "/cddlm/portal"
    if to.startswith("http"):
        return "/" + to.split("/", 3)[3]
    return "/cddlm/" + to.lstrip("/")


class _Client(WsgiClient):
    """A client of one in-process portal, saying which host it addresses (as HTTP does)."""

    def __init__(self, app, host: str):
        super().__init__(app)
        self.host = host

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        status, _, data = self.request("POST", path, body, {"Host": self.host})
        return status, data


class Portals:
    """The portals of one conversation by name (A first), their clients, and which stopped."""

    def __init__(self):
        self.portals: dict[str, object] = {}
        self.clients: dict[str, WsgiClient] = {}
        self.stopped: set[str] = set()

    def add(self, name: str, portal) -> None:
        self.portals[name] = portal
        self.clients[name] = _Client(portal.wsgi, portal.url.split("://", 1)[-1].rstrip("/"))

    def client_for(self, step: dict, values: dict) -> WsgiClient:
        to = _fill(step.get("to", "portal"), values)
        name = step.get("via", "A")
        if to.startswith("http"):
            name = next((n for n, p in self.portals.items()
                         if to.startswith(p.url.rstrip("/") + "/")), name)
        assert name not in self.stopped, "portal %s is stopped: nothing answers at %s" % (name, to)
        return self.clients[name]


def _request(client, step: dict, values: dict) -> tuple[int, bytes]:
    path = _path(_fill(step.get("to", "portal"), values))
    if "raw" in step:
        data = _fill(step["raw"], values).encode("utf-8")
    else:
        declarations = " ".join('xmlns:%s="%s"' % kv for kv in PREFIXES.items())
        data = (ENVELOPE % (declarations, _fill(step.get("headers", ""), values),
                            _fill(step["body"], values))).encode("utf-8")
    return client.post(path, data)


def _wait(portals: Portals, spec: dict, values: dict) -> None:
    deadline = time.monotonic() + float(spec.get("timeout", 15))
    body = spec.get("body", '<wsrf-rp:GetResourceProperty>api:state</wsrf-rp:GetResourceProperty>')
    state = None
    step = {"to": spec["to"], "body": body, "via": spec.get("via", "A")}
    client = portals.client_for(step, values)
    while time.monotonic() < deadline:
        status, data = _request(client, step, values)
        doc = etree.fromstring(data)
        if "xpath" in spec:
            if doc.xpath("boolean(%s)" % _fill(spec["xpath"], values), namespaces=PREFIXES):
                return
        else:
            state = doc.findtext(".//{%s}state" % ns.API)
            if state == spec["state"]:
                return
        time.sleep(0.05)
    if "xpath" in spec:
        raise AssertionError("%s never held" % spec["xpath"])
    raise AssertionError("state stayed %r, expected %r" % (state, spec["state"]))


def _records(portal) -> tuple:
    """What a refused request must not change (the engine and delivery change the rest)."""
    from sqlalchemy import select
    from cddlm.application.tables import applications, subscriptions, views
    s = subscriptions.c
    with portal.store.read() as conn:
        return (sorted(conn.execute(select(applications.c.id, applications.c.name)).all()),
                sorted(conn.execute(select(views.c.id)).all()),
                sorted(conn.execute(select(s.id, s.termination_time, s.paused, s.status,
                                           s.filter_xml, s.consumer)).all()))


def _notified(listener, seen: list[int], spec: dict, values: dict, shared, where: str) -> None:
    """The next Notify envelope the consumer received (waiting for it), checked."""
    deadline = time.monotonic() + float(spec.get("timeout", 15))
    while len(listener.envelopes) <= seen[0]:
        assert time.monotonic() < deadline, "%s: no Notify arrived" % where
        time.sleep(0.02)
    _, data = listener.envelopes[seen[0]]
    seen[0] += 1
    problems = validate_envelope(data, shared)
    assert not problems, "%s: %s" % (where, problems)
    _holds(etree.fromstring(data), data, spec, values, where)


def _holds(doc: etree._Element, data: bytes, expect: dict, values: dict, where: str) -> None:
    """Every ``xpath`` of ``expect`` is true of ``doc``; its ``save`` expressions are kept."""
    for expr in expect.get("xpath", []):
        assert doc.xpath("boolean(%s)" % _fill(expr, values), namespaces=PREFIXES) is True, \
            "%s: %s is false in %s" % (where, expr, data[:2500])
    for name, expr in expect.get("save", {}).items():
        values[name] = doc.xpath(expr, namespaces=PREFIXES)
        assert values[name], "%s: nothing to save for %s" % (where, name)


@pytest.fixture
def conversation(request, tmp_path, portal):
    """The portals (and consumer) a conversation file asks for."""
    spec = yaml.safe_load(request.param.read_text())
    portals = Portals()
    with contextlib.ExitStack() as stack:
        extra = spec.get("portals") or []
        settings = {}
        served = None
        if spec.get("documents"):
            from cddlm import httpserver
            server = httpserver.serve(_documents(spec["documents"]), "127.0.0.1", 0)
            stack.callback(server.stop)
            served = server.url
            settings["allowed_descriptor_urls"] = (served + "/allowed/",)
        if spec.get("limits"):
            settings["limits"] = dataclasses.replace(Limits(), **spec["limits"])
        if spec.get("datacenter"):
            path = tmp_path / "datacenter.yaml"
            path.write_text(yaml.safe_dump(spec["datacenter"]))
            settings["datacenter_file"] = str(path)
        if extra:
            if not postgres_available():
                pytest.skip("portals sharing a store need PostgreSQL; none answers on "
                            "127.0.0.1:5432 (database test, trust auth)")
            url = stack.enter_context(pg_schema_url())
            shared = dict(settings, db_url=url, hosts_dir=str(tmp_path / "hosts"),
                          heartbeat_seconds=0.5)
            for number, name in enumerate(["A"] + list(extra)):
                started = make_portal(tmp_path / name, port=8080 + number, **shared)
                stack.callback(_stop, started)
                portals.add(name, started)
        elif settings:
            started = make_portal(tmp_path / "A", **settings)
            stack.callback(_stop, started)
            portals.add("A", started)
        else:
            portals.add("A", portal)
        listener = None
        if spec.get("consumer"):
            listener = stack.enter_context(Listener(keep_envelopes=True))
        if served is not None:
            spec = dict(spec, served=served)
        yield request.param.name, spec, portals, listener


def _documents(documents: dict):
    """A WSGI application serving a conversation's documents by path."""
    def app(environ, start_response):
        doc = documents.get(environ.get("PATH_INFO", "").lstrip("/"))
        if doc is None:
            start_response("404 Not Found", [("Content-Length", "0")])
            return [b""]
        if isinstance(doc, dict):
            start_response(doc["status"], [("Location", doc.get("location", "/")),
                                           ("Content-Length", "0")])
            return [b""]
        body = doc.encode("utf-8")
        start_response("200 OK", [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))])
        return [body]
    return app


def _stop(p) -> None:
    if not getattr(p, "_stopped").is_set():
        _terminate_all(p)
    p.stop()


@pytest.mark.parametrize("conversation", CASES, ids=[str(c.relative_to(c.parents[1])) for c in CASES],
                         indirect=True)
def test_conversation(conversation):
    case_name, spec, portals, listener = conversation
    values = {"uniq": uuid.uuid4().hex[:10]}
    values.update({name: p.url for name, p in portals.portals.items()})
    if listener is not None:
        values["consumer"] = listener.url("consumer")
    if spec.get("served"):
        values["documents"] = spec["served"]
    shared = shared_dir()
    seen = [0]
    for number, step in enumerate(spec["steps"], 1):
        where = "%s step %d" % (case_name, number)
        if "wait" in step:
            _wait(portals, step["wait"], values)
            continue
        if "sleep" in step:
            time.sleep(float(step["sleep"]))
            continue
        if "stop" in step:
            portals.portals[step["stop"]].stop()
            portals.stopped.add(step["stop"])
            continue
        if "notified" in step:
            _notified(listener, seen, step["notified"], values, shared, where)
            continue
        expect = step.get("expect", {})
        client = portals.client_for(step, values)
        store_of = portals.portals["A"]
        before = _records(store_of) if "fault" in expect or "faultcode" in expect else None
        status, data = _request(client, step, values)
        doc = etree.fromstring(data)
        problems = validate_envelope(data, shared)
        assert not problems, "%s: %s" % (where, problems)
        fault = doc.find(".//{%s}Fault" % ns.SOAP11_ENV)
        if "fault" in expect or "faultcode" in expect:
            assert fault is not None, "%s: expected a fault, got %s" % (where, data[:400])
            if "faultcode" in expect:
                assert fault.findtext("faultcode") == expect["faultcode"], where
            if "fault" in expect:
                prefix, local = expect["fault"].split(":")
                detail = fault.find("detail")
                assert detail is not None and detail[0].tag == "{%s}%s" % (PREFIXES[prefix], local), \
                    "%s: wrong fault %s" % (where, etree.tostring(fault)[:400])
            assert status == 500, where
            assert _records(store_of) == before, "%s: a fault changed the store" % where
        else:
            assert fault is None, "%s: unexpected fault %s" % (where, etree.tostring(fault)[:600])
            assert status == expect.get("status", 200), where
        _holds(doc, data, expect, values, where)
