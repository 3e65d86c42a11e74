"""The one parser for untrusted XML: no DTD, no entities, no network, bounded size, depth,
node count and attributes per element, and a bound on how many large documents are parsed at
once.

Every byte the portal did not write itself (SOAP requests, descriptors, imported CDL files,
notification consumers' replies) is parsed here. A DOCTYPE is refused outright: SOAP forbids
it, and refusing it closes XXE and entity-expansion attacks before libxml2 sees an entity.

A tree costs far more than its text: 10 MiB of ``<b/>`` is 330 MiB of lxml elements, and one
element with 200,000 attributes 70 MiB. So nodes (elements and attributes) are counted on the
bytes, before any tree is built: a count of ``<`` and ``=`` bounds them from above at C speed,
and only a document over that bound is scanned tag by tag for the exact count. Documents of
``large_bytes`` or more take one of ``large_slots`` places to be parsed (process-wide, per
configuration); a request that cannot have one within ``LARGE_WAIT`` seconds is refused as
busy rather than holding a server thread.
"""

from __future__ import annotations

import re
import threading

from lxml import etree

from cddlm.errors import BadArgument, Busy

_DOCTYPE = re.compile(rb"<!DOCTYPE|<!ENTITY", re.IGNORECASE)
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_DOCTYPE_TEXT = re.compile(r"<!DOCTYPE|<!ENTITY", re.IGNORECASE)


class UnsafeXml(BadArgument):
    """XML that is not well-formed or uses a refused feature; ``line`` where known. ``kind``
    says which: ``too-large``, ``dtd``, ``not-well-formed`` or ``too-deep``."""

    def __init__(self, message: str, line: int | None = None, kind: str = "not-well-formed"):
        super().__init__(message)
        self.line = line
        self.kind = kind


_local = threading.local()


def _parser() -> etree.XMLParser:
    """This thread's parser (a parser is not shared between threads; making one per document
    cost more than parsing a small one)."""
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = _new_parser()
    return parser


def _new_parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=False,
        remove_pis=True,
        strip_cdata=False,
    )


LARGE_WAIT = 2.0      # seconds a large document waits for its turn to be parsed
_gates: dict[int, threading.BoundedSemaphore] = {}
_gates_lock = threading.Lock()


def _gate(slots: int) -> threading.BoundedSemaphore:
    with _gates_lock:
        gate = _gates.get(slots)
        if gate is None:
            gate = _gates[slots] = threading.BoundedSemaphore(max(1, slots))
        return gate


def parse(data: bytes | str, *, max_bytes: int | None = None, max_depth: int = 256,
          max_nodes: int | None = None, max_attributes: int | None = None,
          large_bytes: int | None = None, large_slots: int = 2,
          base_url: str | None = None) -> etree._Element:
    """Parse one document and return its root element, or raise ``UnsafeXml`` (``Busy`` when
    a large document finds no free slot in time)."""
    size = len(data)
    if max_bytes is not None and size > max_bytes:
        raise UnsafeXml("XML document of %d bytes exceeds the limit of %d bytes" % (size, max_bytes),
                        kind="too-large")
    pattern = _DOCTYPE if isinstance(data, bytes) else _DOCTYPE_TEXT
    if pattern.search(data):
        raise UnsafeXml("DTDs and entity declarations are not allowed")
    if max_nodes is not None or max_attributes is not None:
        count_nodes(data, max_nodes, max_attributes)
    if large_bytes is None or size < large_bytes:
        return _parse(data, max_depth, base_url)
    gate = _gate(large_slots)
    if not gate.acquire(timeout=LARGE_WAIT):
        raise Busy("the portal is parsing other large documents; send this one again later")
    try:
        return _parse(data, max_depth, base_url)
    finally:
        gate.release()


# the exact count, tag by tag: single-character repetitions only (they keep no state per
# character in Python's re), one match per attribute, stopping at the first bound passed
_OTHER = re.compile(rb"<(?:!--.*?-->|!\[CDATA\[.*?\]\]>|\?.*?\?>|/[^>]*>)", re.S)
_START = re.compile(rb"<[^\s/>!?][^\s/>]*")
_ATTRIBUTE = re.compile(rb"""\s*[^\s=/>"']+\s*=\s*(?:"[^"]*"|'[^']*')""")
_TAG_END = re.compile(rb"\s*/?>")


def count_nodes(data: bytes | str, max_nodes: int | None, max_attributes: int | None) -> None:
    """Raise ``UnsafeXml`` (``too-large``) when the document has more than ``max_nodes``
    elements and attributes, or an element more than ``max_attributes`` attributes."""
    nodes = max_nodes if max_nodes is not None else float("inf")
    per_element = max_attributes if max_attributes is not None else float("inf")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    lt, eq = raw.count(b"<"), raw.count(b"=")
    if lt + eq <= nodes and eq <= per_element:
        return     # the upper bounds hold: every element has a '<', every attribute an '='

    def refuse(message: str, at: int, kind: str = "too-large") -> UnsafeXml:
        return UnsafeXml(message, raw.count(b"\n", 0, at) + 1, kind=kind)

    total, pos = 0, raw.find(b"<")
    while pos >= 0:
        other = _OTHER.match(raw, pos)
        if other is not None:
            pos = raw.find(b"<", other.end())
            continue
        name = _START.match(raw, pos)
        if name is None:
            raise refuse("XML is not well-formed: unterminated markup", pos, "not-well-formed")
        at, attributes = name.end(), 0
        while True:
            attribute = _ATTRIBUTE.match(raw, at)
            if attribute is None:
                break
            attributes += 1
            if attributes > per_element:
                raise refuse("an element has more than %d attributes" % per_element, pos)
            at = attribute.end()
        end = _TAG_END.match(raw, at)
        if end is None:
            raise refuse("XML is not well-formed: a start tag is not closed", pos, "not-well-formed")
        total += 1 + attributes
        if total > nodes:
            raise refuse("the document has more than %d elements and attributes" % nodes, pos)
        pos = raw.find(b"<", end.end())


def _parse(data: bytes | str, max_depth: int, base_url: str | None) -> etree._Element:
    if isinstance(data, str):
        # lxml refuses str input with an encoding declaration; the text is already decoded
        data = data.encode("utf-8") if not data.lstrip().startswith("<?xml") else \
            re.sub(r"^\s*<\?xml[^>]*\?>", "", data, count=1).encode("utf-8")
    try:
        root = etree.fromstring(data, _parser(), base_url=base_url)
    except etree.XMLSyntaxError as e:
        line = e.lineno if getattr(e, "lineno", None) else None
        deep = "Excessive depth" in str(e.msg or e)   # libxml2's own nesting limit
        raise UnsafeXml("XML is not well-formed: %s" % (e.msg or e), line,
                        kind="too-deep" if deep else "not-well-formed") from None
    if root.getroottree().docinfo.doctype:
        raise UnsafeXml("DTDs are not allowed")
    if data.count(b"<") > max_depth:   # fewer tags than that cannot nest deeper
        check_depth(root, max_depth)
    return root


def parse_head(data: bytes, stop: str, max_bytes: int) -> etree._Element:
    """The root of a document parsed only as far as the start of its first ``stop`` element
    (a SOAP envelope's ``Body``: its header is then whole), which must come within the first
    ``max_bytes``; ``UnsafeXml`` otherwise. What is read is bounded by ``max_bytes`` (libxml2's
    own nesting limit applies), so no count of nodes is made first."""
    head = data[:max_bytes]
    if _DOCTYPE.search(head):
        raise UnsafeXml("DTDs and entity declarations are not allowed")
    parser = etree.XMLPullParser(events=("start",), resolve_entities=False, no_network=True,
                                 load_dtd=False, huge_tree=False, remove_pis=True)
    try:
        for at in range(0, len(head), 16384):
            parser.feed(head[at:at + 16384])
            for _, el in parser.read_events():
                if el.tag == stop:
                    return el.getroottree().getroot()
    except etree.XMLSyntaxError as e:
        raise UnsafeXml("XML is not well-formed: %s" % (e.msg or e),
                        getattr(e, "lineno", None) or None) from None
    raise UnsafeXml("no %s element within the first %d bytes" % (etree.QName(stop).localname, max_bytes),
                    kind="too-large")


def check_depth(root: etree._Element, max_depth: int) -> None:
    """Refuse element trees nested deeper than ``max_depth`` (cheap: one pass, no recursion)."""
    stack = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        if depth > max_depth:
            raise UnsafeXml("XML nesting deeper than %d elements" % max_depth, el.sourceline,
                            kind="too-deep")
        stack.extend((child, depth + 1) for child in el)


def clean(value: object) -> str:
    """Text safe for XML the portal writes: characters XML 1.0 cannot carry (control bytes in
    a process's stderr, say) become U+FFFD."""
    return _NOT_XML.sub("\ufffd", str(value))
