"""WS-ResourceProperties over a table of property builders.

Each resource (the portal, an application view, a subscription) is a ``Properties``: the
root element of its resource property document and an ordered map from property QName to a
function producing that property's elements. ``GetResourceProperty`` builds one property only
(cheap: ``api:state`` is one row read); ``GetResourcePropertyDocument`` and
``QueryResourceProperties`` build the document; a query is evaluated by ``cddlm.xpathsafe``
(a helper process, a time and a result budget).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from lxml import etree

from cddlm import ns, xmlsafe
from cddlm.errors import InvalidPropertyQName, InvalidQueryExpression, UnknownQueryDialect
from cddlm.portal.soap import Operation, Request
from cddlm.xpathsafe import XPathPool
from cddlm.xsdtypes import format_datetime

RP = "{%s}" % ns.WSRF_RP
RP_DRAFT = "{%s}" % ns.WSRF_RP_DRAFT
GET_ONE = (RP + "GetResourceProperty", RP_DRAFT + "GetResourceProperty")
RL = "{%s}" % ns.WSRF_RL
RPW = "http://docs.oasis-open.org/wsrf/rpw-2/"
# the draft's WSDL (WS-Addressing's default action: its namespace/portType/output)
RPW_DRAFT = "http://docs.oasis-open.org/wsrf/2004/06/wsrf-WS-ResourceProperties-1.2-draft-01.wsdl/"
Builder = Callable[[], list[etree._Element]]
# extension properties that were declared in the spec's namespace (spec 4.5.1 forbids it),
# still answered under their old names for one release: old QName -> the property's own
RENAMED = {"{%s}subscriptionStatus" % ns.API: "{%s}subscriptionStatus" % ns.EXT}


@dataclass
class Properties:
    document: str                        # Clark name of the RP document element
    builders: dict[str, Callable[..., list[etree._Element]]]   # property QName -> elements, in document order
    args: tuple = ()                     # what each builder is called with (a table built once)

    def get(self, qname: str) -> list[etree._Element]:
        builder = self.builders.get(qname) or self.builders.get(RENAMED.get(qname, ""))
        if builder is None:
            raise InvalidPropertyQName("%s is not a resource property of this resource" % qname)
        return builder(*self.args)

    def build_document(self) -> etree._Element:
        doc = etree.Element(self.document,
                            nsmap={k: v for k, v in ns.NSMAP.items() if k != "soapenv"})
        for builder in self.builders.values():
            doc.extend(builder(*self.args))
        return doc


def resolve_qname(el: etree._Element, value: str | None) -> str:
    """The Clark name of a QName written as element text, resolved in ``el``'s scope."""
    value = (value or "").strip()
    if not value:
        raise InvalidPropertyQName("empty resource property QName")
    prefix, sep, local = value.rpartition(":")
    if not local or any(c in local for c in " {}/"):
        raise InvalidPropertyQName("%r is not a QName" % value)
    namespace = el.nsmap.get(prefix if sep else None)
    if sep and namespace is None:
        raise InvalidPropertyQName("the prefix %r of %r is not declared" % (prefix, value))
    return "{%s}%s" % (namespace, local) if namespace else local


def property_names(body: etree._Element) -> list[str]:
    """The property QNames a GetResourceProperty (one) or GetMultipleResourceProperties body
    names; ``InvalidPropertyQName`` when it is not written as the operation wants."""
    if body.tag in GET_ONE:
        if len(body):
            raise InvalidPropertyQName("GetResourceProperty takes a QName as text, not elements")
        return [resolve_qname(body, body.text)]
    names = [c for c in body if isinstance(c.tag, str)]
    if not names or any(c.tag != RP + "ResourceProperty" for c in names):
        raise InvalidPropertyQName("GetMultipleResourceProperties takes one or more "
                                   "wsrf-rp:ResourceProperty elements")
    return [resolve_qname(c, c.text) for c in names]


def requested(body: etree._Element) -> list[str] | None:
    """The property QNames a GetResourceProperty or GetMultipleResourceProperties request
    names; None for any other request, or one its operation will refuse."""
    if body.tag not in GET_ONE + (RP + "GetMultipleResourceProperties",):
        return None
    try:
        return property_names(body)
    except InvalidPropertyQName:
        return None


def get_property(body: etree._Element, props: Properties) -> etree._Element:
    (qname,) = property_names(body)
    namespace = etree.QName(body).namespace     # answered in the request's version
    response = etree.Element("{%s}GetResourcePropertyResponse" % namespace,
                             nsmap={"wsrf-rp": namespace})
    response.extend(props.get(qname))
    return response


def get_multiple(body: etree._Element, props: Properties) -> etree._Element:
    qnames = property_names(body)
    response = etree.Element(RP + "GetMultipleResourcePropertiesResponse",
                             nsmap={"wsrf-rp": ns.WSRF_RP})
    for qn in qnames:
        response.extend(props.get(qn))
    return response


def get_document(body: etree._Element, props: Properties) -> etree._Element:
    response = etree.Element(RP + "GetResourcePropertyDocumentResponse",
                             nsmap={"wsrf-rp": ns.WSRF_RP})
    response.append(props.build_document())
    return response


def query(body: etree._Element, props: Properties, xpath: XPathPool) -> etree._Element:
    """QueryResourceProperties: the XPath is evaluated by a helper process with a time and a
    result budget (``cddlm.xpathsafe``), never by the thread answering the request."""
    expr_el = body.find(RP + "QueryExpression")
    if expr_el is None:
        raise InvalidQueryExpression("QueryResourceProperties needs a wsrf-rp:QueryExpression")
    dialect = (expr_el.get("Dialect") or "").strip()
    if dialect != ns.XPATH_DIALECT:
        raise UnknownQueryDialect("query dialect %r is not supported (only XPath 1.0, %s)"
                                  % (dialect, ns.XPATH_DIALECT))
    if len(expr_el):
        raise InvalidQueryExpression("the XPath expression must be text")
    text = (expr_el.text or "").strip()
    namespaces = {k: v for k, v in expr_el.nsmap.items() if k}
    result = xpath.query(etree.tostring(props.build_document()), text, namespaces)
    response = etree.Element(RP + "QueryResourcePropertiesResponse", nsmap={"wsrf-rp": ns.WSRF_RP})
    if result.kind == "nodes":
        for kind, value in result.items:
            if kind == "element":   # the helper's serialization of the portal's own document
                response.append(xmlsafe.parse(value.encode("utf-8")))
            else:  # a text or attribute node: its string value
                response.append(_result("text", value))
        if not len(response):
            response.append(_result("empty", ""))
    elif result.kind == "boolean":
        response.append(_result("boolean", "true" if result.value else "false"))
    elif result.kind == "number":
        value = float(result.value)   # type: ignore[arg-type]
        response.append(_result("number", str(int(value)) if value.is_integer() else repr(value)))
    else:
        response.append(_result("string", str(result.value)))
    return response


def _result(kind: str, value: str) -> etree._Element:
    """A query result that is not an element, wrapped (the response must hold elements)."""
    el = etree.Element("{%s}queryResult" % ns.EXT, nsmap={"ext": ns.EXT})
    el.set("type", kind)
    el.text = value
    return el


def operations(source: Callable[[Request], Properties], xpath: XPathPool) -> dict[str, Operation]:
    """The WS-RP read operations of a resource whose properties ``source`` gives; queries are
    evaluated by ``xpath``."""
    def wrap(fn):
        return lambda req: fn(req.body, source(req))
    return {
        RP + "GetResourceProperty": Operation(
            wrap(get_property), RPW + "GetResourceProperty/GetResourcePropertyResponse",
            validate=False, direct=True),
        RP_DRAFT + "GetResourceProperty": Operation(
            wrap(get_property), RPW_DRAFT + "GetResourceProperty/GetResourcePropertyResponse",
            validate=False, direct=True),
        RP + "GetMultipleResourceProperties": Operation(
            wrap(get_multiple),
            RPW + "GetMultipleResourceProperties/GetMultipleResourcePropertiesResponse",
            validate=False, direct=True),
        RP + "GetResourcePropertyDocument": Operation(
            wrap(get_document),
            RPW + "GetResourcePropertyDocument/GetResourcePropertyDocumentResponse"),
        RP + "QueryResourceProperties": Operation(
            lambda req: query(req.body, source(req), xpath), RPW + "QueryResourceProperties/QueryResourcePropertiesResponse",
            validate=False),
    }


# -- WS-ResourceLifetime properties, common to every resource ----------------------------------------
def current_time() -> list[etree._Element]:
    el = etree.Element(RL + "CurrentTime", nsmap={"wsrf-rl": ns.WSRF_RL})
    el.text = format_datetime(time.time())
    return [el]


def termination_time(when: float | None, tag: str = RL + "TerminationTime") -> etree._Element:
    """A nillable dateTime element: the time, or ``xsi:nil`` for never."""
    namespace = etree.QName(tag).namespace
    prefix = next((k for k, v in ns.NSMAP.items() if v == namespace), None)
    el = etree.Element(tag, nsmap={prefix: namespace, "xsi": ns.XSI})
    if when is None:
        el.set("{%s}nil" % ns.XSI, "true")
    else:
        el.text = format_datetime(when)
    return el
