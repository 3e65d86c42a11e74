"""Listings are bounded and page in creation order (issue 11): ``ext:listApplications`` visits
every application exactly once, ties in creation time included, on SQLite and PostgreSQL;
``api:applications`` holds the newest ``Limits.max_listed_references`` only; the dashboard's
JSON listing refuses a page larger than its bound. Each user sees their own applications."""

from __future__ import annotations

import dataclasses

import pytest
from lxml import etree

from cddlm import ns
from cddlm.application.tenancy import Principal
from cddlm.config import Limits
from cddlm.errors import BadArgument
from tests.conftest import WsgiClient, make_portal

API = "{%s}" % ns.API


def _page_through(service, size: int, principal=None) -> list[dict]:
    seen, after, pages = [], None, 0
    while True:
        kwargs = {"principal": principal} if principal is not None else {}
        rows, after = service.list_applications(size, after, **kwargs)
        assert len(rows) <= size
        seen.extend(rows)
        pages += 1
        assert pages < 100, "the listing does not end"
        if after is None:
            return seen


def test_pages_visit_every_application_once_in_creation_order(tmp_path, db_url):
    portal = make_portal(tmp_path, db_url=db_url)
    try:
        service = portal.service
        ticks = iter([100.0] * 4 + [100.5] * 3 + [101.0 + i for i in range(100)])
        real = service.clock
        service.clock = lambda: next(ticks)          # four, then three, created at one instant
        made = [service.create("a%d" % i, None, [], portal.url)[0].id for i in range(8)]
        service.clock = real
        bob = Principal("bob")
        bobs = service.create("bobs", None, [], portal.url, principal=bob)[0].id
        order = sorted([(100.0, i) for i in made[:4]] + [(100.5, i) for i in made[4:7]]
                       + [(101.0, made[7])])
        for size in (1, 2, 3, 10_000):
            seen = _page_through(service, size)
            assert [r["id"] for r in seen] == [i for _, i in order] + [bobs], size
        assert [r["id"] for r in _page_through(service, 2, bob)] == [bobs]
        assert _page_through(service, 2, Principal("nobody")) == []
        first = service.list_applications(1)[0][0]
        assert first["state"] == "instantiated" and first["owner"] == "admin" \
            and first["created"] == 100.0 and first["name"] in {"a0", "a1", "a2", "a3"}
        for bad in (0, 10_001):
            with pytest.raises(BadArgument, match="limit"):
                service.list_applications(bad)
        for marker in ("", "x" * 300, "bm9wZQ", "TmFOIHVybjp1dWlkOng"):   # "nope", "NaN urn:uuid:x"
            with pytest.raises(BadArgument, match="continuation marker"):
                service.list_applications(5, marker)
    finally:
        portal.stop()


def test_the_applications_property_holds_the_newest_only(tmp_path):
    portal = make_portal(tmp_path, limits=dataclasses.replace(Limits(), max_listed_references=3))
    try:
        ids = [portal.service.create("n%d" % i, None, [], portal.url)[0].id for i in range(5)]
        client = WsgiClient(portal.wsgi)
        envelope = ('<soapenv:Envelope xmlns:soapenv="%s" xmlns:wsrf-rp="%s" xmlns:api="%s">'
                    '<soapenv:Body><wsrf-rp:GetResourceProperty>api:applications'
                    '</wsrf-rp:GetResourceProperty></soapenv:Body></soapenv:Envelope>'
                    % (ns.SOAP11_ENV, ns.WSRF_RP, ns.API)).encode()
        status, data = client.post("/cddlm/portal", envelope)
        assert status == 200, data
        refs = etree.fromstring(data).findall(".//%sapplicationReference" % API)
        assert [r.findtext(".//%sResourceId" % API) for r in refs] == ids[2:]
        (mark,) = etree.fromstring(data).iter("{%s}truncated" % ns.EXT)
        assert mark.get("listed") == "3" and mark.get("operation") == "listApplications"
        # the document (and so every query) is bounded the same way
        views, cut = portal.service.applications(portal.url)
        assert len(views) == 3 and cut
    finally:
        portal.stop()


def test_the_dashboard_listing_is_bounded(tmp_path):
    portal = make_portal(tmp_path)
    try:
        for i in range(3):
            portal.service.create("d%d" % i, None, [], portal.url)
        client = WsgiClient(portal.wsgi)
        status, _, body = client.request("GET", "/api/v1/applications", query="limit=100000")
        assert status == 400 and b"limit" in body
        status, _, body = client.request("GET", "/api/v1/applications", query="limit=2")
        assert status == 200 and body.count(b'"id"') == 2
    finally:
        portal.stop()


def test_the_client_pages_at_the_portals_own_size_when_it_asks_too_much(tmp_path):
    """A portal configured with smaller pages refuses the client's 10,000 with a
    BadArgumentFault naming the limit; ``Portal.each_application`` then pages at the portal's
    own size, over real HTTP, and still sees every application once."""
    from cddlm import httpserver
    from cddlm.client import Portal, PortalFault
    portal = make_portal(tmp_path, limits=dataclasses.replace(Limits(), max_list_page=2,
                                                              list_page_size=2))
    server = httpserver.serve(portal.wsgi, "127.0.0.1", 0)
    portal.url = server.url
    try:
        ids = [portal.service.create("p%d" % i, None, [], portal.url)[0].id for i in range(5)]
        client = Portal(portal.endpoint, failover=False)
        with pytest.raises(PortalFault, match="limit"):
            client.list_applications(10_000)
        assert [r["id"] for r in client.each_application(10_000)] == ids
        rows, marker = client.list_applications()
        assert [r["id"] for r in rows] == ids[:2] and marker is not None
    finally:
        server.stop()
        portal.stop()
