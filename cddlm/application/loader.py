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

Only regular files are read, opened without blocking and checked before reading: a FIFO, a
device or ``/proc/self/fd/0`` is refused at once instead of holding a worker forever. Errors
name the location and what went wrong, never the bytes read.
"""

from __future__ import annotations

import errno
import os
import stat
import urllib.parse
import urllib.request
from importlib import resources

from cddlm import netsafe, ns
from cddlm.config import Limits, Settings
from cddlm.errors import ResolutionError

LIBRARY_PREFIX = ns.LIBRARY_PREFIX           # urn:cddlm:library:components.cdl


def library_file(name: str) -> bytes | None:
    """A file of the project's component library (``cddlm/lang/library/NAME``)."""
    try:
        return resources.files("cddlm.lang").joinpath("library", name).read_bytes()
    except (FileNotFoundError, IsADirectoryError, ModuleNotFoundError, NotADirectoryError):
        return None


def _refused(location: str, why: str) -> ResolutionError:
    """``import: LOCATION: why`` (the location is the error's path)."""
    return ResolutionError(why, kind="import", path=location)


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
            data = library_file(location[len(LIBRARY_PREFIX):])
            if data is None:
                raise ResolutionError("no such library document %s" % location, kind="import",
                                      path=location)
            return data
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
            if not any(location.startswith(p) for p in self.allowed_urls):
                raise _refused(location, "not under a URL prefix this portal allows (%s)"
                               % (", ".join(self.allowed_urls) or "none: see --allow-descriptor-url"))
            return self._fetch(location)
        raise _refused(location, "only file:, classpath:/, %s* and allowed http(s) locations "
                                 "are read" % LIBRARY_PREFIX)

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
        real = os.path.realpath(path)
        if not any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in self.allowed_dirs):
            raise _refused(location, "not below a folder this portal allows (%s)"
                           % (", ".join(self.allowed_dirs) or "none: see --allow-descriptor-dir"))
        try:   # without blocking (a FIFO would wait for a writer) and not through a late link
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW
                         | os.O_CLOEXEC)
        except OSError as e:
            why = "a symbolic link" if e.errno == errno.ELOOP else (e.strerror or str(e))
            raise _refused(location, "cannot read: %s" % why) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _refused(location, "not a regular file")
            if info.st_size > self.max_bytes:
                raise _refused(location, "larger than %d bytes" % self.max_bytes)
            os.set_blocking(fd, True)
            chunks, size = [], 0
            while True:
                chunk = os.read(fd, min(1 << 20, self.max_bytes + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_bytes:
                    raise _refused(location, "larger than %d bytes" % self.max_bytes)
            return b"".join(chunks)
        except OSError as e:
            raise _refused(location, "cannot read: %s" % (e.strerror or e)) from None
        finally:
            os.close(fd)

    def _fetch(self, location: str) -> bytes:
        try:
            return netsafe.get(location, self.networks, public=True, max_bytes=self.max_bytes,
                               timeout=self.timeout, resolver=self.resolver)
        except netsafe.Refused as e:
            raise _refused(location, str(e)) from None
        except netsafe.Unreachable as e:
            raise _refused(location, "cannot fetch: %s" % e) from None
