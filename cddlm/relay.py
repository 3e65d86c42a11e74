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
What another portal says is bounded before it is kept or relayed (``bounded``): each text and
attribute at most ``errors.MAX_TEXT`` characters, the whole cause at most ``MAX_CAUSE`` (a
larger one is wrapped, its description kept). Its markup is data: it is parsed by the safe
parser and written back as XML, never interpreted.
"""

from __future__ import annotations

import copy
import time

from lxml import etree

from cddlm import ns
from cddlm.errors import clip
from cddlm.xmlsafe import clean
from cddlm.xsdtypes import format_datetime

BF, EXT = "{%s}" % ns.WSRF_BF, "{%s}" % ns.EXT
WRAPPED = EXT + "WrappedFault"
MAX_CAUSE = 64 * 1024   # characters of one relayed cause (a fault with a detail of its own)


def is_base_fault(el: etree._Element | None) -> bool:
    return el is not None and isinstance(el.tag, str) and el.find(BF + "Timestamp") is not None


def wrap(code: str | None, string: str, detail: etree._Element | None = None, *,
         status: int | None = None, content_type: str | None = None, page: str | None = None,
         now: float | None = None) -> str:
    """An ``ext:WrappedFault`` (XML text) holding what another portal answered."""
    el = etree.Element(WRAPPED, nsmap={"ext": ns.EXT, "wsrf-bf": ns.WSRF_BF})
    etree.SubElement(el, BF + "Timestamp").text = format_datetime(time.time() if now is None else now)
    etree.SubElement(el, BF + "Description").text = clip(clean(string))
    for name, value in (("faultcode", code), ("faultstring", string if status is None else None)):
        if value:
            etree.SubElement(el, EXT + name).text = clip(clean(value))
    holder = etree.SubElement(el, EXT + "detail") if detail is not None else None
    if holder is not None:
        holder.append(_clipped(detail))
    if status is not None:
        etree.SubElement(el, EXT + "httpStatus").text = str(status)
        if content_type:
            etree.SubElement(el, EXT + "contentType").text = clip(clean(content_type))
        if page:
            etree.SubElement(el, EXT + "page").text = clip(clean(page))
    text = etree.tostring(el, encoding="unicode")
    if holder is not None and len(text) > MAX_CAUSE:
        # a detail too large to relay whole: left out, and said so
        el.remove(holder)
        said = el.find(BF + "Description")
        said.text += " (its detail of %d characters left out)" % len(text)
        text = etree.tostring(el, encoding="unicode")
    return text


def fault_cause(code: str | None, string: str, detail: etree._Element | None) -> str:
    """The cause to relay for a SOAP fault: its BaseFault detail, else the fault wrapped."""
    if is_base_fault(detail):
        assert detail is not None
        return bounded(detail)
    return wrap(code, string, detail)


def bounded(fault: etree._Element) -> str:
    """A BaseFault another portal answered, as this portal keeps and relays it (XML text):
    each text and attribute value clipped, and a fault still over ``MAX_CAUSE`` characters
    wrapped with its description only."""
    text = etree.tostring(_clipped(fault), encoding="unicode")
    if len(text) <= MAX_CAUSE:
        return text
    said = clean(fault.findtext(BF + "Description") or "")
    return wrap(None, "%s (a fault of %d characters, too large to relay whole)"
                % (clip(said), len(text)))


def _clipped(el: etree._Element) -> etree._Element:
    """A copy of ``el`` (without its own tail) whose every text, tail and attribute value is
    at most ``MAX_TEXT``."""
    el = copy.deepcopy(el)
    el.tail = None
    for node in el.iter():
        if node.text:
            node.text = clip(node.text)
        if node.tail:
            node.tail = clip(node.tail)
        for name, value in node.attrib.items():
            node.set(name, clip(value))
    return el
