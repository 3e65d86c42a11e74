"""Components' ``stdout.log`` and ``stderr.log``: capped and rotated, and followed, never re-read.

A component writes its output straight into its log files (opened for appending), so it
keeps running when the portal stops. A component that writes without end must not fill the
disk, nor make the portal read more and more: the ``Capper`` (one thread per process) looks at
the logs of a running component when the kernel says they were written (inotify), at most
every ``PERIOD`` seconds, and, when one has passed its cap, keeps its last ``cap`` bytes as
``NAME.1`` and truncates it (the writer, appending, goes on at the new end). A log therefore
holds at most about twice its cap, plus what is written in one period. Quiet logs cost nothing;
the capper spends at most about a quarter of a core looking, however many logs grow.

Logs are opened through ``confine``, walked from the application's directory one name at a
time (no link followed, on the way or at the end; no FIFO or device opened): a component may
replace its own log, or a directory above its own, with anything, and the portal (root) still
reads and truncates only that application's own files.

A readiness check waiting for a line (``log: PATTERN``) reads each log with a ``Follower``:
from where it stopped, at most ``CHUNK`` bytes per look, a partial last line carried to the
next look, starting again at the beginning of a file that was rotated or truncated. The
pattern is an RE2 pattern (``cddlm.budget``), matched in time linear in what is read.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import select
import threading
import time

import inotify_simple

from cddlm import metrics
from cddlm.application.enactment import confine

log = logging.getLogger(__name__)

STREAMS = ("stdout.log", "stderr.log")
CHUNK = 1024 * 1024           # bytes a follower reads in one look
CARRY = 64 * 1024             # the longest partial line kept for the next look
PERIOD = 0.25                 # seconds between the capper's looks (at the least)
QUIET = 4.0                   # at most this between looks at logs that have stopped growing,
                              # where the kernel cannot say when they are written
SWEEP = 30.0                  # at most this between looks at any log
SWEEP_GRAIN = 1.0             # seconds: quiet logs' looks are due on whole multiples of it
# armed through /proc/self/fd/N of the directory the walk opened: that link is followed (to
# exactly that directory), so no DONT_FOLLOW
ARMED = inotify_simple.flags.MODIFY | inotify_simple.flags.ONESHOT | inotify_simple.flags.ONLYDIR


class Follower:
    """Follows a component's logs for a pattern (``seen()``), reading only what is new: the
    component's directory is ``relative`` below the application's directory ``base``."""

    def __init__(self, base: str, relative: str, pattern):
        self.base = base
        self.names = confine.inside(base, relative)
        self.pattern = pattern
        self._at: dict[str, tuple[int, int]] = {}     # stream -> (inode, offset)
        self._carry: dict[str, bytes] = {}

    def seen(self) -> bool:
        try:
            folder = confine.open_dir(self.base, self.names, False)
        except (confine.Escape, OSError):
            return False
        try:
            return any(self._look(folder, name) for name in STREAMS)
        finally:
            os.close(folder)

    def _look(self, folder: int, name: str) -> bool:
        try:
            fd = confine.open_file(folder, name, os.O_RDONLY)
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


def rotate(folder: int, name: str, cap: int, where: str = "") -> bool:
    """When the log ``name`` in the directory ``folder`` (a descriptor; ``where`` names it in
    messages) holds more than ``cap`` bytes: keep its last ``cap`` as ``name.1`` (the log's
    owner's) and truncate it. Returns whether it did."""
    try:
        fd = confine.open_file(folder, name, os.O_RDWR)
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
        confine.write_in(folder, name + ".1", tail, 0o600, owner)
        os.ftruncate(fd, 0)
        return True
    except (confine.Escape, OSError) as e:
        log.warning("cannot rotate %s: %s", os.path.join(where, name), e)
        return False
    finally:
        os.close(fd)


class Capper:
    """One thread that keeps the registered component logs under their caps. A directory is
    looked at when its logs may have grown: the kernel says so (an inotify watch on the
    directory, armed before each look and spent by its first event, so a log written without
    pause costs one event and one look per ``PERIOD``, and a quiet one nothing); a directory
    that grew is looked at again after ``PERIOD``, and every one at least every ``SWEEP``
    seconds (should the kernel's queue overflow, every directory at once). A directory newly
    watched wakes the thread, to be armed and looked at at once (asleep until its next look,
    the thread would leave a new component's first hundreds of megabytes on disk up to
    ``SWEEP``). Where the kernel cannot watch a directory (its limit of watches reached, no
    inotify), it is looked at on a schedule: ever less often while quiet, up to ``QUIET``.

    Directories are known by their path (``forget``, ``forget_below``) and reached from their
    application's directory (``watch``'s ``base``), one name at a time, never through a link.

    Logs that other machines write (a Slurm job's, on a folder shared with its node: NFS tells
    this machine's kernel nothing of a remote write) are watched ``heard=False``: on the
    schedule alone, as where the kernel cannot watch."""

    def __init__(self):
        self._dirs: dict[str, int] = {}       # component directory -> cap in bytes
        self._unheard: set[str] = set()       # directories looked at on the schedule alone
        self._where: dict[str, tuple[str, list[str]]] = {}    # -> (application dir, names below)
        self._seen: dict[str, tuple[int, float, float, float]] = {}
        # -> (size, interval, next look, last look)
        self._due: list[tuple[float, str]] = []                # heap of (next look, directory)
        self._armed: dict[str, int] = {}      # directory -> its inotify watch, armed
        self._by_wd: dict[int, str] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._bell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)   # wakes the thread
        self._notify: inotify_simple.INotify | None = None

    def watch(self, base: str, relative: str, cap: int, heard: bool = True) -> None:
        """Keep the logs of the component directory ``relative`` below the application's
        directory ``base`` under ``cap`` bytes each; ``heard``: whether this machine's kernel
        hears of their writes (False: other machines write them)."""
        names = confine.inside(base, relative)
        workdir = os.path.join(base, *names)
        with self._lock:
            new = workdir not in self._dirs
            if new:
                heapq.heappush(self._due, (0.0, workdir))
                self._where[workdir] = (base, names)
                if not heard:
                    self._unheard.add(workdir)
            self._dirs[workdir] = cap
            if self._thread is None or not self._thread.is_alive():
                if self._notify is None:
                    try:
                        self._notify = inotify_simple.INotify()
                    except OSError as e:      # no inotify here, or its instances used up
                        log.warning("no inotify (%s): component logs are looked at on a "
                                    "schedule", e)
                self._thread = threading.Thread(target=self._run, name="cddlm-log-capper",
                                                daemon=True)
                self._thread.start()
        if new:
            os.eventfd_write(self._bell, 1)

    def forget(self, workdir: str) -> None:
        with self._lock:
            self._drop(workdir)

    def dead(self) -> str | None:
        """Why logs go uncapped (the thread ended while it has logs to watch), or None."""
        with self._lock:
            if self._dirs and (self._thread is None or not self._thread.is_alive()):
                return "the log capper's thread has ended"
        return None

    def forget_below(self, prefix: str) -> None:
        with self._lock:
            for d in [d for d in self._dirs if d == prefix or d.startswith(prefix + os.sep)]:
                self._drop(d)

    def _drop(self, workdir: str) -> None:
        self._dirs.pop(workdir, None)
        self._where.pop(workdir, None)
        self._unheard.discard(workdir)
        self._seen.pop(workdir, None)
        wd = self._armed.pop(workdir, None)
        if wd is not None:
            self._by_wd.pop(wd, None)
            try:
                self._notify.rm_watch(wd)
            except OSError:
                pass                          # spent already, or the directory is gone

    def watched(self) -> dict[str, int]:
        with self._lock:
            return dict(self._dirs)

    def _current(self, when: float, workdir: str) -> bool:
        """Whether a heap entry is still its directory's next look (not forgotten, nor
        rescheduled since)."""
        seen = self._seen.get(workdir)
        return workdir in self._dirs and (seen is None or seen[2] == when)

    def _next_due(self, now: float) -> tuple[str, int, str, list[str]] | None:
        """The next directory due for a look (its cap, and where it is), taken off the heap."""
        with self._lock:
            while self._due and self._due[0][0] <= now:
                when, workdir = heapq.heappop(self._due)
                if self._current(when, workdir):
                    return (workdir, self._dirs[workdir]) + self._where[workdir]
            return None      # (entries of forgotten directories, or stale ones, are dropped)

    def _schedule(self, workdir: str, size: int, interval: float, when: float,
                  last: float) -> None:
        self._seen[workdir] = (size, interval, when, last)
        heapq.heappush(self._due, (when, workdir))

    def _arm(self, workdir: str, folder: int) -> bool:
        """A watch on the directory ``folder`` (a descriptor of ``workdir``) for its next
        change (before the look, so a write after the look is heard); False where the kernel
        will not give one."""
        if self._notify is None:
            return False
        try:
            wd = self._notify.add_watch("/proc/self/fd/%d" % folder, ARMED)
        except OSError:
            return False
        with self._lock:
            if workdir in self._dirs:
                spent = self._armed.get(workdir)
                if spent is not None and spent != wd:     # its event lost (an overflow)
                    self._by_wd.pop(spent, None)
                self._armed[workdir] = wd
                self._by_wd[wd] = workdir
        return True

    def _look(self, workdir: str, folder: int, cap: int) -> tuple[int, int]:
        """The logs' total size in the directory ``folder``, and how many were rotated."""
        total = rotated = 0
        for name in STREAMS:
            try:
                size = os.stat(name, dir_fd=folder, follow_symlinks=False).st_size
            except OSError:
                continue
            total += size
            if size > cap and rotate(folder, name, cap, workdir):
                rotated += 1
                metrics.log_rotated()
                log.info("rotated %s (over %d bytes)", os.path.join(workdir, name), cap)
        return total, rotated

    def check(self) -> int:
        """One look at every watched log that is due; returns how many it rotated."""
        rotated = 0
        now = time.monotonic()
        while True:
            found = self._next_due(now)
            if found is None:
                return rotated
            workdir, cap, base, names = found
            seen = self._seen.get(workdir)
            armed, total = False, seen[0] if seen else 0
            try:
                folder = confine.open_dir(base, names, False)
            except FileNotFoundError:
                self.forget(workdir)          # its application is gone
                continue
            except (confine.Escape, OSError):
                folder = None                 # a link now: nothing there is looked at
            if folder is not None:
                try:
                    armed = workdir not in self._unheard and self._arm(workdir, folder)
                    total, done = self._look(workdir, folder, cap)
                    rotated += done
                finally:
                    os.close(folder)
            grew = seen is None or seen[0] != total
            interval = PERIOD if grew else min(QUIET, 2 * seen[1])
            # quiet: the kernel will say; its sweep look is due on a whole SWEEP_GRAIN, with
            # the others of that second (1,000 quiet logs: one wake a second, not 33)
            when = math.ceil((now + SWEEP) / SWEEP_GRAIN) * SWEEP_GRAIN if armed and not grew \
                else now + interval
            with self._lock:
                if workdir in self._dirs:
                    self._schedule(workdir, total, interval, when, now)

    def _hear(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the kernel's word of logs written, or for a
        directory newly watched; a directory written is looked at ``PERIOD`` after its last
        look (at once if that has passed)."""
        poller = select.poll()
        poller.register(self._bell, select.POLLIN)
        if self._notify is not None:
            poller.register(self._notify.fileno(), select.POLLIN)
        ready = {fd for fd, _ in poller.poll(max(0, int(timeout * 1000)))}
        if self._bell in ready:
            try:
                os.eventfd_read(self._bell)
            except BlockingIOError:
                pass
        if self._notify is None or self._notify.fileno() not in ready:
            return
        events = self._notify.read(timeout=0)
        now = time.monotonic()
        with self._lock:
            for event in events:
                if event.wd == -1:            # the kernel's queue overflowed: look at all
                    for workdir, seen in list(self._seen.items()):
                        self._schedule(workdir, seen[0], PERIOD, now, seen[3])
                    continue
                workdir = self._by_wd.pop(event.wd, None)
                if workdir is None or self._armed.get(workdir) != event.wd:
                    continue
                del self._armed[workdir]      # spent: armed again at the look
                seen = self._seen.get(workdir)
                if seen is not None and seen[2] > seen[3] + PERIOD:
                    self._schedule(workdir, seen[0], PERIOD, max(now, seen[3] + PERIOD),
                                   seen[3])

    def _until_next(self) -> float:
        """Seconds until the next look due (stale entries dropped: the thousands of a large
        application just removed would each wake the thread at their time for nothing)."""
        with self._lock:
            while self._due and not self._current(*self._due[0]):
                heapq.heappop(self._due)
            return self._due[0][0] - time.monotonic() if self._due else SWEEP

    def _run(self) -> None:
        while True:
            started = time.monotonic()
            try:
                self.check()
                spent = time.monotonic() - started
                # at most about a quarter of a core looking, however many logs grow
                self._hear(min(SWEEP, max(self._until_next(), 3 * spent, 0.01)))
            except Exception:   # the capper must outlive any surprise
                log.exception("the log capper failed")
                time.sleep(PERIOD)


CAPPER = Capper()
"""The process's capper: caps are registered per component directory by the local runners."""
