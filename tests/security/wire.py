"""What an attacker on the network has: raw HTTP (``http.client``, any source address on
loopback, with or without TLS) and SOAP envelopes written by hand with lxml, WS-Security
UsernameTokens built here from the OASIS profile (not by the portal's own code), and a look
at the store behind the portal to prove a refused request changed nothing."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.client
import os
import sqlite3
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from lxml import etree

from cddlm import ns

ENV = ns.SOAP11_ENV
WSSE, WSU = ns.WSSE, ns.WSU
UTP = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-username-token-profile-1.0"
NSMAP = {"soapenv": ENV, "api": ns.API, "wsa": ns.WSA, "wsrf-rp": ns.WSRF_RP, "wsrf-rl": ns.WSRF_RL,
         "wsrf-bf": ns.WSRF_BF, "wsrf-r": ns.WSRF_R, "wsnt": ns.WSNT, "ext": ns.EXT, "wsse": WSSE,
         "wsu": WSU}
DECL = " ".join('xmlns:%s="%s"' % kv for kv in NSMAP.items())
NATIVE = "urn:cddlm:lang:components:1"


def sleeper(name: str = "s", seconds: int = 600) -> str:
    return ('<application xmlns="urn:cddlm:lang:components:1"><component name="%s" type="process">'
            '<attribute name="argv"><item>sleep</item><item>%d</item></attribute></component>'
            '</application>' % (name, seconds))


def fragment(text: str) -> etree._Element:
    """An element written with the usual prefixes (declared on a wrapper, then detached)."""
    holder = etree.fromstring("<holder %s>%s</holder>" % (DECL, text))
    return holder[0]


def envelope(body: str | etree._Element, headers: list = ()) -> bytes:
    env = etree.Element("{%s}Envelope" % ENV, nsmap={"soapenv": ENV})
    header = etree.SubElement(env, "{%s}Header" % ENV)
    for h in headers:
        header.append(fragment(h) if isinstance(h, str) else h)
    etree.SubElement(env, "{%s}Body" % ENV).append(fragment(body) if isinstance(body, str) else body)
    return etree.tostring(env, xml_declaration=True, encoding="UTF-8")


def resource_id(app_id: str) -> str:
    return '<api:ResourceId wsa:IsReferenceParameter="true">%s</api:ResourceId>' % app_id


@dataclass
class Reply:
    status: int
    headers: dict
    body: bytes

    @property
    def doc(self) -> etree._Element:
        return etree.fromstring(self.body)

    @property
    def fault(self) -> tuple[str, str, str] | None:
        """(faultcode, detail element's local name or '', faultstring), None for no fault."""
        if not self.body.startswith(b"<"):
            return None
        f = self.doc.find(".//{%s}Fault" % ENV)
        if f is None:
            return None
        detail = f.find("detail")
        name = etree.QName(detail[0]).localname if detail is not None and len(detail) else ""
        return (f.findtext("faultcode") or "", name, f.findtext("faultstring") or "")

    def xpath(self, expr: str):
        return self.doc.xpath(expr, namespaces=NSMAP)


def request(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None,
            source: str | None = None, context: ssl.SSLContext | None = None,
            timeout: float = 15.0) -> Reply:
    parts = urlsplit(url)
    kwargs = {"timeout": timeout, "source_address": (source, 0) if source else None}
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=context, **kwargs)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, **kwargs)
    try:
        conn.request(method, parts.path + ("?" + parts.query if parts.query else ""), body=body,
                     headers=dict({"Content-Type": "text/xml; charset=utf-8"} if body else {},
                                  **(headers or {})))
        r = conn.getresponse()
        return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def soap(url: str, body: str | etree._Element, soap_headers: list = (), **kwargs) -> Reply:
    """POST an envelope; ``kwargs`` as ``request`` takes them (``headers``: HTTP headers)."""
    return request(url, "POST", envelope(body, soap_headers), **kwargs)


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()}


def bearer(token: str) -> dict:
    return {"Authorization": "Bearer " + token}


def zulu(when: dt.datetime | None = None) -> str:
    when = when or dt.datetime.now(dt.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (when.microsecond // 1000)


def username_token(user: str, secret: str, digest: bool = False, nonce: bytes | None = None,
                   created: str | None = None, expires: str | None = None) -> etree._Element:
    """A wsse:Security header (UsernameToken Profile 1.0), made here by hand."""
    security = etree.Element("{%s}Security" % WSSE, nsmap={"wsse": WSSE, "wsu": WSU, "soapenv": ENV})
    security.set("{%s}mustUnderstand" % ENV, "1")
    if expires is not None:
        stamp = etree.SubElement(security, "{%s}Timestamp" % WSU)
        etree.SubElement(stamp, "{%s}Created" % WSU).text = created or zulu()
        etree.SubElement(stamp, "{%s}Expires" % WSU).text = expires
    token = etree.SubElement(security, "{%s}UsernameToken" % WSSE)
    etree.SubElement(token, "{%s}Username" % WSSE).text = user
    password = etree.SubElement(token, "{%s}Password" % WSSE)
    if digest:
        nonce = nonce if nonce is not None else os.urandom(16)
        created = created or zulu()
        password.set("Type", UTP + "#PasswordDigest")
        password.text = base64.b64encode(hashlib.sha1(nonce + created.encode() + secret.encode())
                                         .digest()).decode()
    else:
        password.set("Type", UTP + "#PasswordText")
        password.text = secret
    if nonce is not None:
        n = etree.SubElement(token, "{%s}Nonce" % WSSE)
        n.set("EncodingType", "http://docs.oasis-open.org/wss/2004/01/"
                              "oasis-200401-wss-soap-message-security-1.0#Base64Binary")
        n.text = base64.b64encode(nonce).decode()
    if created is not None:
        etree.SubElement(token, "{%s}Created" % WSU).text = created
    return security


# -- the store behind the portal -------------------------------------------------------------------
SNAPSHOT = {
    "applications": "id, name, owner, state, desired, generation, event_seq, termination_time, "
                    "client_token, language, descriptor_digest",
    "views": "id, app_id, portal, termination_time",
    "history": "app_id, seq, state",
    "components": "app_id, path, desired, observed, generation, pid, restarts",
    "subscriptions": "id, producer, subscriber, scope, status, paused, termination_time",
    "hosts": "name, down, reason",
    "audit": "id, principal, action, app_id",
}


def snapshot(db: str) -> dict:
    """What a refused request must not change (read-only, beside the running portal)."""
    conn = sqlite3.connect("file:%s?mode=ro" % db, uri=True, timeout=30)
    try:
        out = {t: sorted(conn.execute("SELECT %s FROM %s" % (cols, t)).fetchall(), key=repr)
               for t, cols in SNAPSHOT.items()}
        out["events"] = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        return out
    finally:
        conn.close()
