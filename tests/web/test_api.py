"""The dashboard's JSON read API and its pages over the portal's real WSGI application, without
a browser: paging and filters, one application, its components, history, logs and descriptor,
the datacenter, hosts and peers, the request rules, escaping, and who sees what."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest
import yaml

from cddlm import ns, xmlsafe
from cddlm.application.service import DescriptorInput
from cddlm.application import repository as repo
from cddlm.application.views import LOCAL_ADMIN, Principal
from cddlm.errors import NoSuchApplication
from tests.conftest import WsgiClient, _terminate_all, make_portal, wait_state
from tests.web.scenario import DATACENTER, HOSTILE_NAME, HOSTILE_STDERR, SHOP


@pytest.fixture
def portal(tmp_path):
    dc = tmp_path / "dc.yaml"
    dc.write_text(yaml.safe_dump(DATACENTER))
    p = make_portal(tmp_path, datacenter_file=str(dc))
    yield p
    _terminate_all(p)
    p.stop()


@pytest.fixture
def client(portal):
    return WsgiClient(portal.wsgi)


def get(client, path, query="", headers=None, status=200):
    code, hdrs, body = client.request("GET", path, query=query, headers=headers)
    assert code == status, (code, body[:500])
    if hdrs.get("Content-Type", "").startswith("application/json"):
        return json.loads(body)
    return body.decode()


def deploy_shop(portal, name="shop"):
    svc = portal.service
    app, _ = svc.create(name, None, [], portal.url)
    svc.initialize(app.id, DescriptorInput(ns.NATIVE, body=xmlsafe.parse(SHOP.encode())),
                   [("db.password", "hunter2")], [])
    svc.run(app.id)
    wait_state(portal, app.id, "running")
    return app


def test_applications_page_through_thousands_newest_first_with_filters(portal, client):
    svc = portal.service
    for i in range(130):
        svc.create("app-%03d" % i, None, [], portal.url)
    svc.create("50%_off", None, [], portal.url)
    first = get(client, "/api/v1/applications")
    assert first["total"] == 131 and first["limit"] == 50 and len(first["items"]) == 50
    assert first["items"][0]["name"] == "50%_off" and first["items"][1]["name"] == "app-129"
    assert first["states"]["instantiated"] == 131
    last = get(client, "/api/v1/applications", "limit=50&offset=100")
    assert [i["name"] for i in last["items"]][-1] == "app-000" and len(last["items"]) == 31
    seen = {i["id"] for o in (0, 50, 100) for i in get(client, "/api/v1/applications",
                                                       "offset=%d" % o)["items"]}
    assert len(seen) == 131
    # name filters are substrings, case-insensitive, with % and _ taken literally
    assert get(client, "/api/v1/applications", "name=APP-12")["total"] == 10
    assert [i["name"] for i in get(client, "/api/v1/applications", "name=%25_")["items"]] == ["50%_off"]
    assert get(client, "/api/v1/applications", "name=_")["total"] == 1
    assert get(client, "/api/v1/applications", "state=running")["total"] == 0
    # the page: 50 rows, a pager, and the filter kept in its links
    html = get(client, "/", "name=app")
    assert html.count('<tr data-app="') == 50 and "Page 1 of 3" in html
    assert 'href="?name=app&amp;page=2"' in html
    assert get(client, "/", "name=app&page=3").count('<tr data-app="') == 30


@pytest.mark.parametrize("query, message", [
    ("limit=0", "limit must be between 1 and 500"), ("limit=501", "limit must be between"),
    ("offset=-1", "offset must not be negative"), ("state=sleeping", "unknown state 'sleeping'"),
    ("limit=ten", "limit must be an integer"), ("name=" + "x" * 300, "longer than 256"),
])
def test_bad_listing_arguments_get_a_clear_400(client, query, message):
    data = get(client, "/api/v1/applications", query, status=400)
    assert message in data["error"] and data["status"] == 400
    if not query.startswith("offset"):              # the page pages by ?page=
        assert message.split("'")[0] in get(client, "/", query, status=400)


def test_one_application_its_components_history_logs_and_descriptor(portal, client):
    app = deploy_shop(portal)
    bare = app.id.split(":")[-1]
    one = get(client, "/api/v1/applications/" + bare)          # the uuid alone is enough
    assert one["id"] == app.id and one["state"] == "running" and one["name"] == "shop"
    assert one["properties"] == {"db.password": "hunter2"}
    assert [h["state"] for h in one["history"]] == ["instantiated", "initialized", "running"]
    assert one["placement"]["audit"]["policies"][0]["met"] is True
    comps = {c["path"]: c for c in get(client, "/api/v1/applications/%s/components" % app.id)["components"]}
    assert [c for c in comps] == ["site", "site/web", "site/worker", "db"]   # tree order
    assert comps["site/web"]["depth"] == 1 and comps["site"]["type"] == "compound"
    assert all(comps[p]["state"] == "running" and comps[p]["pid"] for p in ("site/web", "site/worker", "db"))
    assert comps["db"]["host"] == "h3" and comps["db"]["provider"].startswith("h3-numa")
    deadline = time.monotonic() + 10
    while not comps["site/web"]["ports"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
        comps = {c["path"]: c for c in get(client, "/api/v1/applications/%s/components" % app.id)["components"]}
    assert get(client, "/api/v1/applications/%s/history" % app.id)["history"] == one["history"]
    logs = get(client, "/api/v1/applications/%s/logs" % app.id, "path=site/worker&lines=5")
    assert logs == {"path": "site/worker", "host": comps["site/worker"]["host"], "available": True,
                    "stdout": ["worker started"], "stderr": [HOSTILE_STDERR]}
    assert "no component 'nope'" in get(client, "/api/v1/applications/%s/logs" % app.id,
                                        "path=nope", status=400)["error"]
    assert "?path=" in get(client, "/api/v1/applications/%s/logs" % app.id, status=400)["error"]
    descriptor = get(client, "/api/v1/applications/%s/descriptor" % app.id)
    assert descriptor["language"] == ns.NATIVE and "<component" in descriptor["text"]
    # the page: the secret-looking property is hidden there, the stderr is text
    html = get(client, "/applications/" + app.id, "component=site/worker")
    assert "hunter2" not in html and "hidden (the name says it is a secret)" in html
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in html
    assert "<script>window" not in html


def test_unknown_applications_are_404_in_json_and_html(client):
    missing = "urn:uuid:00000000-0000-0000-0000-000000000000"
    for path in ("", "/components", "/history", "/descriptor"):
        assert "no application" in get(client, "/api/v1/applications/" + missing + path, status=404)["error"]
    assert "no application" in get(client, "/applications/" + missing, status=404)
    assert "no such page" in get(client, "/api/v1/nothing", status=404)["error"]
    assert get(client, "/static/../config.py", status=404)


def test_the_page_of_one_application_reads_the_application_twice(portal, client, monkeypatch):
    """The page reads its version first (a change landing while it is built moves the first
    poll), then finds the application by its id or name with one read and builds itself from
    what that read found: its components, logs, descriptor, datacenter and audit do not read
    it again (they did: 8 reads a page). What one principal found is read afresh (and
    refused) for another."""
    app = deploy_shop(portal)
    me, read = threading.get_ident(), []
    made = repo.App.__init__

    def counting(self, mapping, *args, **kwargs):     # every application row read becomes one
        if threading.get_ident() == me:               # not the portal's own threads meanwhile
            read.append(mapping["id"])
        made(self, mapping, *args, **kwargs)

    monkeypatch.setattr(repo.App, "__init__", counting)
    html = get(client, "/applications/" + app.id, "component=site/worker")
    assert read == [app.id, app.id]
    assert "worker started" in html and "&lt;component" in html and "h3-numa" in html
    read.clear()
    code, headers, _ = client.request("GET", "/applications/shop")
    assert code == 302 and headers["Location"] == "/applications/" + app.id and read == [app.id, app.id]
    found = portal.views.find(LOCAL_ADMIN, app.id)
    with pytest.raises(NoSuchApplication):
        portal.views.application(Principal("bob"), found)
    with pytest.raises(NoSuchApplication):
        portal.views.version(Principal("bob"), found)


def test_datacenter_hosts_and_peers(portal, client):
    portal.service.mark_host("h4", True, "disk <failing>")
    app = deploy_shop(portal)
    dc = get(client, "/api/v1/datacenter")
    assert dc["levels"] == ["room", "rack", "host", "numa"] and dc["truncated"] is False

    def nodes(node):
        yield node
        for child in node["children"]:
            yield from nodes(child)
    by_name = {n["name"]: n for root in dc["roots"] for n in nodes(root)}
    assert by_name["h4"]["down"] is True and by_name["h4"]["reason"] == "disk <failing>"
    assert by_name["h5"]["reachable"] is False and by_name["h5"]["servedBy"].startswith("http://127.0.0.1:9")
    assert by_name["h1"]["reachable"] is True and by_name["h1"]["servedBy"] == "this portal"
    placed = {c["path"]: name for name, n in by_name.items() for c in n["components"]}
    assert set(placed) == {"site/web", "site/worker", "db"} and placed["db"].startswith("h3-numa")
    assert by_name[placed["db"]]["used"] == {"cpu": 1.0}
    only = get(client, "/api/v1/datacenter", "app=" + app.id)
    assert sum(len(n["components"]) for root in only["roots"] for n in nodes(root)) == 3
    hosts = {h["name"]: h for h in get(client, "/api/v1/hosts")["hosts"]}
    assert hosts["h1"]["capacity"] == {"cpu": 2.0} and hosts["h4"]["down"] is True
    assert sum(h["components"] for h in hosts.values()) == 3
    assert hosts[placed["site/web"]]["free"] == {"cpu": 1.0}
    peers = get(client, "/api/v1/peers")["peers"]
    assert len(peers) == 1 and peers[0]["self"] is True and peers[0]["id"] == portal.engine.id
    html = get(client, "/hosts")
    assert "disk &lt;failing&gt;" in html and "unreachable" in html
    svg = get(client, "/datacenter")
    assert svg.count('class="chip st-running"') == 3 and 'data-node="h4"' in svg


def test_the_version_moves_with_every_change_a_page_shows(portal, client):
    before = get(client, "/api/v1/version")["version"]
    app, _ = portal.service.create("v", None, [], portal.url)
    after_create = get(client, "/api/v1/version")["version"]
    assert after_create != before
    one = get(client, "/api/v1/version", "app=" + app.id)["version"]
    portal.service.terminate(app.id, "done")
    wait_state(portal, app.id, "terminated")
    assert get(client, "/api/v1/version", "app=" + app.id)["version"] != one
    assert get(client, "/api/v1/version")["version"] != after_create
    marked = get(client, "/api/v1/version")["version"]
    portal.service.mark_host("h2", True, "maintenance")
    assert get(client, "/api/v1/version")["version"] != marked


def test_read_only_same_origin_and_escaped(portal, client):
    svc = portal.service
    app, _ = svc.create(HOSTILE_NAME, None, [], portal.url)
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        code, headers, body = client.request(method, "/api/v1/applications/" + app.id)
        assert code == 405 and headers["Allow"] == "GET, HEAD", method
    code, _, _ = client.request("POST", "/")
    assert code == 405
    assert svc.get(app.id).state == "instantiated"
    # another site's page may not read the API through the visitor's browser
    code, _, body = client.request("GET", "/api/v1/applications",
                                   headers={"Origin": "http://evil.example", "Host": "127.0.0.1:8080"})
    assert code == 403 and b"cross-origin" in body
    code, _, _ = client.request("GET", "/api/v1/applications",
                                headers={"Origin": "http://127.0.0.1:8080", "Host": "127.0.0.1:8080"})
    assert code == 200
    code, headers, body = client.request("GET", "/")
    html = body.decode()
    assert "&lt;img src=x onerror=&#34;window.__pwned = 2&#34;&gt;" in html and "<img" not in html
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    # HEAD answers the headers only; an unchanged JSON answer revalidates to 304
    code, headers, body = client.request("HEAD", "/api/v1/applications")
    assert code == 200 and body == b"" and int(headers["Content-Length"]) > 0
    code, headers, _ = client.request("GET", "/api/v1/applications")
    code, _, body = client.request("GET", "/api/v1/applications", headers={"If-None-Match": headers["ETag"]})
    assert code == 304 and body == b""
    # static files ship in the package
    code, headers, body = client.request("GET", "/static/dashboard.js")
    assert code == 200 and headers["Content-Type"].startswith("text/javascript") and b"data-live" in body


def test_every_read_takes_the_principal_and_a_user_sees_nobody_elses(portal):
    app = deploy_shop(portal)
    seen = []

    def authenticate(environ):
        seen.append(environ["PATH_INFO"])
        return Principal("bob")

    portal.dashboard.authenticate = authenticate
    client = WsgiClient(portal.wsgi)
    listing = get(client, "/api/v1/applications")
    assert listing["total"] == 0 and listing["items"] == [] and sum(listing["states"].values()) == 0
    for path in ("", "/components", "/history", "/descriptor"):
        get(client, "/api/v1/applications/" + app.id + path, status=404)
    get(client, "/api/v1/applications/%s/logs" % app.id, "path=db", status=404)
    get(client, "/applications/" + app.id, status=404)
    get(client, "/api/v1/datacenter", "app=" + app.id, status=404)
    dc = get(client, "/api/v1/datacenter")
    assert all(not n["components"] for root in dc["roots"] for n in _walk(root))
    assert sum(h["components"] for h in get(client, "/api/v1/hosts")["hosts"]) == 0
    assert "/api/v1/applications" in seen and "/applications/" + app.id in seen


def _walk(node):
    yield node
    for child in node["children"]:
        yield from _walk(child)


class Relay:
    """A TCP relay to PostgreSQL that can be cut (every connection closed, new ones refused) and
    mended: the database restarting, as the portal sees it."""

    def __init__(self, port: int = 5432):
        self.upstream, self.pairs, self.open = port, [], True
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if not self.open:
                conn.close()
                continue
            up = socket.create_connection(("127.0.0.1", self.upstream))
            self.pairs.append((conn, up))
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self):
        self.open = False
        for pair in self.pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        self.pairs.clear()

    def close(self):
        self.cut()
        self.listener.close()


def test_a_lost_database_is_a_503_to_ask_again_not_a_500(tmp_path):
    """The store on PostgreSQL loses its database (restarted, failed over): the page and the API
    say 503 with Retry-After while it is away, and answer again once it is back."""
    from tests.conftest import pg_schema_url, postgres_available
    if not postgres_available():
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 (database test, trust auth)")
    relay = Relay()
    with pg_schema_url() as url:
        p = make_portal(tmp_path, db_url=url.replace("127.0.0.1:5432", "127.0.0.1:%d" % relay.port, 1))
        try:
            client = WsgiClient(p.wsgi)
            get(client, "/api/v1/applications")
            relay.cut()
            for path in ("/api/v1/applications", "/", "/hosts"):
                code, headers, body = client.request("GET", path)
                assert code == 503 and headers.get("Retry-After") == "2", (path, code, body[:300])
                assert b"database unavailable" in body and b"Traceback" not in body
            relay.open = True
            assert get(client, "/api/v1/applications")["total"] == 0
        finally:
            relay.open = True
            p.stop()
            relay.close()
