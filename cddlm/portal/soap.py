"""The SOAP 1.1 edge on Spyne: one protocol subclass and one Spyne application per endpoint.

Spyne carries the HTTP exchange; this module does what the portal needs on top (see
notes/soap-stack.md): parse with the safe parser, check ``mustUnderstand`` headers,
authenticate the caller (``portal/auth.py``: the request's principal, before anything else is
looked at), route on the full QName of the body element through the endpoint's operation
table, validate the body against the project's schemas, and write the whole response envelope
itself (body, fault and WS-Addressing headers) in place of Spyne's serializer.

Those steps are one ``Exchange`` per endpoint, which Spyne's protocol calls. The hottest reads
(operations marked ``direct``: GetResourceProperty, GetMultipleResourceProperties, lookup) are
answered by ``Exchange.direct`` through the very same steps without Spyne's WSGI plumbing,
which cost more than the read itself; ``tests/test_direct_reads.py`` holds the two paths to
the same bytes on the wire.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lxml import etree
from spyne import AnyXml, Application, ServiceBase, const as spyne_const, rpc
from spyne.protocol.soap import Soap11

from cddlm import logfields, metrics, ns, wsa, xmlsafe
from cddlm.application.tenancy import LOCAL_ADMIN, Principal
from cddlm.config import Limits
from cddlm.errors import AddressingError, BadArgument, Busy, RequestTooLarge
from cddlm.portal.faults import SoapFault, detail, soap_fault, to_fault

log = logging.getLogger(__name__)
# Spyne ends a request with a full pass of the garbage collector when the last one is older than
# this (1 s by default), for the file uploads it may hold, which the portal takes none of: a
# pass stopped every thread for up to 20 ms each second (5 % of the time the GIL was held under
# eight clients' creates). The collector's own thresholds (``app.GC_THRESHOLDS``) decide.
spyne_const.MIN_GC_INTERVAL = float("inf")
ENV = ns.SOAP11_ENV
SOAP12_ENV = "http://www.w3.org/2003/05/soap-envelope"
UNDERSTOOD_NS = frozenset(wsa.VERSIONS) | {ns.WSSE}     # addressing, and wsse:Security
ACTOR_NEXT = "http://schemas.xmlsoap.org/soap/actor/next"
OUT_NSMAP = {"soapenv": ENV, "wsa": ns.WSA}


@dataclass
class Request:
    body: etree._Element
    headers: list[etree._Element]
    addressing: wsa.Addressing
    path: str                      # PATH_INFO below the endpoint's mount point
    portal: str                    # this portal's base URL
    principal: Principal           # who sends it (portal/auth.py)

    def resource_id(self) -> str | None:
        return self.addressing.parameter("{%s}ResourceId" % ns.API)


@dataclass(frozen=True)
class Operation:
    handler: Callable[[Request], etree._Element]
    action: str                     # wsa:Action of the response
    validate: bool = True           # schema-validate the body first
    direct: bool = False            # a hot read: answered without Spyne (Exchange.direct)


@dataclass
class Endpoint:
    name: str
    operations: dict[str, Operation]
    understood_headers: frozenset = frozenset({"{%s}ResourceId" % ns.API})


@dataclass
class _State:
    endpoint: str = "unknown"
    request: Request | None = None
    operation: Operation | None = None
    response: etree._Element | None = None
    addressing: wsa.Addressing = field(default_factory=wsa.Addressing)
    name: str = "unknown"          # the operation's name, once routed (metrics, logs)
    started: float = field(default_factory=time.perf_counter)


class Validator:
    """Schema validation of request bodies against ``xsd/``; one compiled schema per thread
    (an lxml validator keeps its error log on the instance)."""

    def __init__(self, xsd_dir: Path, files: tuple[str, ...]):
        imports = "".join('<xsd:import namespace="%s" schemaLocation="%s"/>'
                          % (etree.parse(str(xsd_dir / f)).getroot().get("targetNamespace"),
                             (xsd_dir / f).resolve().as_uri()) for f in files)
        self._wrapper = ('<xsd:schema xmlns:xsd="http://www.w3.org/2001/XMLSchema" '
                         'targetNamespace="urn:cddlm:validation">%s</xsd:schema>' % imports).encode()
        self._local = threading.local()
        self._schema()  # compile once now, so a broken schema fails at start-up

    def _schema(self) -> etree.XMLSchema:
        schema = getattr(self._local, "schema", None)
        if schema is None:
            schema = self._local.schema = etree.XMLSchema(etree.fromstring(self._wrapper))
        return schema

    def check(self, element: etree._Element) -> None:
        schema = self._schema()
        if not schema.validate(element):
            err = schema.error_log.last_error
            message = err.message if err is not None else "invalid"
            raise BadArgument("invalid %s request: %s%s" % (
                etree.QName(element).localname, message,
                " (line %d)" % err.line if err is not None and err.line else ""))


Authenticate = Callable[[dict, list], Principal]     # (environ, SOAP headers) -> who


class Exchange:
    """One endpoint's handling of a request, without Spyne: parse with the safe parser, check
    headers, authenticate, route, validate (``decompose``), run the handler (``run``) and
    write the response envelope (``envelope``). Without ``authenticate`` every caller is the
    local administrator. Spyne's protocol (``CddlmSoap``) calls these for every operation;
    ``direct`` answers the operations marked ``direct`` through the same calls without
    Spyne's WSGI plumbing (the hot reads), byte for byte as Spyne would."""

    def __init__(self, endpoint: Endpoint, validator: Validator | None, limits: Limits,
                 portal_url: Callable[[], str], authenticate: Authenticate | None = None):
        self.endpoint = endpoint
        self.validator = validator
        self.limits = limits
        self.portal_url = portal_url
        self.authenticate = authenticate
        self.direct_tags = frozenset(t for t, op in endpoint.operations.items() if op.direct)

    def parse(self, data: bytes) -> etree._Element:
        if len(data) > self.limits.max_body_bytes:
            raise to_fault(RequestTooLarge(len(data), self.limits.max_body_bytes))
        limits = self.limits
        try:
            return xmlsafe.parse(
                data, max_depth=limits.max_xml_depth, max_nodes=limits.max_xml_nodes,
                max_attributes=limits.max_xml_attributes, large_bytes=limits.large_body_bytes,
                large_slots=limits.max_large_parses)
        except BadArgument as e:
            raise to_fault(BadArgument("the request is not usable XML: %s" % e)) from None
        except Busy as e:
            raise to_fault(e) from None

    def decompose(self, state: _State, root: etree._Element, env: dict) -> etree._Element:
        """Check the envelope and fill ``state`` (addressing first, so a fault relates to the
        request); returns the header element (or None). Raises ``SoapFault``."""
        logfields.begin(address=env.get("REMOTE_ADDR"))
        if root.tag == "{%s}Envelope" % SOAP12_ENV:
            raise soap_fault("VersionMismatch", "this endpoint speaks SOAP 1.1 (%s)" % ENV)
        if root.tag != "{%s}Envelope" % ENV:
            raise to_fault(BadArgument("the request is not a SOAP 1.1 envelope (root %s)" % root.tag))
        header = root.find("{%s}Header" % ENV)
        body = root.find("{%s}Body" % ENV)
        headers = [h for h in header if isinstance(h.tag, str)] if header is not None else []
        state.addressing = addressing = wsa.Addressing.read(headers)
        for h in headers:
            if h.get("{%s}mustUnderstand" % ENV) in ("1", "true") \
                    and h.get("{%s}actor" % ENV, ACTOR_NEXT) == ACTOR_NEXT \
                    and etree.QName(h).namespace not in UNDERSTOOD_NS \
                    and h.tag not in self.endpoint.understood_headers:
                raise soap_fault("MustUnderstand", "header %s is marked mustUnderstand and is not "
                                                   "understood by this endpoint" % h.tag)
        principal = LOCAL_ADMIN.at(env.get("REMOTE_ADDR") or "")
        if self.authenticate is not None:
            try:
                principal = self.authenticate(env, headers)
            except Exception as e:   # AuthenticationFailed, or the store failing
                raise to_fault(e) from None
        if addressing.repeated is not None:
            raise to_fault(AddressingError(
                "InvalidCardinality", "the header %s is given more than once"
                % etree.QName(addressing.repeated).localname, addressing.repeated))
        elsewhere = addressing.elsewhere()
        if elsewhere is not None:   # replies go back on the HTTP connection, never elsewhere
            where, address = elsewhere
            raise to_fault(AddressingError(
                "OnlyAnonymousAddressSupported", "%s %s: this portal replies only on the "
                "request's own connection (the anonymous address)"
                % (etree.QName(where).localname, address or "(no address)"), where))
        children = [c for c in body if isinstance(c.tag, str)] if body is not None else []
        if len(children) != 1:
            raise to_fault(BadArgument("the SOAP body must hold exactly one element, not %d"
                                       % len(children)))
        body_el = children[0]
        operation = self.endpoint.operations.get(body_el.tag)
        if operation is not None:
            name = etree.QName(body_el).localname   # createRequest: the operation create
            state.name = name[:-len("Request")] if name.endswith("Request") else name
            logfields.bind(operation=state.name, principal=principal.name)
        if operation is None:
            raise to_fault(BadArgument("%s is not an operation of the %s endpoint (it takes: %s)" % (
                body_el.tag, self.endpoint.name,
                ", ".join(sorted(etree.QName(t).localname for t in self.endpoint.operations)))))
        if operation.validate and self.validator is not None:
            try:
                self.validator.check(body_el)
            except BadArgument as e:
                raise to_fault(e) from None
        state.operation = operation
        state.request = Request(body_el, headers, addressing, env.get("PATH_INFO", ""),
                                self.portal_url(), principal)
        return header

    @staticmethod
    def run(state: _State) -> None:
        try:
            state.response = state.operation.handler(state.request)
        except SoapFault:
            raise
        except Exception as e:  # every error becomes a fault in exactly one place
            raise to_fault(e) from None

    @staticmethod
    def _answered(state: _State | None, error) -> None:
        """Every answer of both paths comes this way: the request is counted, its log fields end."""
        if state is not None:
            metrics.request(state.endpoint, state.name, _outcome(error),
                            time.perf_counter() - state.started)
        logfields.end()

    @staticmethod
    def envelope(state: _State | None, error) -> etree._Element:
        """The response envelope: the handler's response, or the fault ``error``, with the
        WS-Addressing reply headers (``_answered``)."""
        Exchange._answered(state, error)
        env = etree.Element("{%s}Envelope" % ENV, nsmap=OUT_NSMAP)
        header = etree.SubElement(env, "{%s}Header" % ENV)
        body = etree.SubElement(env, "{%s}Body" % ENV)
        if error is not None:
            body.append(_fault_element(error))
            action = getattr(error, "action", ns.WSA + "/soap/fault")
        else:
            body.append(state.response)
            action = state.operation.action
        addressing = state.addressing if state is not None else wsa.Addressing()
        for h in addressing.reply_headers(action):
            header.append(h)
        return env

    @staticmethod
    def envelope_bytes(state: _State | None, error) -> bytes:
        """``envelope``, serialized, byte for byte: for an answer, written as text around the
        serialized response (building the envelope's elements cost five times as much),
        where lxml would write the same: the answer stands alone, the request was in
        WS-Addressing 1.0 (or none), and the answer binds neither the envelope's prefixes nor
        its namespaces otherwise than the envelope does (lxml drops, from an element moved
        into the envelope, each ``xmlns:wsa`` the envelope already declares: so is it here).
        Otherwise, and for faults, through ``envelope``."""
        response = state.response if state is not None and error is None else None
        if response is not None and response.getparent() is None:
            body = etree.tostring(response, encoding="UTF-8", xml_declaration=False)
            same = body.count(_WSA_DECL)
            headers = state.addressing.reply_header_text(state.operation.action) \
                if body.count(b"xmlns:wsa=") == same and body.count(_WSA_NAME) == same \
                and b"xmlns:soapenv=" not in body and _ENV_NAME not in body else None
            if headers is not None:
                Exchange._answered(state, None)
                return b"".join((_OPEN, headers.encode("utf-8"), _MIDDLE,
                                 body.replace(_WSA_DECL, b"") if same else body, _CLOSE))
        return etree.tostring(Exchange.envelope(state, error), encoding="UTF-8",
                              xml_declaration=True)

    def direct(self, data: bytes, env: dict) -> tuple[str, list[tuple[str, str]], bytes] | None:
        """(status, headers, body) for a request to a ``direct`` operation, or one that does
        not parse (the same fault Spyne's path gives it, without parsing or waiting twice);
        None for any other request (then Spyne answers it, reusing the parsed document:
        ``DOCUMENT``)."""
        if not self.direct_tags:
            return None
        state = _State(self.endpoint.name)
        error: SoapFault | None = None
        try:
            root = self.parse(data)
        except SoapFault as e:
            root, error = None, e
        if root is not None:
            body = root.find("{%s}Body" % ENV) if root.tag == "{%s}Envelope" % ENV else None
            first = next((c for c in body if isinstance(c.tag, str)), None) \
                if body is not None else None
            if first is None or first.tag not in self.direct_tags:
                env[DOCUMENT] = root
                return None
            try:
                self.decompose(state, root, env)
                self.run(state)
            except SoapFault as e:
                error = e
        out = self.envelope_bytes(state, error)
        headers = [("Content-Type", CONTENT_TYPE)]
        if error is not None:
            headers.extend(error.headers.items())
        headers.append(("Content-Length", str(len(out))))
        return ("200 OK" if error is None else error.status), headers, out


# the envelope as lxml writes it around its header blocks and body (``envelope_bytes``)
_OPEN = ("<?xml version='1.0' encoding='UTF-8'?>\n<soapenv:Envelope xmlns:soapenv=\"%s\" "
         "xmlns:wsa=\"%s\"><soapenv:Header>" % (ENV, ns.WSA)).encode()
_MIDDLE = b"</soapenv:Header><soapenv:Body>"
_CLOSE = b"</soapenv:Body></soapenv:Envelope>"
_WSA_DECL = (' xmlns:wsa="%s"' % ns.WSA).encode()
_WSA_NAME, _ENV_NAME = ('"%s"' % ns.WSA).encode(), ('"%s"' % ENV).encode()


DOCUMENT = "cddlm.soap.document"        # environ key: a request already parsed by ``direct``
CONTENT_TYPE = "text/xml; charset=utf-8"


class CddlmSoap(Soap11):
    """SOAP 1.1 as the portal speaks it, on Spyne: every step is the endpoint's ``Exchange``."""

    def __init__(self, exchange: Exchange):
        super().__init__()
        self.exchange = exchange

    def create_in_document(self, ctx, charset=None):
        ctx.udc = _State(self.exchange.endpoint.name)
        parsed = ctx.transport.req_env.pop(DOCUMENT, None)
        if parsed is not None:
            ctx.in_document = parsed
            return
        data = b"".join(ctx.in_string) if not isinstance(ctx.in_string, bytes) else ctx.in_string
        ctx.in_document = self.exchange.parse(data)

    def decompose_incoming_envelope(self, ctx, message=Soap11.REQUEST):
        try:
            header = self.exchange.decompose(ctx.udc, ctx.in_document, ctx.transport.req_env)
        except SoapFault as e:
            raise _answering(ctx, e) from None
        ctx.in_header_doc = header
        ctx.in_body_doc = ctx.udc.request.body
        ctx.method_request_string = "{%s}dispatch" % ns.API_WSDL

    def deserialize(self, ctx, message):
        ctx.in_object = [None]     # handlers read ctx.udc.request, not Spyne objects

    def serialize(self, ctx, message):
        # the portal writes every response envelope itself
        state: _State | None = ctx.udc if isinstance(ctx.udc, _State) else None
        ctx.out_document = Exchange.envelope(state, ctx.out_error)


def _dispatch(ctx, _payload):
    try:
        Exchange.run(ctx.udc)
    except SoapFault as e:
        raise _answering(ctx, e) from None
    return None


def _answering(ctx, fault: SoapFault) -> SoapFault:
    """The fault, with its HTTP status and headers (401 and a challenge ...) set on the reply."""
    if fault.status != "500 Internal Server Error":
        ctx.transport.resp_code = fault.status
    ctx.transport.resp_headers.update(fault.headers)
    return fault


def _outcome(fault) -> str:
    """``ok``, or the fault's name (its detail element's, one of ``faults.FAULTS``; else its
    SOAP fault code): a label of the metrics, from a fixed set."""
    if fault is None:
        return "ok"
    det = getattr(fault, "detail", None)
    if isinstance(det, etree._Element):
        return etree.QName(det).localname
    code = str(getattr(fault, "faultcode", "Server") or "Server")
    if code.startswith("{"):        # a fault code of another namespace (wsse's, wsa's)
        return etree.QName(code).localname
    base = code.split(".", 1)[0].split(":")[-1]
    return base if base in ("Client", "Server", "MustUnderstand", "VersionMismatch") else "Server"


def _fault_element(fault) -> etree._Element:
    code = str(getattr(fault, "faultcode", "Server") or "Server")
    message = str(getattr(fault, "faultstring", "") or "error")
    el = etree.Element("{%s}Fault" % ENV, nsmap=OUT_NSMAP)
    if code.startswith("{"):     # a fault code in another namespace (WS-Addressing's, wsse's)
        base = "Qualified"
        if code.startswith("{%s}" % ns.WSSE):
            el = etree.Element("{%s}Fault" % ENV, nsmap=dict(OUT_NSMAP, wsse=ns.WSSE))
        etree.SubElement(el, "faultcode").text = etree.QName(code)
    else:
        base = code.split(".", 1)[0].split(":")[-1]
        if base not in ("Client", "Server", "MustUnderstand", "VersionMismatch"):
            base = "Server"
        etree.SubElement(el, "faultcode").text = "soapenv:" + base
    etree.SubElement(el, "faultstring").text = message
    det = getattr(fault, "detail", None)
    if not isinstance(det, etree._Element) and base in ("Client", "Server"):
        # a fault raised inside Spyne itself (e.g. a GET, an empty request): give it a detail too
        det = detail(BadArgument(message) if base == "Client" else _server(message))
    if isinstance(det, etree._Element):
        holder = etree.SubElement(el, "detail")
        holder.append(det)
        holder.extend(getattr(fault, "more_detail", ()))
    return el


def fault_envelope(exc: BaseException) -> bytes:
    """A complete fault response for errors found before Spyne is involved (body too large)."""
    env = etree.Element("{%s}Envelope" % ENV, nsmap=OUT_NSMAP)
    fault = to_fault(exc)
    header = etree.SubElement(env, "{%s}Header" % ENV)
    for h in wsa.Addressing().reply_headers(fault.action):
        header.append(h)
    etree.SubElement(env, "{%s}Body" % ENV).append(_fault_element(fault))
    return etree.tostring(env, xml_declaration=True, encoding="UTF-8")


def _server(message: str):
    from cddlm.errors import ServerError
    return ServerError(message)


def application(exchange: Exchange) -> Application:
    service = type("%sService" % exchange.endpoint.name.title(), (ServiceBase,), {
        "dispatch": rpc(AnyXml, _body_style="bare", _returns=AnyXml)(_dispatch)})
    return Application([service], tns=ns.API_WSDL, name=exchange.endpoint.name,
                       in_protocol=CddlmSoap(exchange), out_protocol=CddlmSoap(exchange))
