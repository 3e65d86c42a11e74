"""WS-Addressing: endpoint references and message addressing headers.

The portal answers in WS-Addressing 1.0 (2005/08) and tolerates the 2004/08 and 2003/03
versions on input: a request's headers are read in whichever version it used, and the reply
headers use that same version so the client can correlate them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterable

from lxml import etree

from cddlm import ns

VERSIONS = (ns.WSA, ns.WSA_2004, ns.WSA_2003)
HEADERS = ("To", "Action", "MessageID", "RelatesTo", "ReplyTo", "FaultTo", "From")
# at most one of each in a message (WS-Addressing 1.0 Core 3.2); RelatesTo may repeat
SINGLE = frozenset(("To", "Action", "MessageID", "ReplyTo", "FaultTo", "From"))
TRUE = ("1", "true")
# "reply on the back channel" in each version (1.0's wsa:None asks for no reply at all)
ANONYMOUS = frozenset((ns.WSA + "/anonymous", ns.WSA_2004 + "/role/anonymous",
                       ns.WSA_2003 + "/role/anonymous"))
NONE = ns.WSA + "/none"   # "send no reply": nothing is owed, the connection's answer is ignored


def q(local: str, namespace: str = ns.WSA) -> str:
    return "{%s}%s" % (namespace, local)


def epr(tag: str, address: str, resource_id: str | None = None,
        resource_tag: str = "{%s}ResourceId" % ns.API,
        parameters: Iterable[etree._Element] = ()) -> etree._Element:
    """``<tag><wsa:Address/><wsa:ReferenceParameters><api:ResourceId/>..</tag>``: the
    ReferenceParameters hold the ResourceId (if given), then a copy of each of ``parameters``."""
    el = etree.Element(tag, nsmap={"wsa": ns.WSA, "api": ns.API})
    etree.SubElement(el, q("Address")).text = address
    parameters = list(parameters)
    if resource_id is not None or parameters:
        params = etree.SubElement(el, q("ReferenceParameters"))
        if resource_id is not None:
            etree.SubElement(params, resource_tag).text = resource_id
        params.extend(_copy(p) for p in parameters)
    return el


def _copy(el: etree._Element) -> etree._Element:
    """A standalone copy of ``el`` (declaring every namespace it uses)."""
    return etree.fromstring(etree.tostring(el))


@dataclass
class Reference:
    """An EPR as read from XML (any supported WS-Addressing version)."""
    address: str
    parameters: list[etree._Element] = field(default_factory=list)

    def parameter(self, tag: str) -> str | None:
        for p in self.parameters:
            if p.tag == tag:
                return (p.text or "").strip()
        return None


def parse_epr(el: etree._Element) -> Reference | None:
    """Read an EPR element; None when it has no Address."""
    for version in VERSIONS:
        address = el.find(q("Address", version))
        if address is not None:
            params: list[etree._Element] = []
            for holder in ("ReferenceParameters", "ReferenceProperties"):
                box = el.find(q(holder, version))
                if box is not None:
                    params.extend(c for c in box if isinstance(c.tag, str))
            return Reference((address.text or "").strip(), params)
    return None


@dataclass
class Addressing:
    """The addressing headers of one request."""
    version: str | None = None        # namespace used by the request, None if no WSA headers
    to: str | None = None
    action: str | None = None
    message_id: str | None = None
    reply_to: str | None = None
    fault_to: str | None = None
    reference_parameters: list[etree._Element] = field(default_factory=list)
    repeated: str | None = None       # Clark name of the first header given twice, if any

    @classmethod
    def read(cls, headers: list[etree._Element]) -> "Addressing":
        a = cls()
        seen: set[str] = set()
        for h in headers:
            if not isinstance(h.tag, str):
                continue
            qn = etree.QName(h)
            if qn.namespace in VERSIONS and qn.localname in HEADERS:
                if qn.localname in SINGLE and qn.localname in seen and a.repeated is None:
                    a.repeated = h.tag
                seen.add(qn.localname)
                a.version = a.version or qn.namespace
                if qn.localname == "To":
                    a.to = (h.text or "").strip()
                elif qn.localname == "Action":
                    a.action = (h.text or "").strip()
                elif qn.localname == "MessageID":
                    a.message_id = (h.text or "").strip()
                elif qn.localname in ("ReplyTo", "FaultTo"):
                    ref = parse_epr(h)
                    setattr(a, "reply_to" if qn.localname == "ReplyTo" else "fault_to",
                            ref.address if ref else "")
            else:
                # 1.0 marks reference parameters; 2003/03 and 2004/08 send them unmarked
                a.reference_parameters.append(h)
        return a

    def elsewhere(self) -> tuple[str, str] | None:
        """(header, address) of a ReplyTo or FaultTo that asks for the reply somewhere other
        than the request's own HTTP connection, or None. The 1.0 ``none`` address asks for no
        reply at all: the answer on the connection is then one nobody reads, which is allowed."""
        for local in ("ReplyTo", "FaultTo"):
            address = getattr(self, "reply_to" if local == "ReplyTo" else "fault_to")
            if address is not None and address not in ANONYMOUS and address != NONE:
                return q(local, self.version or ns.WSA), address
        return None

    def parameter(self, tag: str) -> str | None:
        for h in self.reference_parameters:
            if h.tag == tag:
                return (h.text or "").strip()
        return None

    def _replies(self, action: str) -> tuple[tuple[str, str], ...]:
        """(header, text) of the response's wsa:Action, a fresh wsa:MessageID and the
        wsa:RelatesTo of the request's own."""
        replies = (("Action", action), ("MessageID", new_message_id()))
        return replies + (("RelatesTo", self.message_id),) if self.message_id is not None \
            else replies

    def reply_headers(self, action: str) -> list[etree._Element]:
        """wsa:Action, a fresh wsa:MessageID and wsa:RelatesTo for the response."""
        version = self.version or ns.WSA
        out = []
        for local, text in self._replies(action):
            el = etree.Element(q(local, version), nsmap={"wsa": version})
            el.text = text
            out.append(el)
        return out

    def reply_header_text(self, action: str) -> str | None:
        """``reply_headers`` as lxml writes them in an envelope declaring ``wsa`` as WS-Addressing
        1.0 (the portal's own envelopes): text, without building elements (the hot reads); None
        for a request of another version (its headers declare their namespace)."""
        if self.version not in (None, ns.WSA):
            return None
        return "".join("<wsa:%s>%s</wsa:%s>" % (local, xml_text(text), local)
                       for local, text in self._replies(action))


def headers_for(reference: Reference, action: str, message_id: str | None = None) -> list[etree._Element]:
    """Outgoing headers to send a message to an EPR: To, Action, MessageID and each reference
    parameter as its own header block marked ``wsa:IsReferenceParameter``."""
    out = []
    for local, text in (("To", reference.address), ("Action", action),
                        ("MessageID", message_id or new_message_id())):
        el = etree.Element(q(local), nsmap={"wsa": ns.WSA})
        el.text = text
        out.append(el)
    for p in reference.parameters:
        copy = _copy(p)
        copy.set(q("IsReferenceParameter"), "true")
        out.append(copy)
    return out


_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\r": "&#13;"})


def xml_text(text: str) -> str:
    """``text`` as lxml writes an element's text in UTF-8 (the characters it escapes)."""
    return text.translate(_ESCAPES)


def new_message_id() -> str:
    """A fresh ``urn:uuid:`` (a random, version 4 UUID) for wsa:MessageID; as ``uuid.uuid4()``
    makes it, at a third of the cost (one per response)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return "urn:uuid:%s-%s-%s-%s-%s" % (h[:8], h[8:12], h[12:16], h[16:20], h[20:])
