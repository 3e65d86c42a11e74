"""Descriptor languages, named by URI. Each language turns a descriptor into a ``Deployment``.

A language is pure: everything it needs arrives in a ``ResolveRequest`` (``lang/model.py``),
including a ``loader`` for imported documents (the caller decides which locations may be
read). Register a language by adding it to ``languages`` below. The languages import
``model`` and ``documents``, never this module, so the imports run one way.
"""

from __future__ import annotations

from typing import Protocol

from cddlm.errors import UnsupportedLanguage
from cddlm.lang import cdl, hot, native
from cddlm.lang.documents import parse_xml
from cddlm.lang.model import Loader, Resolution, ResolveRequest, no_loader

__all__ = ["Language", "Loader", "Resolution", "ResolveRequest", "get", "languages", "no_loader",
           "parse_xml"]

class Language(Protocol):
    uri: str
    name: str
    version: str
    body: str      # "xml": the descriptor is one XML element; "text": a string

    def resolve(self, request: ResolveRequest) -> Resolution: ...


def languages() -> list[Language]:
    """Every supported language, in the order ``api:staticInfo`` lists them."""
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
