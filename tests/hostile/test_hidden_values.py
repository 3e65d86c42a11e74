"""A hidden value never leaves the portal (issue 27, item 10): a HOT ``hidden: true`` parameter
used as a readiness pattern, a hidden port in a readiness target, a hidden number given a bad
value, a native ``secret`` property used again in another attribute. Each is looked for where
the attack found it, through the real ways out: SOAP (ping, resource properties, resolve,
faults), the JSON API and the dashboard, ``cddlm status``, the notifications a listener
receives, the audit log, ``portal.log`` and the portal's stderr."""

from __future__ import annotations

import json
import time

import pytest
import requests

from cddlm.listener import Listener
from tests.cli.helpers import cddlm
from tests.hostile.conftest import HOT, NATIVE

SECRET = "Qv7hiddenPattern93"
WAITING = ("heat_template_version: 2015-04-30\n"
           "parameters:\n  pattern: {type: string, hidden: true}\n"
           "resources:\n  w:\n    type: CDDLM::Process\n    properties:\n"
           "      argv: [sleep, '600']\n"
           "      readiness: {log: {get_param: pattern}, timeout: 4}\n")


def everything(p, app: str, name: str) -> dict[str, str]:
    """What every way out says of an application now, by where it was read."""
    rid = p.prop(app, "api:id").text("//api:id")
    out = {"ping": p.post(app, "<api:pingRequest/>").data.decode(),
           "properties": p.post(app, "<wsrf-rp:GetResourcePropertyDocument/>").data.decode(),
           "status": cddlm("status", name, portal=p.url, check=False).stdout,
           "page": requests.get("%s/applications/%s" % (p.base, rid), timeout=10).text}
    for path in ("", "/components", "/history", "/audit", "/descriptor"):
        out["api" + path] = requests.get("%s/api/v1/applications/%s%s" % (p.base, rid, path),
                                         timeout=10).text
    return out


def subscribe(p, app: str, listener: Listener) -> None:
    a = p.post(app, '<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>%s</wsa:Address>'
                    '</wsnt:ConsumerReference></wsnt:Subscribe>' % listener.url("hidden"))
    assert a.fault() is None, a.data[:500]


def test_a_hidden_readiness_pattern_is_never_shown(portal):
    p = portal
    with Listener(keep_envelopes=True) as listener:
        app = p.create("waits")
        subscribe(p, app, listener)
        assert p.initialize(app, HOT, text=WAITING, properties={"pattern": SECRET}).fault() is None
        p.run(app)
        deadline = time.monotonic() + 10
        seen = {}
        while time.monotonic() < deadline:        # while it waits for its (hidden) log line
            seen = everything(p, app, "waits")
            if "waiting for" in seen["status"]:
                break
            time.sleep(0.1)
        assert "waiting for log /********/" in seen["status"], seen["status"]
        waits = [c.get("waitingFor") for c in json.loads(seen["api"])["components"]]
        assert waits == ["log /********/"], seen["api"]
        for where, text in seen.items():
            assert SECRET not in text, (where, text[:2000])
        p.wait_state(app, "failed", timeout=20)   # not ready after 4 s
        seen = everything(p, app, "waits")
        assert "not ready after 4s: log line /********/ not seen" in seen["api"], seen["api"]
        for where, text in seen.items():
            assert SECRET not in text, (where, text[:2000])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(b"failed" in e for _, e in listener.envelopes):
            time.sleep(0.05)
        notes = b"".join(e for _, e in listener.envelopes)
        assert b"not ready after 4s" in notes and SECRET.encode() not in notes
        assert p.terminate(app).fault() is None
    audit = requests.get("%s/api/v1/audit" % p.base, timeout=10).text
    assert "initialize" in audit and SECRET not in audit
    logged = (p.state / "portal.log").read_text(errors="replace")
    assert "initialize" in logged                   # the audit lines are there
    for text in (logged, p.log_text()):
        assert SECRET not in text, text[-2000:]


def test_faults_do_not_quote_hidden_values(portal):
    p = portal
    port = ("heat_template_version: 2015-04-30\n"
            "parameters:\n  port: {type: string, hidden: true}\n"
            "resources:\n  w:\n    type: CDDLM::Process\n    properties:\n"
            "      argv: [sleep, '600']\n"
            "      readiness: {tcp: {str_replace: {template: '127.0.0.1:P', "
            "params: {P: {get_param: port}}}}}\n")
    number = ("heat_template_version: 2015-04-30\n"
              "parameters:\n  n: {type: number, hidden: true}\n"
              "resources:\n  w:\n    type: CDDLM::Process\n    properties:\n"
              "      argv: [sleep, {get_param: n}]\n")
    for template, why in ((port, "has no valid port"), (number, "must be a number")):
        app = p.create()
        a = p.initialize(app, HOT, text=template, properties={"port": SECRET, "n": SECRET})
        assert a.fault() in ("DescriptorFault", "ResolutionFault"), a.data[:800]
        assert why in a.description() and "********" in a.description(), a.description()
        assert SECRET.encode() not in a.data, a.data[:2000]
        assert p.state_of(app) == "instantiated"


def test_a_native_secret_property_used_again_is_still_secret(portal):
    p = portal
    body = ('<application xmlns="%s">'
            '<component name="w" type="process"><attribute name="argv"><item>sleep</item>'
            '<item>600</item></attribute><attribute name="env"><item name="TOKEN" secret="true">'
            '<property name="tok"/></item></attribute></component>'
            '<component name="o" type="process"><attribute name="argv"><item>sh</item>'
            '<item>-c</item><item>sleep 600</item><item><property name="tok"/></item></attribute>'
            '<attribute name="description"><property name="tok" default="%s"/></attribute>'
            '</component>'
            '</application>' % (NATIVE, SECRET))
    app = p.create("reused")
    assert p.initialize(app, NATIVE, body=body, properties={"tok": SECRET}).fault() is None
    p.run(app)
    p.wait_state(app, "running")
    for path in ("o", "o/argv", "o/description", "w", "w/env"):
        a = p.post(app, "<api:resolveRequest><api:path>%s</api:path></api:resolveRequest>" % path)
        assert a.fault() is None and SECRET.encode() not in a.data, (path, a.data[:1500])
    seen = everything(p, app, "reused")
    for where, text in seen.items():
        assert SECRET not in text, (where, text[:2000])
    assert p.terminate(app).fault() is None
