"""SOAP conversations as data files (``tests/conversations/**.yaml``) run against the real WSGI
application with a real store and real processes. Each file is a list of steps: a request
(a body wrapped in an envelope, or a raw request) and what the response must be; every
response is also validated against ``xsd/`` and the standard schemas.

Step keys:
  to:      portal | subscriptions/ID | "{var}" (an application address saved earlier)
  body:    the body element (the standard prefixes are declared on the envelope)
  headers: header blocks;  raw: the whole request as given (not wrapped)
  expect:  status, fault (detail element QName), faultcode, xpath (boolean expressions),
           save {name: XPath string expression}; a fault must leave the store as it was
           (applications, views, subscriptions and their settings)
  wait:    {to, state, timeout} polls api:state until it has that value
  sleep:   seconds
Values may use {name} placeholders: saved values, and {uniq} (unique per file).
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
import yaml
from lxml import etree

from cddlm import ns
from tests.conftest import shared_dir
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


def _request(client, step: dict, values: dict) -> tuple[int, bytes]:
    path = _path(_fill(step.get("to", "portal"), values))
    if "raw" in step:
        data = _fill(step["raw"], values).encode("utf-8")
    else:
        declarations = " ".join('xmlns:%s="%s"' % kv for kv in PREFIXES.items())
        data = (ENVELOPE % (declarations, _fill(step.get("headers", ""), values),
                            _fill(step["body"], values))).encode("utf-8")
    return client.post(path, data)


def _wait(client, spec: dict, values: dict) -> None:
    deadline = time.monotonic() + float(spec.get("timeout", 15))
    body = '<wsrf-rp:GetResourceProperty>api:state</wsrf-rp:GetResourceProperty>'
    state = None
    while time.monotonic() < deadline:
        status, data = _request(client, {"to": spec["to"], "body": body}, values)
        doc = etree.fromstring(data)
        state = doc.findtext(".//{%s}state" % ns.API)
        if state == spec["state"]:
            return
        time.sleep(0.05)
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


@pytest.mark.parametrize("case", CASES, ids=[str(c.relative_to(c.parents[1])) for c in CASES])
def test_conversation(case: Path, client, portal):
    spec = yaml.safe_load(case.read_text())
    values = {"uniq": uuid.uuid4().hex[:10]}
    shared = shared_dir()
    for number, step in enumerate(spec["steps"], 1):
        where = "%s step %d" % (case.name, number)
        if "wait" in step:
            _wait(client, step["wait"], values)
            continue
        if "sleep" in step:
            time.sleep(float(step["sleep"]))
            continue
        expect = step.get("expect", {})
        before = _records(portal) if "fault" in expect or "faultcode" in expect else None
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
            assert _records(portal) == before, "%s: a fault changed the store" % where
        else:
            assert fault is None, "%s: unexpected fault %s" % (where, etree.tostring(fault)[:600])
            assert status == expect.get("status", 200), where
        for expr in expect.get("xpath", []):
            assert doc.xpath("boolean(%s)" % _fill(expr, values), namespaces=PREFIXES) is True, \
                "%s: %s is false in %s" % (where, expr, data[:1500])
        for name, expr in expect.get("save", {}).items():
            values[name] = doc.xpath(expr, namespaces=PREFIXES)
            assert values[name], "%s: nothing to save for %s" % (where, name)
