"""Descriptor languages, named by URI. Each language turns a descriptor into a ``Deployment``.

A language is pure: everything it needs arrives in a ``ResolveRequest``, including a ``loader``
for imported documents (the caller decides which locations may be read). Register a language
by adding it to ``LANGUAGES`` below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

from lxml import etree

from cddlm import xmlsafe
from cddlm.config import Limits
from cddlm.errors import DescriptorError, UnsupportedLanguage
from cddlm.lang.model import Deployment

Loader = Callable[[str], bytes]
"""Fetch an absolute location (``file:`` URL, or an allowed prefix) and return its bytes;
raise ``ResolutionError`` when it cannot be read or is not allowed."""


def no_loader(location: str) -> bytes:
    from cddlm.errors import ResolutionError
    raise ResolutionError("imports are not available here: %s" % location, kind="import")


@dataclass
class ResolveRequest:
    source: etree._Element | str | bytes   # an XML element (SOAP body) or the document's text/bytes
    base_url: str | None = None            # the document's own location, for relative imports
    properties: Mapping[str, str] = field(default_factory=dict)  # deploy-time properties
    loader: Loader = no_loader
    limits: Limits = field(default_factory=Limits)


class Resolution:
    """A resolved descriptor: its ``deployment``, the eager properties it read, and
    ``display``, what ``cddlm lang resolve`` prints (for CDL the resolved ``cdl:system``). A
    language may pass ``display`` as a function: it is then rendered on first read only, so
    deploying never pays for printing."""

    def __init__(self, deployment: Deployment, display: str | Callable[[], str],
                 used_properties: tuple[str, ...] = ()):
        self.deployment = deployment
        self._display = display
        self.used_properties = used_properties

    @property
    def display(self) -> str:
        if callable(self._display):
            self._display = self._display()
        return self._display


class Language(Protocol):
    uri: str
    name: str
    version: str
    body: str      # "xml": the descriptor is one XML element; "text": a string

    def resolve(self, request: ResolveRequest) -> Resolution: ...


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


def languages() -> list[Language]:
    """Every supported language, in the order ``api:staticInfo`` lists them."""
    from cddlm.lang import cdl, hot, native   # here: they import this module
    return [native.LANGUAGE, cdl.LANGUAGE, hot.LANGUAGE]


def get(uri: str, version: str | None = None) -> Language:
    for lang in languages():
        if lang.uri == uri.strip():
            if version and version != lang.version:
                raise UnsupportedLanguage(uri, "language %s is supported in version %s, not %s"
                                          % (uri, lang.version, version))
            return lang
    raise UnsupportedLanguage(uri, "unsupported descriptor language %r (supported: %s)"
                              % (uri, ", ".join(l.uri for l in languages())))
