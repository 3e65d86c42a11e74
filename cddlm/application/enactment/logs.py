"""Components' ``stdout.log`` and ``stderr.log``: capped and rotated, and followed, never re-read.

A component writes its output straight into its log files (opened for appending), so it
keeps running when the portal stops. A component that writes without end must not fill the
disk, nor make the portal read more and more: the ``Capper`` (one thread per process) looks at
the logs of the running components every ``PERIOD`` seconds and, when one has passed its cap,
keeps its last ``cap`` bytes as ``NAME.1`` and truncates it (the writer, appending, goes on at
the new end). A log therefore holds at most about twice its cap, plus what is written in one
period. The capper spends at most a tenth of a core looking: with many components its period
grows.

Logs are opened through ``confine`` (no link followed, no FIFO or device opened): a component
may replace its own log with anything.

A readiness check waiting for a line (``log: PATTERN``) reads each log with a ``Follower``:
from where it stopped, at most ``CHUNK`` bytes per look, a partial last line carried to the
next look, starting again at the beginning of a file that was rotated or truncated. The
pattern is an RE2 pattern (``cddlm.budget``), matched in time linear in what is read.
"""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time

from cddlm.application.enactment import confine

log = logging.getLogger(__name__)

STREAMS = ("stdout.log", "stderr.log")
CHUNK = 1024 * 1024           # bytes a follower reads in one look
CARRY = 64 * 1024             # the longest partial line kept for the next look
PERIOD = 0.25                 # seconds between the capper's looks (at the least)
QUIET = 4.0                   # at most this between looks at logs that have stopped growing


class Follower:
    """Follows a component's logs for a pattern (``seen()``), reading only what is new."""

    def __init__(self, workdir: str, pattern):
        self.workdir = workdir
        self.pattern = pattern
        self._at: dict[str, tuple[int, int]] = {}     # stream -> (inode, offset)
        self._carry: dict[str, bytes] = {}

    def seen(self) -> bool:
        return any(self._look(name) for name in STREAMS)

    def _look(self, name: str) -> bool:
        try:
            fd = _open(self.workdir, name, os.O_RDONLY)
        except (confine.Escape, OSError):
            return False
        try:
            info = os.fstat(fd)
            inode, offset = self._at.get(name, (info.st_ino, 0))
            if inode != info.st_ino or info.st_size < offset:   # rotated or truncated
                offset, self._carry[name] = 0, b""
            if info.st_size - offset > 4 * CHUNK:
                # far behind a component that writes fast: what is skipped is rotated away soon
                offset, self._carry[name] = info.st_size - CHUNK, b""
            data = os.pread(fd, CHUNK, offset)
        finally:
            os.close(fd)
        self._at[name] = (info.st_ino, offset + len(data))
        block = self._carry.get(name, b"") + data
        end = block.rfind(b"\n") + 1
        if end:
            complete, rest = block[:end], block[end:]
        else:
            complete, rest = b"", block
        if len(rest) > CARRY:          # a line longer than CARRY is searched in pieces
            complete, rest = block, b""
        self._carry[name] = rest
        return bool(complete) and self.pattern.search(complete) is not None


def _open(folder: str, name: str, flags: int) -> int:
    """``folder/name``, a regular file of its own, opened without following a link."""
    dir_fd = confine.open_dir(folder, [], False)
    try:
        return confine.open_file(dir_fd, name, flags)
    finally:
        os.close(dir_fd)


def rotate(path: str, cap: int) -> bool:
    """When ``path`` holds more than ``cap`` bytes: keep its last ``cap`` as ``path.1`` (the
    log's owner's) and truncate it. Returns whether it did."""
    folder, name = os.path.split(path)
    try:
        fd = _open(folder, name, os.O_RDWR)
    except (confine.Escape, OSError):
        return False
    try:
        info = os.fstat(fd)
        if info.st_size <= cap:
            return False
        tail = os.pread(fd, cap, info.st_size - cap)
        cut = tail.find(b"\n") + 1      # start the kept part at a line
        tail = tail[cut:] if 0 < cut < len(tail) else tail
        owner = None if info.st_uid == os.geteuid() else \
            confine.Account("", info.st_uid, info.st_gid, "")
        confine.write_file(folder, name + ".1", tail, 0o600, owner)
        os.ftruncate(fd, 0)
        return True
    except (confine.Escape, OSError) as e:
        log.warning("cannot rotate %s: %s", path, e)
        return False
    finally:
        os.close(fd)


class Capper:
    """One thread that keeps the registered component logs under their caps. Directories are
    looked at when due (a heap of next looks): a pass touches only those."""

    def __init__(self):
        self._dirs: dict[str, int] = {}       # component directory -> cap in bytes
        self._seen: dict[str, tuple[int, float, float]] = {}   # -> (size, interval, next look)
        self._due: list[tuple[float, str]] = []                # heap of (next look, directory)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def watch(self, workdir: str, cap: int) -> None:
        with self._lock:
            if workdir not in self._dirs:
                heapq.heappush(self._due, (0.0, workdir))
            self._dirs[workdir] = cap
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cddlm-log-capper",
                                                daemon=True)
                self._thread.start()

    def forget(self, workdir: str) -> None:
        with self._lock:
            self._dirs.pop(workdir, None)
            self._seen.pop(workdir, None)

    def forget_below(self, prefix: str) -> None:
        with self._lock:
            for d in [d for d in self._dirs if d == prefix or d.startswith(prefix + os.sep)]:
                del self._dirs[d]
                self._seen.pop(d, None)

    def watched(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dirs)

    def _next_due(self, now: float) -> tuple[str, int] | None:
        """The next directory due for a look (and its cap), taken off the heap."""
        with self._lock:
            while self._due and self._due[0][0] <= now:
                when, workdir = heapq.heappop(self._due)
                seen = self._seen.get(workdir)
                if workdir in self._dirs and (seen is None or seen[2] == when):
                    return workdir, self._dirs[workdir]
            return None      # (entries of forgotten directories, or stale ones, are dropped)

    def check(self) -> int:
        """One look at every watched log that is due; returns how many it rotated. Logs that
        grew are looked at again after ``PERIOD``; quiet ones ever less often, up to ``QUIET``
        (a thousand idle components cost a look each every four seconds, not four a second)."""
        rotated = 0
        now = time.monotonic()
        while True:
            found = self._next_due(now)
            if found is None:
                return rotated
            workdir, cap = found
            seen = self._seen.get(workdir)
            total = 0
            for name in STREAMS:
                path = os.path.join(workdir, name)
                try:
                    size = os.stat(path, follow_symlinks=False).st_size
                except OSError:
                    if not os.path.isdir(workdir):
                        self.forget(workdir)
                        break
                    continue
                total += size
                if size > cap and rotate(path, cap):
                    rotated += 1
                    log.info("rotated %s (over %d bytes)", path, cap)
            interval = PERIOD if seen is None or seen[0] != total else min(QUIET, 2 * seen[1])
            with self._lock:
                if workdir in self._dirs:
                    self._seen[workdir] = (total, interval, now + interval)
                    heapq.heappush(self._due, (now + interval, workdir))

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.check()
            except Exception:   # the capper must outlive any surprise
                log.exception("the log capper failed")
            spent = time.monotonic() - started
            self._wake.wait(max(PERIOD, 10 * spent))


CAPPER = Capper()
"""The process's capper: caps are registered per component directory by the local runners."""
