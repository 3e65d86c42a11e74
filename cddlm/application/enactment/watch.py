"""Exit watcher: one thread that learns within milliseconds when a watched process ends,
through Linux pidfds (which work for adopted processes too, not only for children).

It waits with ``epoll`` (never ``select``: a portal with a thousand processes holds a thousand
pidfds, past select's limit of 1024; and not ``poll``, whose every call costs in the number of
descriptors: ten thousand cost 7 ms a second idle). Exits that come together (a stop of many, a crash of a
process group) are handed over together, so the engine records them in one transaction.
"""

from __future__ import annotations

import logging
import os
import select
import threading
from typing import Callable

log = logging.getLogger(__name__)

GATHER = 0.01       # seconds to wait for more exits after one, so that a burst is one call
GATHER_ROUNDS = 5


class ExitWatcher:
    def __init__(self, on_exit: Callable[[list], None]):
        self._on_exit = on_exit                          # gets [key, ...]
        self._poll = select.epoll()
        self._fds: dict[int, tuple[int, object]] = {}    # fd -> (pid, key)
        self._pids: dict[int, int] = {}                  # pid -> fd
        self._lock = threading.Lock()
        self._closing: list[int] = []                    # forgotten, to be closed by the thread
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._poll.register(self._wake_r, select.EPOLLIN)
        self._stop = False
        self._ended = self._orphaned = False    # the thread has ended; close() left it to it
        self._thread = threading.Thread(target=self._run, name="cddlm-exit-watcher", daemon=True)
        self._thread.start()

    def watch(self, pid: int, key: object) -> bool:
        """Watch ``pid``; False when it is gone already (or pidfds are not supported)."""
        with self._lock:
            if pid in self._pids:
                self._fds[self._pids[pid]] = (pid, key)
                return True
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            return False   # already gone, or no pidfd support: the scheduled check finds it
        with self._lock:
            if pid in self._pids:      # another thread opened one meanwhile: keep that one
                self._fds[self._pids[pid]] = (pid, key)
                os.close(fd)
                return True
            self._fds[fd] = (pid, key)
            self._pids[pid] = fd
            # no wake-up needed: epoll watches a descriptor added while the thread waits
            self._poll.register(fd, select.EPOLLIN)
        return True

    def forget(self, pids: list[int]) -> None:
        """Stop watching these processes (their ends are looked after elsewhere)."""
        with self._lock:
            for pid in pids:
                fd = self._pids.pop(pid, None)
                if fd is None:
                    continue
                del self._fds[fd]
                try:
                    self._poll.unregister(fd)
                except (KeyError, OSError):
                    pass
                # closed by the watcher thread before its next wait: a poll in progress may
                # still name this fd, and its number must not be reused until that is done
                self._closing.append(fd)

    def watching(self, pid: int | None) -> bool:
        with self._lock:
            return pid in self._pids

    def __len__(self) -> int:
        with self._lock:
            return len(self._fds)

    def _ready(self, timeout_ms: int) -> list[object]:
        with self._lock:
            closing, self._closing = self._closing, []
        for fd in closing:
            os.close(fd)
        try:
            ready = self._poll.poll(timeout_ms / 1000.0)
        except InterruptedError:
            return []
        keys = []
        for fd, _ in ready:
            if fd == self._wake_r:
                try:
                    while os.read(self._wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
                continue
            with self._lock:
                entry = self._fds.pop(fd, None)
                if entry is None:
                    continue    # forgotten meanwhile: closed before the next wait
                try:
                    self._poll.unregister(fd)
                except (KeyError, OSError):
                    pass
                if self._pids.get(entry[0]) == fd:
                    del self._pids[entry[0]]
            os.close(fd)
            keys.append(entry[1])
        return keys

    def _run(self) -> None:
        try:
            self._watch()
        finally:
            with self._lock:
                self._ended = True
                orphaned = self._orphaned
            if orphaned:
                self._release()

    def _watch(self) -> None:
        while not self._stop:
            keys = self._ready(1000)
            rounds = 0
            while keys and rounds < GATHER_ROUNDS and not self._stop:
                more = self._ready(int(GATHER * 1000))
                if not more:
                    break
                keys.extend(more)
                rounds += 1
            if keys and not self._stop:
                try:
                    self._on_exit(keys)
                except Exception:  # a failing callback must not kill the watcher
                    log.exception("exit callback failed")

    def close(self, timeout: float = 5.0) -> None:
        self._stop = True
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass
        self._thread.join(timeout)
        with self._lock:
            # the thread still in a callback closes the descriptors itself when it ends (closed
            # here, their numbers could be reused while it still polls them); one of the two
            # releases them, decided under the lock
            self._orphaned = not self._ended
        if self._orphaned:
            log.warning("the exit watcher did not stop within %g s; it will close its "
                        "descriptors when it does", timeout)
            return
        self._release()

    def _release(self) -> None:
        with self._lock:
            for fd in list(self._fds) + self._closing:
                os.close(fd)
            self._fds.clear()
            self._closing.clear()
            self._pids.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._poll.close()
