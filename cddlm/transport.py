"""How the messages of ``cddlm.client`` travel.

- **The protocol comes from the project's own WSDL and schemas** (``wsdl/``, ``xsd/``), read
  once per process from those files: the client never fetches a portal's ``?wsdl`` (a portal
  that answers SOAP but serves no WSDL works; one that streams a huge WSDL costs nothing), and
  zeep never goes to the network for a schema.
- **Every message carries SOAPAction and WS-Addressing** (``wsa:To``, ``wsa:Action``,
  ``wsa:MessageID``): zeep adds them to the typed operations (the WSDL's UsingAddressing);
  ``envelope`` writes them on the messages built with lxml, with the action the WSDL gives
  the body's element.
- **HTTP is an ``Http``**: ``post(address, data, headers, timeout)`` answers an object with
  ``status_code``, ``content`` and ``headers`` (a requests ``Response``, or an ``Reply``) and
  raises ``Unreachable``. A user's client posts through ``RequestsHttp`` (a requests session:
  its credentials, TLS and proxies); a portal calling another portal brings its own
  (``cddlm.agents.PortalHttp``: the operator's credentials for that exact portal, the network
  policy, an absolute deadline and a size cap).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol

import requests
import zeep
from lxml import etree
from zeep.transports import Transport
from zeep.wsdl import Document

from cddlm import ns, wsa, xmlsafe
from cddlm.errors import ClientError

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = (ROOT / "wsdl", ROOT / "xsd")
WSDL_FILE = "cddlm.wsdl"


class Unreachable(ClientError):
    """The portal did not answer; ``sent`` is False when the request certainly never reached
    it (the connection was refused or not made in time)."""

    def __init__(self, message: str, sent: bool = True):
        super().__init__(message)
        self.sent = sent


class NotSoap(Unreachable):
    """The peer answered over HTTP, but not with SOAP (an error page, a proxy's 503): an answer,
    not silence. ``status``, ``reason``, ``content_type`` and the start of the page (``text``)
    say what it was; the front portal relays such an answer as a wrapped fault."""

    def __init__(self, address: str, status: int, reason: str = "", content_type: str = "",
                 text: str = ""):
        super().__init__("%s answered HTTP %d%s without SOAP" % (
            address, status, " " + reason if reason else ""))
        self.status, self.reason, self.content_type, self.text = status, reason, content_type, text


TEXT_KEPT = 2000      # characters of a page that is not SOAP kept in its error


def check_soap(response: Any, address: str) -> etree._Element | None:
    """The SOAP envelope of an HTTP answer; ``NotSoap`` when it is none (caused by a requests
    ``HTTPError`` naming the status, as the command line reads it)."""
    try:
        doc = xmlsafe.parse(response.content)
    except ClientError:
        doc = None
    if doc is None or doc.tag != "{%s}Envelope" % ns.SOAP11_ENV:
        reason = getattr(response, "reason", "") or ""
        content = response.content or b""
        raise NotSoap(address, response.status_code, reason,
                      response.headers.get("Content-Type") or "",
                      content[:TEXT_KEPT].decode("utf-8", "replace")) \
            from requests.HTTPError("%d %s" % (response.status_code, reason))
    return doc


class Http(Protocol):
    def post(self, address: str, data: bytes, headers: dict[str, str], timeout: float) -> Any: ...


@dataclass
class Reply:
    """An HTTP answer as zeep and ``cddlm.client`` read it (the shape of a requests Response)."""
    status_code: int
    content: bytes
    headers: Any                    # .get(name) case-insensitively
    reason: str = ""
    encoding: str | None = None


class RequestsHttp:
    """HTTP through a requests session (a user's client)."""

    def __init__(self, session: requests.Session):
        self.session = session

    def post(self, address: str, data: bytes, headers: dict[str, str], timeout: float) -> Any:
        try:
            return self.session.post(address, data=data, headers=headers, timeout=timeout)
        except requests.exceptions.SSLError as e:
            raise Unreachable("cannot reach the portal at %s over TLS: %s (is its certificate "
                              "signed by a CA you trust? --ca-file / Tls(ca_file=...))"
                              % (address, reason(e)), sent=False) from e
        except (requests.RequestException, OSError) as e:
            raise Unreachable("cannot reach %s: %s" % (address, e), sent=not refused(e)) from e


def refused(e: BaseException | None) -> bool:
    """Whether a requests/urllib3 error means the connection was never made."""
    from urllib3.exceptions import ConnectTimeoutError
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, (requests.ConnectTimeout, ConnectionRefusedError, ConnectTimeoutError)):
            return True
        inner = getattr(e, "reason", None)
        if not isinstance(inner, BaseException):
            inner = e.args[0] if e.args and isinstance(e.args[0], BaseException) else None
        e = inner or e.__cause__ or e.__context__
    return False


def reason(e: BaseException) -> str:
    """The innermost message of a requests/urllib3 error (its outer layers repeat the URL, or
    are a tuple: ``('Connection aborted.', RemoteDisconnected('Remote end closed ...'))``)."""
    for _ in range(10):
        inner = getattr(e, "reason", None)
        if inner is not None and not isinstance(inner, BaseException):
            return str(inner)
        if inner is None:
            nested = [a for a in e.args if isinstance(a, BaseException)]
            inner = nested[-1] if nested else None
        if inner is None:
            break
        e = inner
    return str(e)


class ZeepTransport(Transport):
    """zeep's transport: messages through an ``Http``, documents from the project's files only."""

    def __init__(self, http: Http, timeout: float):
        super().__init__(timeout=timeout, operation_timeout=timeout)
        self.http = http

    def post(self, address: str, message: bytes, headers: dict[str, str]) -> Any:
        response = self.http.post(address, message, headers, self.operation_timeout)
        if response.status_code >= 300:    # a fault is SOAP; an error page is not (zeep chokes)
            check_soap(response, address)
        return response

    def load(self, url: str) -> bytes:
        return local_file(url)

    def get(self, address, params, headers):
        raise Unreachable("the client reads no document from %s: the protocol is its own WSDL" % address)


def local_file(url: str) -> bytes:
    """A file of ``wsdl/`` or ``xsd/`` by its name (how the WSDL's relative imports read)."""
    name = url.replace("\\", "/").rsplit("/", 1)[-1]
    for folder in FOLDERS:
        path = folder / name
        if name and path.is_file():
            return path.read_bytes()
    raise ClientError("%s is not one of the project's WSDL or schema files (%s)"
                      % (url, ", ".join(str(f) for f in FOLDERS)))


_lock = threading.Lock()
_loaded: dict[str, Any] = {}


def document() -> Document:
    """The project's WSDL, parsed once (about 30 ms) and shared by every client."""
    with _lock:
        if "doc" not in _loaded:
            doc = Document(str(FOLDERS[0] / WSDL_FILE), ZeepTransport(RequestsHttp(requests.Session()), 30))
            actions: dict[str, str] = {}
            for binding in doc.bindings.values():
                for op in binding._operations.values():
                    body = getattr(op.input, "body", None)
                    qname = getattr(body, "qname", None)
                    if qname is not None:
                        actions.setdefault(qname.text, op.abstract.wsa_action or op.soapaction)
            _loaded.update(doc=doc, actions=actions)
        return _loaded["doc"]


def client(http: Http, timeout: float) -> zeep.Client:
    return zeep.Client(document(), transport=ZeepTransport(http, timeout))


def action(body: etree._Element) -> str:
    """The wsa:Action (and SOAPAction) the WSDL gives a request with this body element."""
    document()
    found = _loaded["actions"].get(body.tag)
    if found is None:
        raise ClientError("%s is not a request of the WSDL" % body.tag)
    return found


def envelope(address: str, body: etree._Element, headers: Iterable[etree._Element] = ()) \
        -> tuple[bytes, dict[str, str]]:
    """A SOAP 1.1 request of ``body`` to ``address`` with wsa:To, wsa:Action, wsa:MessageID and
    ``headers`` (copied), and its HTTP headers (Content-Type, SOAPAction)."""
    act = action(body)
    env = etree.Element("{%s}Envelope" % ns.SOAP11_ENV, nsmap={"soapenv": ns.SOAP11_ENV, "wsa": ns.WSA})
    header = etree.SubElement(env, "{%s}Header" % ns.SOAP11_ENV)
    header.extend(wsa.headers_for(wsa.Reference(address), act))
    for h in headers:
        header.append(etree.fromstring(etree.tostring(h)))
    etree.SubElement(env, "{%s}Body" % ns.SOAP11_ENV).append(body)
    return etree.tostring(env), {"Content-Type": "text/xml; charset=utf-8", "SOAPAction": '"%s"' % act}
