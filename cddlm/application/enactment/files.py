"""The ``file`` component's file system work, never through a symbolic link.

Components run in the application's directory and may change it: a process could replace a
directory on a ``file`` component's path with a link to somewhere else, and the portal would
then write, chmod or (at terminate) delete the file behind the link. So every path is walked
from the host's directory one name at a time, each directory opened with ``O_NOFOLLOW`` and
used as the ``dir_fd`` of the next step; the file is written as a new file beside its target
and renamed over it (a rename replaces a link, never follows it), its mode set on the open
descriptor, and it is deleted with ``unlinkat``. A link anywhere on the way is refused.
"""

from __future__ import annotations

import errno
import os
import stat

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Exception):
    """The path leaves the directory or crosses a symbolic link."""


def _parts(relative: str) -> list[str]:
    parts = [p for p in relative.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if relative.startswith("/") or ".." in parts or not parts:
        raise UnsafePath("path %r must stay inside the application directory" % relative)
    return parts


def _open_dir(root: str, parts: list[str], create: bool) -> int:
    """An open descriptor of ``root/parts...``, each step below ``root`` (the operator's,
    which may itself be a link) without following a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            if create:
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nxt = os.open(name, _DIR, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePath("%s is a symbolic link or not a directory" % name) from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def write(root: str, base: list[str], relative: str, content: bytes, mode: int) -> str:
    """Write ``root/base.../relative`` (directories made as needed) and return its path."""
    parts = _parts(relative)
    fd = _open_dir(root, base + parts[:-1], create=True)
    name, tmp = parts[-1], parts[-1] + ".cddlm-tmp"
    try:
        try:
            os.unlink(tmp, dir_fd=fd)
        except FileNotFoundError:
            pass
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      0o600, dir_fd=fd)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(out, view):]
            os.fchmod(out, mode)
        finally:
            os.close(out)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
    return os.path.join(root, *base, *parts)


def exists(root: str, base: list[str], relative: str) -> bool:
    """``root/base.../relative`` is a regular file reached without a link."""
    parts = _parts(relative)
    try:
        fd = _open_dir(root, base + parts[:-1], create=False)
    except (OSError, UnsafePath):
        return False
    try:
        info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        return stat.S_ISREG(info.st_mode)
    except OSError:
        return False
    finally:
        os.close(fd)


def remove(root: str, base: list[str], relative: str) -> None:
    """Delete the file (a link in its place is deleted itself, never what it points at)."""
    parts = _parts(relative)
    try:
        fd = _open_dir(root, base + parts[:-1], create=False)
    except FileNotFoundError:
        return
    try:
        os.unlink(parts[-1], dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)
