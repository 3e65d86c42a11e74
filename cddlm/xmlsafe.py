"""The one parser for untrusted XML: no DTD, no entities, no network, bounded size and depth.

Every byte the portal did not write itself (SOAP requests, descriptors, imported CDL files,
notification consumers' replies) is parsed here. A DOCTYPE is refused outright: SOAP forbids
it, and refusing it closes XXE and entity-expansion attacks before libxml2 sees an entity.
"""

from __future__ import annotations

import re

from lxml import etree

from cddlm.errors import BadArgument

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


def _parser() -> etree.XMLParser:
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


def parse(data: bytes | str, *, max_bytes: int | None = None, max_depth: int = 256,
          base_url: str | None = None) -> etree._Element:
    """Parse one document and return its root element, or raise ``UnsafeXml``."""
    size = len(data)
    if max_bytes is not None and size > max_bytes:
        raise UnsafeXml("XML document of %d bytes exceeds the limit of %d bytes" % (size, max_bytes),
                        kind="too-large")
    pattern = _DOCTYPE if isinstance(data, bytes) else _DOCTYPE_TEXT
    if pattern.search(data):
        raise UnsafeXml("DTDs and entity declarations are not allowed")
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
    check_depth(root, max_depth)
    return root


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
