"""The dashboard's WSGI application: a route table of read-only pages and JSON reads.

Every request goes through ``Dashboard.principal_for(environ)`` (the one place a request gets
its principal) and every read takes that principal. Nothing here changes anything: only GET
and HEAD are answered. Pages are rendered by Jinja2 with autoescaping on, so every name,
descriptor and log line is text on the page, never markup; the Content-Security-Policy allows
only the package's own script and style on top of that.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, quote, urlencode

import jinja2

from cddlm import __version__
from cddlm.application.views import LOCAL_ADMIN, Principal, Views, normalise_id
from cddlm.config import Settings
from cddlm.errors import (AuthenticationFailed, BadArgument, Busy, HostUnreachable, NoSuchApplication,
                          ResourceUnknown, StoreUnavailable)
from cddlm.web import highlight, picture

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
STATIC_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]*\.(css|js|png|svg)$")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
COMMON_HEADERS = [("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer")]
SECRET_NAME = re.compile(r"pass|secret|token|key|credential", re.I)


@dataclass
class Request:
    environ: dict
    principal: Principal
    args: dict[str, str] = field(default_factory=dict)     # from the path
    query: dict[str, str] = field(default_factory=dict)    # first value of each parameter
    root: str = ""                                          # SCRIPT_NAME: where we are mounted

    def int_arg(self, name: str, default: int | None) -> int | None:
        value = self.query.get(name)
        if value is None or value == "":
            return default
        try:
            return int(value)
        except ValueError:
            raise BadArgument("%s must be an integer, got %r" % (name, value[:40])) from None


@dataclass
class Response:
    status: str
    content_type: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)


def _route(pattern: str) -> re.Pattern:
    return re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")


class Dashboard:
    """``authenticate(environ) -> Principal`` is the edge's authenticator (raising
    ``AuthenticationFailed``: HTTP Basic, which browsers ask for themselves, or a Bearer token);
    without one every caller is the local admin of local mode. Static files are public."""

    def __init__(self, views: Views, settings: Settings, portal_url: Callable[[], str],
                 authenticate: Callable[[dict], Principal] | None = None):
        self.views = views
        self.settings = settings
        self.portal_url = portal_url
        self.authenticate = authenticate
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                                      autoescape=True,
                                      trim_blocks=True, lstrip_blocks=True)
        self.env.filters.update(when=_when, iso=_iso, ago=_duration, components=_component_counts,
                                secret=lambda name: bool(SECRET_NAME.search(name or "")),
                                pretty=lambda v: json.dumps(v, indent=2, sort_keys=True, default=str))
        self.env.globals.update(version=__version__)
        self.routes: list[tuple[re.Pattern, Callable[[Request], Response]]] = [
            (_route(p), h) for p, h in [
                ("/", self.page_applications),
                ("/applications/{id}", self.page_application),
                ("/datacenter", self.page_datacenter),
                ("/hosts", self.page_hosts),
                ("/static/{file}", self.static),
                ("/api/v1/applications", self.api_applications),
                ("/api/v1/applications/{id}", self.api_application),
                ("/api/v1/applications/{id}/components", self.api_components),
                ("/api/v1/applications/{id}/history", self.api_history),
                ("/api/v1/applications/{id}/descriptor", self.api_descriptor),
                ("/api/v1/applications/{id}/logs", self.api_logs),
                ("/api/v1/applications/{id}/audit", self.api_app_audit),
                ("/api/v1/audit", self.api_audit),
                ("/api/v1/datacenter", self.api_datacenter),
                ("/api/v1/hosts", self.api_hosts),
                ("/api/v1/peers", self.api_peers),
                ("/api/v1/version", self.api_version),
            ]]
        self._static_cache: dict[str, tuple[bytes, str]] = {}

    # -- the edge -------------------------------------------------------------------------------
    def principal_for(self, environ: dict) -> Principal:
        """The one place a dashboard request gets its principal."""
        if self.authenticate is None:
            return LOCAL_ADMIN
        return self.authenticate(environ)

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        api = path.startswith("/api/")
        try:
            if method not in ("GET", "HEAD"):
                raise _Refused("405 Method Not Allowed", "the dashboard is read-only: GET or HEAD",
                               [("Allow", "GET, HEAD")])
            if _cross_origin(environ):
                raise _Refused("403 Forbidden", "cross-origin requests are refused")
            for pattern, handler in self.routes:
                m = pattern.match(path)
                if m:
                    break
            else:
                raise _Refused("404 Not Found", "no such page: %s" % path)
            principal = LOCAL_ADMIN if handler == self.static else self.principal_for(environ)
            request = Request(environ, principal, m.groupdict(),
                              {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", ""),
                                                            keep_blank_values=True).items()},
                              environ.get("SCRIPT_NAME", "").rstrip("/"))
            response = handler(request)
        except AuthenticationFailed as e:
            extra = [("WWW-Authenticate", e.challenge)] if e.challenge else []
            if e.retry_after:
                extra.append(("Retry-After", str(e.retry_after)))
            status = {403: "403 Forbidden", 429: "429 Too Many Requests"}.get(e.status, "401 Unauthorized")
            response = self._error(api, status, str(e), extra)
        except (NoSuchApplication, ResourceUnknown) as e:
            response = self._error(api, "404 Not Found", str(e))
        except BadArgument as e:
            response = self._error(api, "400 Bad Request", str(e))
        except (HostUnreachable, Busy, StoreUnavailable) as e:    # not to be had now: ask again
            response = self._error(api, "503 Service Unavailable", str(e), [("Retry-After", "2")])
        except _Refused as e:
            response = self._error(api, e.status, e.message, e.headers)
        return self._send(environ, start_response, response)

    def _send(self, environ, start_response, r: Response):
        headers = [("Content-Type", r.content_type)] + COMMON_HEADERS + r.headers
        body = r.body
        if r.status.startswith("200"):
            tag = '"%s"' % hashlib.blake2b(body, digest_size=12).hexdigest()
            headers.append(("ETag", tag))
            if tag in (environ.get("HTTP_IF_NONE_MATCH") or ""):
                r.status, body = "304 Not Modified", b""
                headers = [h for h in headers if h[0] != "Content-Type"]
        headers.append(("Content-Length", str(len(body))))
        start_response(r.status, headers)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    def _error(self, api: bool, status: str, message: str, extra=()) -> Response:
        if api:
            return _json({"error": message, "status": int(status.split()[0])}, status, list(extra))
        return self._page("error.html", None, status=status, extra=list(extra), code=status,
                          message=message, title=status.split(" ", 1)[1])

    # -- rendering -------------------------------------------------------------------------------
    def _page(self, template: str, request: Request | None, status: str = "200 OK",
              extra: list | None = None, **context: Any) -> Response:
        root = request.root if request else ""
        context.setdefault("live", None)
        html = self.env.get_template(template).render(
            u=lambda p: root + p, app_url=lambda app_id: root + "/applications/" + quote(app_id, safe=":"),
            poll=self.settings.dashboard.poll_seconds, portal=self.portal_url(),
            principal=request.principal if request else None, **context)
        headers = [("Content-Security-Policy", CSP), ("X-Frame-Options", "DENY"),
                   ("Cache-Control", "no-store")] + (extra or [])
        return Response(status, "text/html; charset=utf-8", html.encode("utf-8"), headers)

    def _picture(self, request: Request, dc: dict) -> picture.Picture:
        return picture.draw(dc, lambda app_id: request.root + "/applications/" + quote(app_id, safe=":"))

    # -- pages -----------------------------------------------------------------------------------
    def _live(self, request: Request, app_id: str | None = None, version: str | None = None) -> dict:
        """The page's live endpoint and the version it is rendered at (``version``, else read
        now): read BEFORE the page's data, so that a change that lands meanwhile moves the
        first poll (a version read after the data could swallow that change until the
        periodic refresh)."""
        url = request.root + "/api/v1/version"
        if app_id:
            url += "?app=" + quote(app_id, safe=":")
        if version is None:
            version = self.views.version(request.principal, app_id)
        return {"live": url, "live_version": version}

    def page_applications(self, request: Request) -> Response:
        live = self._live(request)
        state = request.query.get("state") or None
        name = request.query.get("name") or None
        size = request.int_arg("limit", self.settings.dashboard.page_size)
        page = max(1, request.int_arg("page", 1) or 1)
        listing = self.views.applications(request.principal, state=state, name=name, limit=size,
                                          offset=(page - 1) * size)
        pages = max(1, -(-listing["total"] // size))
        return self._page("applications.html", request, title="Applications", listing=listing,
                          state=state or "", name=name or "", page=page, pages=pages, size=size,
                          **live,
                          query=lambda **kw: _query({"state": state, "name": name, "page": page,
                                                     "limit": None if size == self.settings.dashboard.page_size else size}, kw))

    def page_application(self, request: Request) -> Response:
        principal, asked = request.principal, request.args["id"]
        # the version first (``_live``), then the application once: the reads below take it
        # from ``found``, which is then no older than the version the page is rendered at
        version = self.views.version(principal, asked)
        found = self.views.find(principal, asked)
        if found.id != normalise_id(asked):
            # named by its name (as `cddlm status NAME` takes it): the page is the id's, which
            # stays that application's whatever later takes the name
            query = request.environ.get("QUERY_STRING")
            return Response("302 Found", "text/plain; charset=utf-8", b"", [
                ("Location", request.root + "/applications/" + quote(found.id, safe=":")
                 + ("?" + query if query else "")), ("Cache-Control", "no-store")])
        live = self._live(request, found.id, version)
        app = self.views.application(principal, found)
        chosen = request.query.get("component") or _default_component(app["components"])
        logs = None
        if chosen:
            logs = self.views.logs(principal, found, chosen)
        descriptor = self.views.descriptor(principal, found)
        text = descriptor["text"] or ""
        limit = self.settings.dashboard.descriptor_chars
        tokens = highlight.highlight(descriptor["language"], text[:limit])
        dc = self.views.datacenter(principal, found)
        audit_log = self.views.audit(principal, found, 50)
        return self._page("application.html", request, title=app["name"] or app["id"], app=app,
                          logs=logs, chosen=chosen, tokens=tokens, cut=len(text) > limit, audit_log=audit_log,
                          descriptor_length=len(text), pic=self._picture(request, dc), dc=dc,
                          **live)

    def page_datacenter(self, request: Request) -> Response:
        live = self._live(request)
        dc = self.views.datacenter(request.principal)
        return self._page("datacenter.html", request, title="Datacenter", dc=dc,
                          pic=self._picture(request, dc), **live)

    def page_hosts(self, request: Request) -> Response:
        live = self._live(request)
        return self._page("hosts.html", request, title="Hosts and portals",
                          hosts=self.views.hosts_list(request.principal),
                          peers=self.views.peers(request.principal), **live)

    def static(self, request: Request) -> Response:
        name = request.args["file"]
        if not STATIC_NAME.match(name) or not (STATIC / name).is_file():
            raise _Refused("404 Not Found", "no such file")
        if name not in self._static_cache:
            ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
            if ctype.startswith("text/") or ctype.endswith("javascript"):
                ctype += "; charset=utf-8"
            self._static_cache[name] = ((STATIC / name).read_bytes(), ctype)
        data, ctype = self._static_cache[name]
        return Response("200 OK", ctype, data, [("Cache-Control", "no-cache")])

    # -- the JSON read API (docs/dashboard.md) -----------------------------------------------------
    def api_applications(self, request: Request) -> Response:
        return _json(self.views.applications(
            request.principal, state=request.query.get("state") or None,
            name=request.query.get("name") or None, limit=request.int_arg("limit", None),
            offset=request.int_arg("offset", 0) or 0))

    def api_application(self, request: Request) -> Response:
        return _json(self.views.application(request.principal, request.args["id"]))

    def api_components(self, request: Request) -> Response:
        return _json({"components": self.views.components(request.principal, request.args["id"])})

    def api_history(self, request: Request) -> Response:
        return _json({"history": self.views.history(request.principal, request.args["id"])})

    def api_descriptor(self, request: Request) -> Response:
        return _json(self.views.descriptor(request.principal, request.args["id"]))

    def api_logs(self, request: Request) -> Response:
        path = request.query.get("path")
        if not path:
            raise BadArgument("name the component: ?path=COMPONENT")
        return _json(self.views.logs(request.principal, request.args["id"], path,
                                     request.int_arg("lines", None)))

    def api_app_audit(self, request: Request) -> Response:
        return _json({"audit": self.views.audit(request.principal, request.args["id"],
                                                request.int_arg("limit", 100) or 100)})

    def api_audit(self, request: Request) -> Response:
        return _json({"audit": self.views.audit(request.principal, None,
                                                request.int_arg("limit", 100) or 100)})

    def api_datacenter(self, request: Request) -> Response:
        return _json(self.views.datacenter(request.principal, request.query.get("app") or None))

    def api_hosts(self, request: Request) -> Response:
        return _json({"hosts": self.views.hosts_list(request.principal)})

    def api_peers(self, request: Request) -> Response:
        return _json({"peers": self.views.peers(request.principal)})

    def api_version(self, request: Request) -> Response:
        return _json({"version": self.views.version(request.principal, request.query.get("app") or None),
                      "poll": self.settings.dashboard.poll_seconds})


class _Refused(Exception):
    def __init__(self, status: str, message: str, headers: list | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or []


def _cross_origin(environ: dict) -> bool:
    """An ``Origin`` that is not this very server (scheme, host and port)."""
    origin = environ.get("HTTP_ORIGIN")
    if not origin:
        return False
    own = "%s://%s" % (environ.get("wsgi.url_scheme", "http"), environ.get("HTTP_HOST", ""))
    return origin.rstrip("/").lower() != own.lower()


def _json(data: Any, status: str = "200 OK", headers: list | None = None) -> Response:
    body = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")
    return Response(status, "application/json", body, [("Cache-Control", "no-store")] + (headers or []))


def _query(current: dict, changes: dict) -> str:
    """A query string: ``current`` parameters with ``changes``, without empty ones and page 1."""
    merged = dict(current, **changes)
    return "?" + urlencode([(k, v) for k, v in merged.items()
                            if v not in (None, "") and not (k == "page" and v == 1)])


def _default_component(components: list[dict]) -> str | None:
    """The component whose logs the page shows first: a failed one, else the first process."""
    for c in components:
        if c["state"] == "failed" and c["type"] == "process":
            return c["path"]
    for c in components:
        if c["type"] == "process":
            return c["path"]
    return None


def _when(t: float | None) -> str:
    if t is None:
        return ""
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _iso(t: float | None) -> str:
    if t is None:
        return ""
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = max(0.0, float(seconds))
    if s < 10:
        return "%.1f s" % s
    if s < 120:
        return "%d s" % s
    if s < 7200:
        return "%d min" % (s // 60)
    if s < 172800:
        return "%d h" % (s // 3600)
    return "%d d" % (s // 86400)


def _component_counts(counts: dict[str, int]) -> str:
    return ", ".join("%d %s" % (n, state) for state, n in sorted(counts.items(), key=lambda kv: -kv[1])) \
        or "none"
