"""Descriptor documents as XML: one safe parse for every language that reads XML (and for
the portal's text descriptors), whose refusals are ``DescriptorError``s."""

from __future__ import annotations

from lxml import etree

from cddlm import xmlsafe
from cddlm.config import Limits
from cddlm.errors import DescriptorError


def parse_xml(data: bytes | str, limits: Limits, file: str | None = None, *,
              quote: bool | None = None) -> etree._Element:
    """A descriptor's XML through the safe parser; refusals become ``DescriptorError``s of the
    parser's kind (``not-well-formed``, ``too-large``, ``too-deep`` ...). A document read from
    a location (a reference or an import: ``quote`` false, by default when there is a ``file``)
    may be any file: the error then says only what kind of problem is where, never the
    parser's words about the content."""
    quote = file is None if quote is None else quote
    try:
        return xmlsafe.parse(data, max_bytes=limits.max_body_bytes, max_depth=limits.max_xml_depth,
                             max_nodes=limits.max_xml_nodes, max_attributes=limits.max_xml_attributes,
                             large_bytes=limits.large_body_bytes, large_slots=limits.max_large_parses)
    except xmlsafe.UnsafeXml as e:
        message = e.message if quote or e.kind != "not-well-formed" else \
            "the document is not well-formed XML"
        raise DescriptorError(message, kind=e.kind, file=file, line=e.line) from None
