"""The portal's WSGI application: a route table over the three SOAP endpoints and the static
WSDL/XSD folder, with the request-size limit enforced before a body is read, and the gate the
HTTP server calls before it reads a body (``Router.gate``).

    /cddlm/portal                  portal endpoint          (GET ?wsdl: the concrete WSDL)
    /cddlm/applications/{view}     application endpoint     (GET ?wsdl: the same WSDL)
    /cddlm/subscriptions/{id}      subscription manager
    /cddlm/wsdl/{file}             the WSDL and the schemas it imports (from wsdl/ and xsd/)
    everything else                the read-only dashboard and its JSON API (``cddlm/web``),
                                   when the composition root passes one in

The hot reads of each SOAP endpoint are answered by its ``soap.Exchange`` directly, the rest
through Spyne (``portal/soap.py``).

A web page its operator visits must not be able to drive a portal (on loopback by default):
``refusal`` turns away, before anything else, requests whose ``Host`` is a name the portal
does not answer to (DNS rebinding: a page's own name pointed at 127.0.0.1), requests from
another site's ``Origin``, and SOAP posts whose ``Content-Type`` is not a SOAP type (a
cross-site form or ``fetch`` can send ``text/plain`` without asking first).

With users, ``Router.gate`` decides who sends a request before the request costs much: HTTP
credentials (``Authorization``) are checked before the body is read (wrong ones: the body is
never read; a password's scrypt runs on the password-check threads, not a server thread). A
request without them may send at most ``Limits.unauthenticated_body_bytes`` (1 MiB: a
UsernameToken request with a descriptor of up to about that), and of a SOAP request only the
header is parsed, within its first ``Limits.max_soap_header_bytes`` (64 KiB), and its
``wsse:Security`` token checked, before the rest: an unauthenticated client makes the portal
parse 64 KiB at most. What the gate found (``auth.PRINCIPAL`` or ``auth.REFUSED``) is in the
environ for the endpoints and the dashboard.
"""

from __future__ import annotations

import io
import ipaddress
import re
import socket
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from lxml import etree
from spyne.server.wsgi import WsgiApplication

from cddlm import xmlsafe
from cddlm.config import Limits
from cddlm.errors import BadArgument, RequestTooLarge
from cddlm.portal import soap
from cddlm.portal.auth import PRINCIPAL, REFUSED, SECURITY, Authenticator
from cddlm.portal.faults import to_fault
from cddlm.portal.soap import Endpoint, fault_envelope

ROOT = Path(__file__).resolve().parents[2]
WSDL_DIR = ROOT / "wsdl"
XSD_DIR = ROOT / "xsd"
WSDL_FILE = "cddlm.wsdl"
PLACEHOLDER = "http://127.0.0.1:8080"
SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+\.(wsdl|xsd)$")
WSDL_NS = "http://schemas.xmlsoap.org/wsdl/"
XSD_NS = "http://www.w3.org/2001/XMLSchema"
MOUNTS = ("/cddlm/portal", "/cddlm/applications", "/cddlm/subscriptions")
LATER = "later"       # the HTTP server's word for "the gate calls resume" (httpserver.LATER)
GATED = "cddlm.gated"     # environ: the gate has seen this request


def static_file(name: str) -> bytes | None:
    if not SAFE_NAME.match(name):
        return None
    for folder in (WSDL_DIR, XSD_DIR):
        path = folder / name
        if path.is_file():
            return path.read_bytes()
    return None


def wsdl_for(base: str, absolute_imports: bool) -> bytes:
    """The concrete WSDL with this portal's addresses; imports made absolute for ``?wsdl``."""
    data = static_file(WSDL_FILE) or b""
    data = data.replace(PLACEHOLDER.encode(), base.rstrip("/").encode())
    if not absolute_imports:
        return data
    doc = etree.fromstring(data)
    prefix = base.rstrip("/") + "/cddlm/wsdl/"
    for el in doc.iter("{%s}import" % XSD_NS, "{%s}import" % WSDL_NS, "{%s}include" % XSD_NS):
        for attr in ("schemaLocation", "location"):
            value = el.get(attr)
            if value and "://" not in value:
                el.set(attr, prefix + value)
    return etree.tostring(doc, xml_declaration=True, encoding="UTF-8")


SCHEMAS = ("api.xsd", "ext.xsd", "rp-2.xsd", "rl-2.xsd", "b-2.xsd")


def build(endpoints: dict[str, Endpoint], limits: Limits, portal_url: Callable[[], str],
          dashboard: Callable | None = None, authenticate: soap.Authenticate | None = None,
          names: frozenset[str] = frozenset({"*"}),
          notified: Callable[[str], None] | None = None,
          authenticator: Authenticator | None = None) -> "Router":
    """The WSGI application for these endpoints (mount point -> endpoint), with ``dashboard``
    (a WSGI application) answering every other path. Every SOAP request is authenticated by
    ``authenticate`` (none: local mode); the WSDL and its schemas are public. ``names`` are
    the Host names it answers to (``own_names``); ``authenticator`` (with users) is what
    ``Router.gate`` asks."""
    validator = soap.Validator(XSD_DIR, SCHEMAS)
    exchanges = {mount: soap.Exchange(ep, validator, limits, portal_url, authenticate)
                 for mount, ep in endpoints.items()}
    apps = {mount: WsgiApplication(soap.application(ex), max_content_length=limits.max_body_bytes + 1)
            for mount, ex in exchanges.items()}
    return Router(apps, limits, portal_url, dashboard, names, exchanges, notified, authenticator)


AGENTS = "/cddlm/agents/"      # where host portals notify this portal (application/enactment/remote.py)
SOAP_TYPES = ("text/xml", "application/soap+xml")   # SOAP 1.1, and 1.2 (refused as a version)


def own_names(bind_host: str, public_url: str | None, allowed: tuple[str, ...]) -> frozenset[str]:
    """The host names a portal answers to (besides IP literals, which no DNS rebinding can
    bring): localhost, this machine's names, its bind and public addresses' names, and the
    operator's ``allowed_hosts`` (``*``: any)."""
    names = {"localhost", socket.gethostname().lower(), socket.getfqdn().lower(), bind_host.lower()}
    if public_url:
        names.add((urlsplit(public_url).hostname or "").lower())
    names.update(a.lower() for a in allowed)
    return frozenset(n for n in names if n)


def _hostname(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def refusal(environ: dict, names: frozenset[str], soap: bool) -> tuple[str, str] | None:
    """Why this request is refused (an HTTP status and a message), or None: see the module
    docstring. ``soap``: the request goes to a SOAP endpoint."""
    host = environ.get("HTTP_HOST", "")
    name = _hostname(host)
    if host and "*" not in names and name not in names and not _ip_literal(name) \
            and not name.endswith(".localhost"):
        return ("421 Misdirected Request", "this portal does not answer to the name %r (its "
                "operator may allow it with --allowed-host)\n" % name[:100])
    origin = environ.get("HTTP_ORIGIN")
    if origin is not None:
        own = "%s://%s" % (environ.get("wsgi.url_scheme", "http"), host)
        if origin.rstrip("/").lower() != own.lower():
            return "403 Forbidden", "cross-origin requests are refused (another site's page sent it)\n"
    if soap and environ.get("REQUEST_METHOD") == "POST":
        ctype = environ.get("CONTENT_TYPE", "").split(";", 1)[0].strip().lower()
        if ctype not in SOAP_TYPES:
            return ("415 Unsupported Media Type", "a SOAP request is text/xml (SOAP 1.1), not %r\n"
                    % (ctype[:100] or "no Content-Type"))
    return None


def open_to_all(environ: dict) -> bool:
    """Whether the request is answered to anyone, credentials or not: the WSDL and its schemas
    (``?wsdl`` and ``/cddlm/wsdl/``). Credentials sent with it are neither checked nor counted
    (a client with a mistyped password fetching the WSDL is not ten failed sign-ins)."""
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        return False
    path = environ.get("PATH_INFO", "")
    return path.startswith("/cddlm/wsdl/") or (
        path.startswith(MOUNTS) and "wsdl" in environ.get("QUERY_STRING", "").lower())


class Router:
    def __init__(self, apps: dict[str, WsgiApplication], limits: Limits, portal_url: Callable[[], str],
                 dashboard: Callable | None = None, names: frozenset[str] = frozenset({"*"}),
                 exchanges: dict[str, soap.Exchange] | None = None,
                 notified: Callable[[str], None] | None = None,
                 authenticator: Authenticator | None = None):
        self.apps = apps          # mount point -> Spyne WSGI application
        self.exchanges = exchanges or {}   # mount point -> its Exchange (the direct reads)
        # a host portal's notification of a delegated sub-application (AGENTS + host name):
        # only a hint to ping that host now, so it needs no credentials and its body is unread
        self.notified = notified
        self.limits = limits
        self.portal_url = portal_url
        self.dashboard = dashboard
        self.names = names        # the Host names answered (see ``refusal``)
        self.authenticator = authenticator

    # -- before the application: the HTTP server's gate (see the module docstring) ----------------
    def gate(self, environ: dict, body: bytes | None, resume: Callable) -> object:
        auth = self.authenticator
        if auth is None or auth.local:
            return None
        path = environ.get("PATH_INFO", "")
        if open_to_all(environ):
            return None           # answered without credentials: none checked, none counted
        soap_post = environ.get("REQUEST_METHOD") == "POST" and path.startswith(MOUNTS)
        if body is None:          # the headers are in, the body is not read
            environ[GATED] = True
            if auth.has_header_credentials(environ):
                if auth.admit(environ, None, lambda: resume(0 if REFUSED in environ else None)):
                    return 0 if REFUSED in environ else None      # refused: read nothing
                return LATER
            if soap_post and not auth.may_read(environ):
                return 0
            return self.limits.unauthenticated_body_bytes
        if PRINCIPAL in environ or REFUSED in environ or not soap_post or not body \
                or len(body) > self.limits.unauthenticated_body_bytes:
            return None           # the application answers (too large: RequestTooLarge)
        limit = self.limits.max_soap_header_bytes
        try:
            root = xmlsafe.parse_head(body, "{%s}Body" % soap.ENV, limit)
            header = root.find("{%s}Header" % soap.ENV)
            security = header.find(SECURITY) if header is not None else None
        except BadArgument as e:
            auth.without_credentials(environ, e, limit)
            return None
        if security is None:
            auth.without_credentials(environ)
            return None
        return None if auth.admit(environ, security, lambda: resume(None)) else LATER

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        refused = refusal(environ, self.names, path.startswith(MOUNTS))
        if refused is not None:
            return self._plain(start_response, refused[0], refused[1].encode("utf-8"))
        if path.startswith("/cddlm/wsdl/") and method in ("GET", "HEAD"):
            data = static_file(path[len("/cddlm/wsdl/"):])
            if data is None:
                return self._plain(start_response, "404 Not Found", b"no such file\n")
            if path.endswith(".wsdl"):
                data = wsdl_for(self.portal_url(), absolute_imports=False)
            return self._send(start_response, "200 OK", "text/xml; charset=utf-8", data)
        if path.startswith(AGENTS) and method == "POST" and self.notified is not None:
            declared = environ.get("CONTENT_LENGTH") or "0"      # drained, never read as XML
            environ["wsgi.input"].read(min(int(declared), 1 << 20) if declared.isdigit() else 0)
            self.notified(path[len(AGENTS):].strip("/")[:256])
            return self._plain(start_response, "202 Accepted", b"")
        for mount in MOUNTS:
            if path == mount or path.startswith(mount + "/"):
                if method == "GET" and "wsdl" in environ.get("QUERY_STRING", "").lower():
                    return self._send(start_response, "200 OK", "text/xml; charset=utf-8",
                                      wsdl_for(self.portal_url(), absolute_imports=True))
                if method != "POST":
                    return self._plain(start_response, "405 Method Not Allowed",
                                       b"POST a SOAP 1.1 envelope, or GET ?wsdl\n",
                                       [("Allow", "POST, GET")])
                return self._soap(mount, environ, start_response)
        if self.dashboard is not None and not path.startswith("/cddlm/"):
            return self.dashboard(environ, start_response)
        if path == "/":
            text = "cddlm portal\nportal endpoint: %s/cddlm/portal (WSDL: ?wsdl)\n" % self.portal_url()
            return self._plain(start_response, "200 OK", text.encode())
        return self._plain(start_response, "404 Not Found", b"not found\n")

    def _soap(self, mount: str, environ, start_response):
        if REFUSED in environ:    # by the gate, before the body was read or parsed
            return self._fault(start_response, environ[REFUSED])
        limit = self.limits.max_body_bytes
        anonymous = environ.get(GATED) and PRINCIPAL not in environ
        if anonymous:
            limit = self.limits.unauthenticated_body_bytes
        declared = environ.get("CONTENT_LENGTH")
        try:
            size = int(declared) if declared else None
        except ValueError:
            size = None
        stream = environ["wsgi.input"]
        data = b"" if size is not None and size > limit else \
            stream.read(limit + 1) if size is None else stream.read(size)
        if len(data) > limit or (size is not None and size > limit):
            too_large = RequestTooLarge(size, limit)
            if anonymous:
                too_large.message += (" for a request without HTTP credentials (send Basic or "
                                      "Bearer credentials in the Authorization header for more)")
            return self._fault(start_response, too_large)
        environ = dict(environ)
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "").rstrip("/") + mount
        environ["PATH_INFO"] = environ.get("PATH_INFO", "")[len(mount):]
        exchange = self.exchanges.get(mount)
        answer = exchange.direct(data, environ) if exchange is not None else None
        if answer is not None:    # a hot read, answered without Spyne's plumbing
            start_response(answer[0], answer[1])
            return [answer[2]]
        environ["wsgi.input"] = io.BytesIO(data)
        environ["CONTENT_LENGTH"] = str(len(data))
        return self.apps[mount](environ, start_response)

    def _fault(self, start_response, exc):
        fault = to_fault(exc)
        return self._send(start_response, fault.status, "text/xml; charset=utf-8",
                          fault_envelope(exc), list(fault.headers.items()))

    @staticmethod
    def _send(start_response, status, ctype, data: bytes, extra=()):
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(data)))]
                       + list(extra))
        return [data]

    def _plain(self, start_response, status, data: bytes, extra=()):
        return self._send(start_response, status, "text/plain; charset=utf-8", data, extra)
