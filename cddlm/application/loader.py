"""Reading descriptors and their imports from outside: the I/O half of descriptor languages.

Languages are pure and ask a ``Loader`` for each import. This loader reads ``file:`` URLs,
maps ``classpath:/x`` onto the configured import path, serves the project's own component
library under its well-known location, and fetches network locations only under prefixes the
operator allowed.
"""

from __future__ import annotations

import os
import urllib.parse
import urllib.request
from importlib import resources

from cddlm import ns
from cddlm.errors import ResolutionError

LIBRARY_PREFIX = ns.LIBRARY_PREFIX           # urn:cddlm:library:components.cdl
MAX_IMPORT_BYTES = 16 * 1024 * 1024


def library_file(name: str) -> bytes | None:
    """A file of the project's component library (``cddlm/lang/library/NAME``)."""
    try:
        return resources.files("cddlm.lang").joinpath("library", name).read_bytes()
    except (FileNotFoundError, IsADirectoryError, ModuleNotFoundError, NotADirectoryError):
        return None


class Loader:
    def __init__(self, import_path: tuple[str, ...] = (), allowed_prefixes: tuple[str, ...] = (),
                 max_bytes: int = MAX_IMPORT_BYTES):
        self.import_path = tuple(import_path)
        self.allowed_prefixes = tuple(allowed_prefixes)
        self.max_bytes = max_bytes

    def __call__(self, location: str) -> bytes:
        if location.startswith(LIBRARY_PREFIX):
            data = library_file(location[len(LIBRARY_PREFIX):])
            if data is None:
                raise ResolutionError("no such library document %s" % location, kind="import",
                                      path=location)
            return data
        scheme = urllib.parse.urlsplit(location).scheme.lower()
        if scheme == "classpath":
            return self._classpath(location)
        if scheme == "file":
            return self._file(urllib.request.url2pathname(urllib.parse.urlsplit(location).path),
                              location)
        if scheme in ("http", "https") and any(location.startswith(p) for p in self.allowed_prefixes):
            return self._fetch(location)
        if scheme in ("", ) and os.path.isabs(location):
            return self._file(location, location)
        raise ResolutionError("import location %s is not allowed (file:, classpath:/ and %s only)"
                              % (location, LIBRARY_PREFIX + "*") , kind="import", path=location)

    def _classpath(self, location: str) -> bytes:
        rel = location.split(":", 1)[1].lstrip("/")
        for folder in self.import_path:
            candidate = os.path.join(folder, rel)
            if os.path.isfile(candidate):
                return self._file(candidate, location)
        raise ResolutionError("%s is not on the import path (%s)"
                              % (location, os.pathsep.join(self.import_path) or "empty"),
                              kind="import", path=location)

    def _file(self, path: str, location: str) -> bytes:
        try:
            with open(path, "rb") as f:
                data = f.read(self.max_bytes + 1)
        except OSError as e:
            raise ResolutionError("cannot read %s: %s" % (location, e.strerror or e), kind="import",
                                  path=location) from None
        if len(data) > self.max_bytes:
            raise ResolutionError("%s is larger than %d bytes" % (location, self.max_bytes),
                                  kind="import", path=location)
        return data

    def _fetch(self, location: str) -> bytes:
        try:
            with urllib.request.urlopen(location, timeout=10) as r:
                data = r.read(self.max_bytes + 1)
        except OSError as e:
            raise ResolutionError("cannot fetch %s: %s" % (location, e), kind="import",
                                  path=location) from None
        if len(data) > self.max_bytes:
            raise ResolutionError("%s is larger than %d bytes" % (location, self.max_bytes),
                                  kind="import", path=location)
        return data
