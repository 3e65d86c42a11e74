"""Faults relayed from another portal (spec 7.1.3: "all faults must be a derivative of
WS-BaseFault ... a new WS-BaseFault derivative, a wrapped SOAPFault").

What another portal answered becomes the ``cause`` of a ``RemoteFault`` (the XML put in
``wsrf-bf:FaultCause``, and in ``api:terminationInfo/api:fault`` of a failure):

- a fault whose detail is a WS-BaseFault (it carries ``wsrf-bf:Timestamp``) goes as it came;
- any other answer, a plain SOAP fault with a detail that is no BaseFault, one without detail,
  an HTTP error page (a proxy's 503), becomes an ``ext:WrappedFault``: a BaseFault whose
  children keep the original ``faultcode``, ``faultstring`` and detail, or the HTTP status, its
  content type and the start of the page.

Another cddlm portal's faults are BaseFaults and relay unchanged; a foreign portal's are wrapped.
"""

from __future__ import annotations

import time

from lxml import etree

from cddlm import ns
from cddlm.xmlsafe import clean
from cddlm.xsdtypes import format_datetime

BF, EXT = "{%s}" % ns.WSRF_BF, "{%s}" % ns.EXT
WRAPPED = EXT + "WrappedFault"


def is_base_fault(el: etree._Element | None) -> bool:
    return el is not None and isinstance(el.tag, str) and el.find(BF + "Timestamp") is not None


def wrap(code: str | None, string: str, detail: etree._Element | None = None, *,
         status: int | None = None, content_type: str | None = None, page: str | None = None,
         now: float | None = None) -> str:
    """An ``ext:WrappedFault`` (XML text) holding what another portal answered."""
    el = etree.Element(WRAPPED, nsmap={"ext": ns.EXT, "wsrf-bf": ns.WSRF_BF})
    etree.SubElement(el, BF + "Timestamp").text = format_datetime(time.time() if now is None else now)
    etree.SubElement(el, BF + "Description").text = string
    for name, value in (("faultcode", code), ("faultstring", string if status is None else None)):
        if value:
            etree.SubElement(el, EXT + name).text = value
    if detail is not None:
        etree.SubElement(el, EXT + "detail").append(etree.fromstring(etree.tostring(detail)))
    if status is not None:
        etree.SubElement(el, EXT + "httpStatus").text = str(status)
        if content_type:
            etree.SubElement(el, EXT + "contentType").text = content_type
        if page:
            etree.SubElement(el, EXT + "page").text = clean(page)
    return etree.tostring(el, encoding="unicode")


def fault_cause(code: str | None, string: str, detail: etree._Element | None) -> str:
    """The cause to relay for a SOAP fault: its BaseFault detail, else the fault wrapped."""
    if is_base_fault(detail):
        assert detail is not None
        return etree.tostring(detail, encoding="unicode")
    return wrap(code, string, detail)
