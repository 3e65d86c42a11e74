"""Helpers for the descriptor-language tests: resolving in memory, and a time guard."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from lxml import etree

from cddlm import ns
from cddlm.config import Limits
from cddlm.errors import ResolutionError
from cddlm.lang import cdl, hot, library
from cddlm.lang.model import ResolveRequest

CDL_HEAD = ('<cdl:cdl xmlns:cdl="%s" xmlns:cmp="%s" xmlns:x="urn:x">' % (ns.CDL, ns.CMP))
LIBRARY_IMPORT = '<cdl:import location="urn:cddlm:library:components.cdl"/>'
REPO = Path(__file__).resolve().parents[2]


def corpus_dir() -> Path | None:
    for candidate in (REPO.parent / "shared", Path("/work/shared")):
        folder = candidate / "conformance" / "smartfrog-cdl"
        if folder.is_dir():
            return folder
    return None


def memory_loader(files: dict[str, str]):
    """A loader serving ``files`` (location -> text) and the project's library."""
    from cddlm.application.loader import Loader
    library = Loader()                  # reads the library's own documents, nothing else

    def load(location: str) -> bytes:
        if location in files:
            return files[location].encode()
        if location.startswith(ns.LIBRARY_PREFIX):
            return library(location)
        raise ResolutionError("no such document %s" % location, kind="import", path=location)
    return load


def cdl_doc(configuration: str = "", system: str = "", imports: str = "") -> str:
    return "%s%s<cdl:configuration>%s</cdl:configuration><cdl:system>%s</cdl:system></cdl:cdl>" % (
        CDL_HEAD, imports, configuration, system)


def resolve_cdl(text: str, *, properties=None, files=None, base_url="file:///t/main.cdl",
                limits: Limits | None = None, check: bool = False):
    request = ResolveRequest(source=text, base_url=base_url, properties=properties or {},
                             loader=memory_loader(files or {}), limits=limits or Limits())
    result = cdl.LANGUAGE.resolve(request)
    if check:
        library.check(result.deployment)
    return result


def system_of(result) -> etree._Element:
    return etree.fromstring(result.display.encode())


def resolve_hot(text: str, *, properties=None, limits: Limits | None = None, check: bool = True):
    request = ResolveRequest(source=text, properties=properties or {}, limits=limits or Limits())
    result = hot.LANGUAGE.resolve(request)
    if check:
        library.check(result.deployment)
    return result


@contextmanager
def quickly(seconds: float = 2.0):
    """Fail when the block uses more than ``seconds`` of CPU (bad input must fail fast). CPU
    time, not wall time: the bound is on the work done, which other load does not change."""
    start = time.process_time()
    yield
    elapsed = time.process_time() - start
    assert elapsed < seconds, "took %.2f s of CPU" % elapsed
