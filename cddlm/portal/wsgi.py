"""The portal's WSGI application: a route table over the three SOAP endpoints and the static
WSDL/XSD folder, with the request-size limit enforced before a body is read.

    /cddlm/portal                  portal endpoint          (GET ?wsdl: the concrete WSDL)
    /cddlm/applications/{view}     application endpoint     (GET ?wsdl: the same WSDL)
    /cddlm/subscriptions/{id}      subscription manager
    /cddlm/wsdl/{file}             the WSDL and the schemas it imports (from wsdl/ and xsd/)
    everything else                the read-only dashboard and its JSON API (``cddlm/web``),
                                   when the composition root passes one in
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Callable

from lxml import etree
from spyne.server.wsgi import WsgiApplication

from cddlm.config import Limits
from cddlm.errors import RequestTooLarge
from cddlm.portal import soap
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
          dashboard: Callable | None = None,
          authenticate: soap.Authenticate | None = None) -> "Router":
    """The WSGI application for these endpoints (mount point -> endpoint), with ``dashboard``
    (a WSGI application) answering every other path. Every SOAP request is authenticated by
    ``authenticate`` (none: local mode); the WSDL and its schemas are public."""
    validator = soap.Validator(XSD_DIR, SCHEMAS)
    apps = {mount: WsgiApplication(soap.application(ep, validator, limits, portal_url, authenticate),
                                   max_content_length=limits.max_body_bytes + 1)
            for mount, ep in endpoints.items()}
    return Router(apps, limits, portal_url, dashboard)


class Router:
    def __init__(self, apps: dict[str, WsgiApplication], limits: Limits, portal_url: Callable[[], str],
                 dashboard: Callable | None = None):
        self.apps = apps          # mount point -> Spyne WSGI application
        self.limits = limits
        self.portal_url = portal_url
        self.dashboard = dashboard

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if path.startswith("/cddlm/wsdl/") and method in ("GET", "HEAD"):
            data = static_file(path[len("/cddlm/wsdl/"):])
            if data is None:
                return self._plain(start_response, "404 Not Found", b"no such file\n")
            if path.endswith(".wsdl"):
                data = wsdl_for(self.portal_url(), absolute_imports=False)
            return self._send(start_response, "200 OK", "text/xml; charset=utf-8", data)
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
        limit = self.limits.max_body_bytes
        declared = environ.get("CONTENT_LENGTH")
        try:
            size = int(declared) if declared else None
        except ValueError:
            size = None
        if size is not None and size > limit:
            return self._fault(start_response, RequestTooLarge(size, limit))
        stream = environ["wsgi.input"]
        data = stream.read(limit + 1) if size is None else stream.read(size)
        if len(data) > limit:
            return self._fault(start_response, RequestTooLarge(None, limit))
        environ = dict(environ)
        environ["wsgi.input"] = io.BytesIO(data)
        environ["CONTENT_LENGTH"] = str(len(data))
        environ["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "").rstrip("/") + mount
        environ["PATH_INFO"] = environ.get("PATH_INFO", "")[len(mount):]
        if not environ.get("CONTENT_TYPE"):
            environ["CONTENT_TYPE"] = "text/xml; charset=utf-8"
        return self.apps[mount](environ, start_response)

    def _fault(self, start_response, exc):
        return self._send(start_response, "500 Internal Server Error", "text/xml; charset=utf-8",
                          fault_envelope(exc))

    @staticmethod
    def _send(start_response, status, ctype, data: bytes, extra=()):
        start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(data)))]
                       + list(extra))
        return [data]

    def _plain(self, start_response, status, data: bytes, extra=()):
        return self._send(start_response, status, "text/plain; charset=utf-8", data, extra)
