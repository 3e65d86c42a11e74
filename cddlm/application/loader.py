"""Reading descriptors and their imports from outside: the I/O half of descriptor languages.

Languages are pure and ask a ``Loader`` for each import; ``initialize`` asks it for a
descriptor given by ``reference``. Someone who may initialize must not be able to read the
portal's files or reach its network through it, so the loader reads only what the operator
allowed:

- the project's component library under ``urn:cddlm:library:NAME``;
- ``classpath:/x``: ``x`` below a folder of the import path (``--import-path``);
- ``file:`` URLs (and absolute paths) below a folder the operator allows
  (``--allow-descriptor-dir``, and the import path), after resolving symbolic links and
  ``..``: nothing by default, since ``cddlm deploy FILE`` sends the file's content itself;
- ``http:`` and ``https:`` URLs under a prefix the operator allows (``--allow-descriptor-url``),
  fetched through ``cddlm.netsafe`` (no redirects, no proxy, a deadline and a size cap), from a
  public address, a network in ``--descriptor-network``, or the address an allowed prefix
  names literally.

Every file is read by one reader (``read_file``), whichever way it was named: walked from the
library's, the import path's or the allowed folder one name at a time without following a link,
opened without blocking and checked before reading, so that a FIFO, a device or
``/proc/self/fd/0`` is refused at once instead of holding a worker forever, and no more than the
size cap is ever read. ``urn:cddlm:library:`` takes the plain names of the library's documents
only (``LIBRARY``), never a path. Errors name the location and what went wrong, never the bytes
read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import urllib.parse
import urllib.request

from cddlm import lang, netsafe, ns
from cddlm.application.enactment import confine
from cddlm.config import Limits, Settings
from cddlm.errors import ResolutionError

LIBRARY_PREFIX = ns.LIBRARY_PREFIX           # urn:cddlm:library:components.cdl
LIBRARY_DIR = os.path.join(os.path.dirname(os.path.abspath(lang.__file__)), "library")
PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW | os.O_CLOEXEC
PIECE = 1 << 20                              # bytes read at a time


def _library() -> frozenset[str]:
    """The library's documents: the plain names of the regular files in ``cddlm/lang/library``
    (fixed when the portal starts; a name is never a path)."""
    try:
        return frozenset(e.name for e in os.scandir(LIBRARY_DIR)
                         if PLAIN_NAME.match(e.name) and e.is_file(follow_symlinks=False))
    except OSError:
        return frozenset()


LIBRARY = _library()


def _refused(location: str, why: str) -> ResolutionError:
    """``import: LOCATION: why`` (the location is the error's path)."""
    return ResolutionError(why, kind="import", path=location)


def read_file(root: str, names: list[str], location: str, max_bytes: int) -> bytes:
    """``root/names...``, the one way a reference is read from disk: walked from ``root`` one
    name at a time without following a link (a folder swapped for a link after a check is
    refused, not followed), opened without blocking (a FIFO would wait for a writer), then
    checked: a regular file of at most ``max_bytes``, read in pieces and never further than
    that, however the file grows meanwhile."""
    if not names:
        raise _refused(location, "not a regular file")
    try:
        folder = confine.open_dir(root, names[:-1], create=False)
    except confine.Escape:
        raise _refused(location, "cannot read: a folder on the way is a symbolic link") from None
    except OSError as e:
        raise _refused(location, "cannot read: %s" % (e.strerror or e)) from None
    try:
        fd = os.open(names[-1], READ_FLAGS, dir_fd=folder)
    except OSError as e:
        why = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
        raise _refused(location, "cannot read: %s" % why) from None
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refused(location, "not a regular file")
        if info.st_size > max_bytes:
            raise _refused(location, "larger than %d bytes" % max_bytes)
        os.set_blocking(fd, True)
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(PIECE, max_bytes + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise _refused(location, "larger than %d bytes" % max_bytes)
    except OSError as e:
        raise _refused(location, "cannot read: %s" % (e.strerror or e)) from None
    finally:
        os.close(fd)


class Loader:
    def __init__(self, import_path: tuple[str, ...] = (), allowed_dirs: tuple[str, ...] = (),
                 allowed_urls: tuple[str, ...] = (), networks: tuple[str, ...] = (), *,
                 max_bytes: int = Limits.max_body_bytes, timeout: float = 10.0,
                 resolver: netsafe.Resolver = netsafe.resolve):
        self.import_path = tuple(import_path)
        self.allowed_dirs = tuple(os.path.realpath(d) for d in tuple(allowed_dirs) + self.import_path)
        self.allowed_urls = tuple(allowed_urls)
        # an allowed prefix that names an address literally allows that address
        self.networks = tuple(networks) + netsafe.literal_addresses(self.allowed_urls)
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.resolver = resolver

    @classmethod
    def for_portal(cls, settings: Settings) -> "Loader":
        """The loader of a portal, as its operator configured it."""
        return cls(settings.import_path, settings.allowed_descriptor_dirs,
                   settings.allowed_descriptor_urls, settings.descriptor_networks,
                   max_bytes=settings.limits.max_body_bytes,
                   timeout=settings.descriptor_fetch_timeout)

    def __call__(self, location: str) -> bytes:
        if location.startswith(LIBRARY_PREFIX):
            name = location[len(LIBRARY_PREFIX):]
            if name not in LIBRARY:
                raise ResolutionError("no such library document %s (the library holds %s)"
                                      % (location, ", ".join(sorted(LIBRARY)) or "nothing"),
                                      kind="import", path=location)
            return read_file(LIBRARY_DIR, [name], location, self.max_bytes)
        try:
            scheme = urllib.parse.urlsplit(location).scheme.lower()
        except ValueError:
            raise _refused(location, "not a URL") from None
        if scheme == "classpath":
            return self._classpath(location)
        if scheme == "file":
            return self._file(urllib.request.url2pathname(urllib.parse.urlsplit(location).path),
                              location)
        if scheme == "" and os.path.isabs(location):
            return self._file(location, location)
        if scheme in ("http", "https"):
            if not any(netsafe.url_under(location, p) for p in self.allowed_urls):
                raise _refused(location, "not under a URL prefix this portal allows (%s)"
                               % (", ".join(self.allowed_urls) or "none: see --allow-descriptor-url"))
            return self._fetch(location)
        raise _refused(location, "only file:, classpath:/, %s* and allowed http(s) locations "
                                 "are read" % LIBRARY_PREFIX)

    def _classpath(self, location: str) -> bytes:
        names = [n for n in location.split(":", 1)[1].split("/") if n not in ("", ".")]
        if not names or ".." in names:
            raise _refused(location, "must name a file below a folder of the import path")
        for folder in self.import_path:
            candidate = os.path.join(folder, *names)
            if os.path.lexists(candidate):
                return self._file(candidate, location)
        raise ResolutionError("%s is not on the import path (%s)"
                              % (location, os.pathsep.join(self.import_path) or "empty"),
                              kind="import", path=location)

    def _file(self, path: str, location: str) -> bytes:
        real = os.path.realpath(path)
        for folder in self.allowed_dirs:
            if real == folder or real.startswith(folder.rstrip(os.sep) + os.sep):
                names = [n for n in real[len(folder):].split(os.sep) if n]
                return read_file(folder, names, location, self.max_bytes)
        raise _refused(location, "not below a folder this portal allows (%s)"
                       % (", ".join(self.allowed_dirs) or "none: see --allow-descriptor-dir"))

    def _fetch(self, location: str) -> bytes:
        try:
            return netsafe.get(location, self.networks, public=True, max_bytes=self.max_bytes,
                               timeout=self.timeout, resolver=self.resolver)
        except netsafe.Refused as e:
            raise _refused(location, str(e)) from None
        except netsafe.Unreachable as e:
            raise _refused(location, "cannot fetch: %s" % e) from None
