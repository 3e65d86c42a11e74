"""An application's directory on a host, as the portal touches it: below it, never beside it.

Components may write below their application's directory (they run there, as the account
``--run-as`` names); the portal (often root) writes there too: log files, the pid file, the
files of ``file`` components. Every path the portal opens below the directory is walked one
name at a time with ``O_NOFOLLOW``, and only regular files with one link are read or written,
so a link or FIFO a component planted (``stdout.log -> /etc/shadow``) is refused, never
followed, and no open blocks. Directories the portal makes there belong to the account, mode
0700: other tenants' components (other accounts) cannot read them.

    hosts/HOST/            the portal's (0755)
      apps/                the portal's (0711: other accounts may pass, not list)
        <id>/              the owner's account (0700)
          <component>/...  the owner's account (0700)
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from dataclasses import dataclass

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Escape(ValueError):
    """A path that leaves the application's directory, or names a link, FIFO or device."""


@dataclass(frozen=True)
class Account:
    """The OS account a component runs as."""
    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def named(cls, name: str) -> "Account":
        try:
            p = pwd.getpwnam(name)
        except KeyError:
            raise LookupError("no account %r on this machine" % name) from None
        if p.pw_uid == 0:
            raise LookupError("account %r is root: components never run as root by request" % name)
        return cls(p.pw_name, p.pw_uid, p.pw_gid, p.pw_dir)


def inside(base: str, relative: str) -> list[str]:
    """The names of ``relative`` below ``base`` (refusing absolute paths and ``..`` escapes)."""
    if os.path.isabs(relative):
        raise Escape("%r is an absolute path; it must be relative and stay inside the "
                     "application's directory" % relative)
    normal = os.path.normpath(relative)
    if normal == ".":
        return []
    if normal == ".." or normal.startswith("../"):
        raise Escape("%r leaves the application's directory" % relative)
    return normal.split("/")


def make_app_dir(apps_root: str, name: str, account: Account | None) -> str:
    """``apps_root/name``: made if missing (apps_root 0711), the account's, mode 0700."""
    os.makedirs(apps_root, exist_ok=True)
    if account is not None:
        os.chmod(apps_root, 0o711)
    path = os.path.join(apps_root, name)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    fd = os.open(path, DIR_FLAGS)
    try:
        if account is not None:
            os.fchown(fd, account.uid, account.gid)
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def open_dir(base: str, names: list[str], create: bool = True,
             account: Account | None = None) -> int:
    """A descriptor of ``base/names...``, walked without following links; missing
    directories are made (the account's, 0700) when ``create``."""
    fd = os.open(base, DIR_FLAGS)
    try:
        for name in names:
            if name in ("", ".", "..") or "/" in name:
                raise Escape("bad path element %r" % name)
            if create:
                try:
                    os.mkdir(name, 0o700, dir_fd=fd)
                    if account is not None:
                        os.chown(name, account.uid, account.gid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Escape("%s is not a directory of the application (a link?)" % name) from None
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(dir_fd: int, name: str, flags: int, mode: int = 0o600) -> int:
    """Open ``name`` in ``dir_fd``: never through a link, never blocking on a FIFO, and only a
    regular file with one link (a hard link to somebody else's file is refused)."""
    try:
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):    # a link; a FIFO without a reader
            raise Escape("%s is not a regular file (a link or a FIFO)" % name) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise Escape("%s is not a regular file of its own (a FIFO, device or hard link)" % name)
    os.set_blocking(fd, True)
    return fd


def write_file(base: str, relative: str, content: bytes, mode: int,
               account: Account | None) -> str:
    """Write ``base/relative`` atomically (a temporary file renamed over it), the account's;
    returns its path."""
    names = inside(base, relative)
    if not names:
        raise Escape("the path names the application's directory itself")
    fd = open_dir(base, names[:-1], True, account)
    try:
        write_in(fd, names[-1], content, mode, account)
    finally:
        os.close(fd)
    return os.path.join(base, *names)


def write_in(dir_fd: int, name: str, content: bytes, mode: int, account: Account | None) -> None:
    """Write ``name`` in the directory ``dir_fd`` atomically (a temporary file renamed over it,
    whatever was there, a link too), the account's."""
    tmp = name + ".cddlm-tmp"
    try:
        os.unlink(tmp, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    out = open_file(dir_fd, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(out, view):]
        if account is not None:
            os.fchown(out, account.uid, account.gid)
        os.fchmod(out, mode)
    finally:
        os.close(out)
    os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def remove_file(base: str, relative: str) -> None:
    names = inside(base, relative)
    fd = open_dir(base, names[:-1], False)
    try:
        os.unlink(names[-1], dir_fd=fd)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def exists(base: str, relative: str) -> bool:
    """Whether ``base/relative`` exists (as anything but a link to elsewhere)."""
    try:
        names = inside(base, relative)
        fd = open_dir(base, names[:-1], False)
    except (Escape, OSError):
        return False
    try:
        os.stat(names[-1], dir_fd=fd, follow_symlinks=False)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def read_tail(base: str, relative: str, max_bytes: int,
              offset: int | None = None) -> tuple[bytes, int]:
    """The last ``max_bytes`` of a regular file below ``base`` (with ``offset``: the
    ``max_bytes`` after it, from the start when the file is now shorter), and where they start."""
    names = inside(base, relative)
    fd = open_dir(base, names[:-1], False)
    try:
        f = open_file(fd, names[-1], os.O_RDONLY)
    finally:
        os.close(fd)
    with os.fdopen(f, "rb") as stream:
        end = stream.seek(0, os.SEEK_END)
        if offset is None:
            start = max(0, end - max_bytes)
        else:
            start = offset if offset <= end else 0
        stream.seek(start)
        return stream.read(max_bytes), start


def open_log(base: str, relative: str, account: Account | None) -> int:
    """A component's log file for appending (made if missing, the account's)."""
    names = inside(base, relative)
    fd = open_dir(base, names[:-1], True, account)
    try:
        out = open_file(fd, names[-1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    finally:
        os.close(fd)
    if account is not None:
        os.fchown(out, account.uid, account.gid)
    return out
