"""Tenants kept apart: bob, authenticated, holds alice's application EPR (and her
subscription's) and tries every operation on it; each answers exactly as for an application
that does not exist, changes nothing, and alice's application runs on. Listings, counts,
notifications, the dashboard and the audit show each user their own only; an administrator
sees everything; host management is for administrators."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from cddlm.client import Credentials, Listener, Portal, PortalFault
from tests.security import wire
from tests.security.conftest import PASSWORDS, auth, cddlm

SIMPLE = "http://docs.oasis-open.org/wsn/t-1/TopicExpression/Simple"
XPATH = "http://www.w3.org/TR/1999/REC-xpath-19991116"
APP_OPERATIONS = {
    "initialize": '<api:initializeRequest><api:descriptor language="%s"><api:body>%s</api:body>'
                  '</api:descriptor></api:initializeRequest>' % (wire.NATIVE, wire.sleeper("x")),
    "run": "<api:runRequest/>",
    "ping": "<api:pingRequest/>",
    "resolve": "<api:resolveRequest><api:path>s/pid</api:path></api:resolveRequest>",
    "terminate": "<api:terminateRequest><api:reason>mine now</api:reason></api:terminateRequest>",
    "destroy": "<api:destroyRequest/>",
    "wsrf-rl:Destroy": "<wsrf-rl:Destroy/>",
    "wsrf-rl:SetTerminationTime": "<wsrf-rl:SetTerminationTime><wsrf-rl:RequestedLifetimeDuration>PT1S"
                                  "</wsrf-rl:RequestedLifetimeDuration></wsrf-rl:SetTerminationTime>",
    "ext:scheduleTermination": "<ext:scheduleTerminationRequest><ext:after>PT1S</ext:after>"
                               "</ext:scheduleTerminationRequest>",
    "GetResourceProperty": "<wsrf-rp:GetResourceProperty>api:deploymentInfo</wsrf-rp:GetResourceProperty>",
    "GetMultipleResourceProperties": "<wsrf-rp:GetMultipleResourceProperties><wsrf-rp:ResourceProperty>"
                                     "api:state</wsrf-rp:ResourceProperty></wsrf-rp:GetMultipleResourceProperties>",
    "GetResourcePropertyDocument": "<wsrf-rp:GetResourcePropertyDocument/>",
    "QueryResourceProperties": '<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression Dialect="%s">'
                               '//api:state</wsrf-rp:QueryExpression></wsrf-rp:QueryResourceProperties>' % XPATH,
    "Subscribe": "<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>http://127.0.0.1:9/c</wsa:Address>"
                 "</wsnt:ConsumerReference></wsnt:Subscribe>",
    "GetCurrentMessage": '<wsnt:GetCurrentMessage><wsnt:Topic Dialect="%s">api:Lifecycle</wsnt:Topic>'
                         '</wsnt:GetCurrentMessage>' % SIMPLE,
}
MANAGER_OPERATIONS = {
    "Renew": "<wsnt:Renew><wsnt:TerminationTime>PT2H</wsnt:TerminationTime></wsnt:Renew>",
    "Unsubscribe": "<wsnt:Unsubscribe/>",
    "PauseSubscription": "<wsnt:PauseSubscription/>",
    "ResumeSubscription": "<wsnt:ResumeSubscription/>",
    "wsrf-rl:Destroy": "<wsrf-rl:Destroy/>",
    "GetResourceProperty": "<wsrf-rp:GetResourceProperty>api:subscriptionStatus</wsrf-rp:GetResourceProperty>",
    "GetResourcePropertyDocument": "<wsrf-rp:GetResourcePropertyDocument/>",
}


def client(net, user: str) -> Portal:
    return Portal(net.url, credentials=Credentials(user, PASSWORDS[user]), failover=False)


def shape(reply: wire.Reply, *secrets: str) -> tuple:
    """What a reply tells: status and fault, with the ids it names blanked."""
    assert reply.fault is not None, reply.body[:300]
    code, detail, text = reply.fault
    for s in secrets:
        text = text.replace(s, "X")
    return reply.status, code, detail, re.sub(r"urn:uuid:[0-9a-f-]{36}|\b[0-9a-f]{32}\b", "X", text)


@pytest.fixture(scope="module")
def victim(net):
    """alice's running application (a process and a file), her subscription to it, and her
    listener."""
    alice = client(net, "alice")
    app = alice.create(name="secret")
    app.initialize(wire.NATIVE, body=wire.fragment(
        '<application xmlns="urn:cddlm:lang:components:1"><component name="s" type="process">'
        '<attribute name="argv"><item>sleep</item><item>600</item></attribute></component>'
        '<component name="f" type="file"><attribute name="path">conf/secret.txt</attribute>'
        '<attribute name="content">alice only</attribute></component></application>'))
    app.run()
    assert app.wait_for("running", timeout=30) == "running"
    listener = Listener().start()
    sub = app.subscribe(listener.url("alice"))
    yield alice, app, sub
    listener.stop()


def test_every_application_operation_on_another_tenants_epr(net, victim):
    _, app, _ = victim
    view = app.reference.address.rsplit("/", 1)[1]
    fake_id, fake_view = "urn:uuid:%s" % uuid.uuid4(), uuid.uuid4().hex
    before = wire.snapshot(net.db)
    for name, body in APP_OPERATIONS.items():
        theirs = wire.soap(app.reference.address, body, [wire.resource_id(app.id)], headers=auth("bob"))
        nowhere = wire.soap(net.base + "/cddlm/applications/" + fake_view, body,
                            [wire.resource_id(fake_id)], headers=auth("bob"))
        assert shape(theirs, view) == shape(nowhere, fake_view), name
        assert theirs.fault[1] == "ResourceUnknownFault", (name, theirs.fault)
    assert wire.snapshot(net.db) == before
    assert app.ping()["state"] == "running"          # alice's application runs on


def test_lookup_and_rebind_of_another_tenants_application(net, victim):
    _, app, _ = victim
    fake = "urn:uuid:%s" % uuid.uuid4()
    before = wire.snapshot(net.db)
    pairs = [
        ("<api:lookupRequest><api:ResourceId>%s</api:ResourceId></api:lookupRequest>" % app.id,
         "<api:lookupRequest><api:ResourceId>%s</api:ResourceId></api:lookupRequest>" % fake),
        ("<api:lookupRequest><api:name>secret</api:name></api:lookupRequest>",
         "<api:lookupRequest><api:name>nonesuch</api:name></api:lookupRequest>"),
        ("<api:rebindRequest><api:applicationReference><wsa:Address>%s</wsa:Address><wsa:ReferenceParameters>"
         "<api:ResourceId>%s</api:ResourceId></wsa:ReferenceParameters></api:applicationReference>"
         "</api:rebindRequest>" % (app.reference.address, app.id),
         "<api:rebindRequest><api:applicationReference><wsa:Address>%s/cddlm/applications/%s</wsa:Address>"
         "<wsa:ReferenceParameters><api:ResourceId>%s</api:ResourceId></wsa:ReferenceParameters>"
         "</api:applicationReference></api:rebindRequest>" % (net.base, uuid.uuid4().hex, fake)),
        ("<api:rebindRequest><api:applicationReference><wsa:Address>%s</wsa:Address>"
         "</api:applicationReference></api:rebindRequest>" % app.reference.address,
         "<api:rebindRequest><api:applicationReference><wsa:Address>%s/cddlm/applications/%s</wsa:Address>"
         "</api:applicationReference></api:rebindRequest>" % (net.base, uuid.uuid4().hex)),
    ]
    for theirs, nowhere in pairs:
        a = wire.soap(net.url, theirs, headers=auth("bob"))
        b = wire.soap(net.url, nowhere, headers=auth("bob"))
        assert shape(a, "secret", net.base) == shape(b, "nonesuch", net.base), theirs
        assert a.fault[1] == "NoSuchApplicationFault"
    assert wire.snapshot(net.db) == before
    # an administrator finds it
    r = wire.soap(net.url, pairs[1][0], headers=auth("carol"))
    assert r.status == 200 and r.xpath("string(//api:ResourceId)") == app.id


def test_every_operation_on_another_tenants_subscription(net, victim):
    _, _, sub = victim
    sub_id = sub.address.rstrip("/").rsplit("/", 1)[1]
    fake = uuid.uuid4().hex
    before = wire.snapshot(net.db)
    for name, body in MANAGER_OPERATIONS.items():
        theirs = wire.soap(sub.address, body, [wire.resource_id(sub.resource_id)], headers=auth("bob"))
        nowhere = wire.soap(net.base + "/cddlm/subscriptions/" + fake, body, headers=auth("bob"))
        assert shape(theirs, sub_id) == shape(nowhere, fake), name
        assert theirs.fault[1] == "ResourceUnknownFault"
    assert wire.snapshot(net.db) == before
    assert sub.status()["state"] == "active"          # alice still reaches it


def test_listings_counts_dashboard_and_audit_show_each_their_own(net, victim):
    _, app, _ = victim
    bob, carol = client(net, "bob"), client(net, "carol")
    mine = bob.create(name="bobs-own")
    assert app.id not in [a.id for a in bob.applications()]
    assert mine.id in [a.id for a in bob.applications()]
    assert {app.id, mine.id} <= {a.id for a in carol.applications()}
    # ext:listApplications: bob's own only, page after page (one each); carol's everyone's
    pages, after = [], None
    while True:
        rows, after = bob.list_applications(1, after)
        pages.append(rows)
        if after is None:
            break
    assert [[r["id"] for r in page] for page in pages] == [[mine.id]], pages
    assert pages[0][0]["owner"] == "bob" and pages[0][0]["name"] == "bobs-own"
    everyone = {r["id"]: r["owner"] for r in carol.each_application(1)}
    assert everyone[app.id] == "alice" and everyone[mine.id] == "bob"
    # a marker from carol's listing is only a position: bob still sees nothing of alice's
    _, carols_marker = carol.list_applications(1)
    assert carols_marker is not None
    assert app.id not in [r["id"] for r in bob.list_applications(10, carols_marker)[0]]
    counts = {c.get("state"): int(c.text) for c in bob.property("dynamicInfo")[0].iterfind(
        "{http://www.gridforum.org/cddlm/deployapi/2005/02}applicationCount")}
    assert counts["running"] == 0 and counts["instantiated"] == 1, counts
    done = cddlm("ls", env=net.env("bob"))
    assert done.returncode == 0 and "bobs-own" in done.stdout and "secret" not in done.stdout
    # the dashboard's JSON and pages through Basic, as a browser sends it
    listing = wire.request(net.base + "/api/v1/applications", headers=auth("bob"))
    ids = [i["id"] for i in json.loads(listing.body)["items"]]
    assert mine.id in ids and app.id not in ids
    theirs = wire.request(net.base + "/api/v1/applications/" + app.id, headers=auth("bob"))
    nowhere = wire.request(net.base + "/api/v1/applications/urn:uuid:%s" % uuid.uuid4(), headers=auth("bob"))
    assert theirs.status == nowhere.status == 404
    assert re.sub(r"urn:uuid:\S+", "X", theirs.body.decode()) == re.sub(r"urn:uuid:\S+", "X", nowhere.body.decode())
    page = wire.request(net.base + "/", headers=auth("bob"))
    assert page.status == 200 and b"bobs-own" in page.body and b"secret" not in page.body
    assert wire.request(net.base + "/applications/" + app.id, headers=auth("bob")).status == 404
    page = wire.request(net.base + "/applications/" + app.id, headers=auth("carol"))
    assert page.status == 200 and b"Audit log" in page.body and b"<td>alice</td>" in page.body
    logs = wire.request(net.base + "/api/v1/applications/%s/logs?path=s" % app.id, headers=auth("bob"))
    assert logs.status == 404
    # the audit: bob sees his own doings, carol everyone's, with who, what, when and from where
    bobs = json.loads(wire.request(net.base + "/api/v1/audit", headers=auth("bob")).body)["audit"]
    assert bobs and all(e["principal"] == "bob" or e["app"] == mine.id for e in bobs)
    everyone = json.loads(wire.request(net.base + "/api/v1/audit?limit=500", headers=auth("carol")).body)["audit"]
    created = [e for e in everyone if e["app"] == app.id and e["action"] == "create"]
    assert created and created[0]["principal"] == "alice" and created[0]["address"] == "127.0.0.1"
    # and a line of STATE/portal.log (the terminal shows warnings only, not a line per request)
    assert "alice from 127.0.0.1: create %s" % app.id in (net.portal.state_dir / "portal.log").read_text()
    assert wire.request(net.base + "/api/v1/applications/%s/audit" % app.id, headers=auth("bob")).status == 404


def test_a_name_in_use_by_another_tenant_tells_nothing(net, victim):
    bob = client(net, "bob")
    twin = bob.create(name="secret")                       # alice's live application has it
    with pytest.raises(PortalFault) as info:
        bob.create(name="secret")                          # bob's own does
    assert info.value.fault == "BadArgumentFault"
    assert bob.lookup("secret").id == twin.id
    twin.terminate()
    twin.wait_for("terminated", timeout=30)
    twin.destroy()


def test_the_dashboard_takes_a_name_as_its_owner_sees_it(net, victim):
    """``/applications/NAME`` is the page of the application ``cddlm status NAME`` shows (a
    redirect to its id's page), and the JSON API takes the name as it takes the id; for another
    tenant's name the answer is the unknown name's, word for word."""
    _, app, _ = victim
    page = wire.request(net.base + "/applications/secret?component=f", headers=auth("alice"))
    assert page.status == 302, (page.status, page.body[:300])
    assert page.headers["location"] == "/applications/%s?component=f" % app.id
    page = wire.request(net.base + page.headers["location"], headers=auth("alice"))
    assert page.status == 200 and app.id.encode() in page.body
    one = wire.request(net.base + "/api/v1/applications/secret", headers=auth("alice"))
    assert one.status == 200 and json.loads(one.body)["id"] == app.id
    comps = wire.request(net.base + "/api/v1/applications/secret/components", headers=auth("alice"))
    assert comps.status == 200 and {c["path"] for c in json.loads(comps.body)["components"]} == {"s", "f"}
    assert json.loads(wire.request(net.base + "/api/v1/applications/secret", headers=auth("carol"))
                      .body)["id"] == app.id
    # bob: alice's name is a name nobody has, on the page and in the JSON
    for path in ("/applications/", "/api/v1/applications/", "/api/v1/applications/%s/history"):
        theirs = wire.request(net.base + (path + "secret" if path.endswith("/") else path % "secret"),
                              headers=auth("bob"))
        nowhere = wire.request(net.base + (path + "nothing-here" if path.endswith("/")
                                           else path % "nothing-here"), headers=auth("bob"))
        assert theirs.status == nowhere.status == 404, (path, theirs.status, nowhere.status)
        assert theirs.body.replace(b"secret", b"X") == nowhere.body.replace(b"nothing-here", b"X")
    # bob's own of that name is his, alice's stays hers
    twin = client(net, "bob").create(name="secret")
    try:
        page = wire.request(net.base + "/applications/secret", headers=auth("bob"))
        assert page.status == 302 and page.headers["location"] == "/applications/" + twin.id
        page = wire.request(net.base + "/applications/secret", headers=auth("alice"))
        assert page.status == 302 and page.headers["location"] == "/applications/" + app.id
    finally:
        twin.terminate()
        twin.wait_for("terminated", timeout=30)
        twin.destroy()


def received(listener: Listener, *wanted: str) -> set[str]:
    """The applications whose creation ``listener`` hears of until it has heard of ``wanted``
    (and a moment more, for anything that should not come)."""
    seen: set[str] = set()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        event = listener.get(timeout=1.0 if set(wanted) <= seen else 5.0)
        if event is None:
            if set(wanted) <= seen:
                break
            continue
        seen.add(event.resource_id)
    return seen


def test_notifications_of_creations_reach_each_their_own(net):
    with Listener() as bobs, Listener() as carols:
        bob, carol, alice = client(net, "bob"), client(net, "carol"), client(net, "alice")
        sub_b = bob.subscribe(bobs.url("b"))
        sub_c = carol.subscribe(carols.url("c"))
        theirs = alice.create(name="created-%d" % time.time_ns())
        own = bob.create(name="created-by-bob-%d" % time.time_ns())
        seen_b, seen_c = received(bobs, own.id), received(carols, own.id, theirs.id)
        assert own.id in seen_b and theirs.id not in seen_b
        assert {own.id, theirs.id} <= seen_c
        # GetCurrentMessage on the portal: bob's newest, never alice's
        message = bob.current_message()
        assert message.findtext("{http://www.gridforum.org/cddlm/deployapi/2005/02}ResourceId") == own.id
        sub_b.unsubscribe()
        sub_c.unsubscribe()


def test_host_management_is_for_administrators(net):
    before = wire.snapshot(net.db)
    body = "<ext:setHostStateRequest><ext:host>localhost</ext:host><ext:down>true</ext:down></ext:setHostStateRequest>"
    r = wire.soap(net.url, body, headers=auth("bob"))
    assert r.status == 403 and r.fault[0] == "wsse:FailedAuthentication" and "administrators" in r.fault[2]
    assert wire.snapshot(net.db) == before
    carol = client(net, "carol")
    carol.set_host_state("localhost", False, "checked")
    assert wire.snapshot(net.db) != before                  # an administrator's change lands
