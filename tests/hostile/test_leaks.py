"""Nothing leaks (issue 16, third table)."""

from __future__ import annotations

import os
import stat
import time

import requests

from cddlm import ns

from tests.hostile.conftest import CDL, HOT, NATIVE
from tests.notify.helpers import black_hole, unreachable

SHADOW = ("root:$6$Zx9salt$hashhashhashhash:19000:0:99999:7:::\n"
          "daemon:*:19000:0:99999:7:::\nsecret_key: do-not-show-me\n<notxml>\n")
SECRET = "s3cr3t-Value-7781"


def test_a_file_that_is_no_descriptor_is_refused_without_its_bytes(live):
    shadow = live.allowed / "shadow"
    shadow.write_text(SHADOW)
    app = live.create()
    for language in (HOT, NATIVE, CDL):
        answer = live.initialize(app, language, reference=shadow.as_uri())
        assert answer.fault() == "DescriptorFault", answer.data[:500]
        for word in ("root", "hash", "daemon", "do-not-show-me", "notxml", "secret_key"):
            assert word.encode() not in answer.data, (language, word, answer.data)
    assert live.state_of(app) == "instantiated"
    live.after()


def test_values_a_descriptor_marks_secret_are_never_returned(live):
    template = ("heat_template_version: 2015-04-30\n"
                "parameters:\n  db_password: {type: string, hidden: true}\n"
                "  shown: {type: string, default: plain-value}\n"
                "resources:\n  w:\n    type: CDDLM::Process\n    properties:\n"
                "      argv: [sleep, '600']\n"
                "      env: {PGPASSWORD: {get_param: db_password}, SHOWN: {get_param: shown}}\n")
    hot = live.create()
    assert live.initialize(hot, HOT, text=template, properties={"db_password": SECRET}).fault() is None
    native = live.create()
    body = ('<application xmlns="%s"><component name="w" type="process">'
            '<attribute name="argv"><item>sleep</item><item>600</item></attribute>'
            '<attribute name="env"><item name="TOKEN" secret="true">%s</item></attribute></component>'
            '<component name="copy" type="process"><attribute name="argv"><item>sleep</item>'
            '<item>600</item></attribute><attribute name="env"><ref path="w/env"/></attribute>'
            '</component></application>' % (NATIVE, SECRET))
    assert live.initialize(native, NATIVE, body=body).fault() is None
    for app in (hot, native):
        live.run(app)
        live.wait_state(app, "running")
        answers = [live.post(app, "<api:resolveRequest><api:path>%s</api:path></api:resolveRequest>" % path)
                   for path in ("w", "w/env", "w/env/PGPASSWORD", "w/env/TOKEN", "copy", "copy/env")]
        answers.append(live.prop(app, "api:deploymentInfo"))
        answers.append(live.post(app, "<wsrf-rp:GetResourcePropertyDocument/>"))
        for a in answers:
            assert SECRET.encode() not in a.data, a.data[:800]
        resource_id = live.prop(app, "api:id").text("//api:id")
        for path in ("", "/descriptor"):
            page = requests.get("%s/api/v1/applications/%s%s" % (live.base, resource_id, path), timeout=10)
            assert page.status_code == 200 and SECRET not in page.text
        page = requests.get("%s/applications/%s" % (live.base, resource_id), timeout=10)
        assert page.status_code == 200 and SECRET not in page.text
        # stored and given to the component all the same
        pid = int(live.post(app, "<api:pingRequest/>").text("//api:health/api:component/@pid"))
        assert SECRET.encode() in open("/proc/%d/environ" % pid, "rb").read()
    hidden = live.post(hot, "<api:resolveRequest><api:path>w/env</api:path></api:resolveRequest>")
    assert hidden.doc.xpath("//api:item[@name='PGPASSWORD']/@ext:hidden = 'true'",
                            namespaces={"api": ns.API, "ext": ns.EXT})
    assert b"plain-value" in hidden.data
    info = live.prop(hot, "api:deploymentInfo")
    assert b"db_password" in info.data and b'hidden="true"' in info.data
    live.after()


def test_a_subscription_cannot_tell_a_closed_port_from_a_silent_one(live):
    with black_hole() as hole:
        app = live.create()
        managers = []
        for consumer in (unreachable(), hole):
            a = live.post(app, '<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>%s</wsa:Address>'
                               '</wsnt:ConsumerReference></wsnt:Subscribe>' % consumer)
            assert a.fault() is None, a.data[:500]
            managers.append(a.text("//wsnt:SubscriptionReference/wsa:Address"))
        assert live.initialize(app, NATIVE, body='<application xmlns="%s"><component name="f" '
                               'type="file"><attribute name="path">f</attribute></component>'
                               '</application>' % NATIVE).fault() is None
        deadline = time.monotonic() + 20
        errors = []
        while time.monotonic() < deadline:
            errors = [live.post(m, "<wsrf-rp:GetResourceProperty>ext:subscriptionStatus"
                                   "</wsrf-rp:GetResourceProperty>").text("//ext:lastError") for m in managers]
            if all(errors):
                break
            time.sleep(0.2)
        assert errors[0] and errors[0] == errors[1], errors
        assert "refused" not in errors[0].lower() or "unreachable" in errors[0]
    live.after()


def test_the_state_directory_and_the_store_are_private_whatever_the_umask(own_portal):
    old = os.umask(0)               # everything the portal makes would be world-writable
    try:
        p = own_portal()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(p.state).st_mode) == 0o700
    for name in ("portal.db", "portal.db-wal", "portal.db-shm"):
        assert stat.S_IMODE(os.stat(p.state / name).st_mode) == 0o600, name
    p.after()
