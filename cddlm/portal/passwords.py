"""The portal's scrypt work, bounded: at most ``threads`` password checks run at once (each
about 16 MiB and tens of milliseconds of one core), on threads of their own, so that a flood
of logins neither holds the server's worker threads nor takes every core from the requests of
clients already signed in.

A check waits in one of two lanes: credentials that were valid before (``logins.Logins``
fingerprints) go first, every other one after them; within a lane, first come first served. A
check that waited ``wait`` seconds is not run: its caller gets ``Busy`` (answered at once, try
again), and so does one that finds ``max_queued`` checks waiting. Requests never wait here on a
server thread: ``submit`` returns at once and the outcome is handed to a callback.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Callable

from cddlm.errors import Busy

log = logging.getLogger(__name__)


def default_threads() -> int:
    """Half the cores this process may use, at least one: the other half stays for the rest."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


class Checks:
    def __init__(self, threads: int = 0, wait: float = 2.0, max_queued: int = 4096,
                 clock: Callable[[], float] = time.monotonic):
        self.threads = threads or default_threads()
        self.wait = wait
        self.max_queued = max_queued
        self.clock = clock
        self._lanes: tuple[collections.deque, collections.deque] = (collections.deque(), collections.deque())
        self._ready = threading.Condition(threading.Lock())
        self._closed = False
        self._workers = [threading.Thread(target=self._work, daemon=True, name="cddlm-passwords-%d" % i)
                         for i in range(self.threads)]
        for t in self._workers:
            t.start()

    def submit(self, check: Callable[[], Any], done: Callable[[Any, BaseException | None], None],
               known: bool = False) -> None:
        """Run ``check`` on a check thread, then ``done(result, None)`` there; or
        ``done(None, error)``: its exception, or ``Busy`` when it waited too long."""
        with self._ready:
            if self._closed or sum(len(lane) for lane in self._lanes) >= self.max_queued:
                busy = True
            else:
                busy = False
                self._lanes[0 if known else 1].append((self.clock(), check, done))
                self._ready.notify()
        if busy:
            done(None, self._busy())

    def run(self, check: Callable[[], Any], known: bool = False) -> Any:
        """``check``'s result, waiting for it on this thread (callers without a server: tests,
        in-process use)."""
        finished = threading.Event()
        out: list = [None, None]

        def done(result, error):
            out[0], out[1] = result, error
            finished.set()

        self.submit(check, done, known)
        finished.wait()
        if out[1] is not None:
            raise out[1]
        return out[0]

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def _busy(self) -> Busy:
        return Busy("the portal is checking too many passwords at once; try again in a moment "
                    "(a bearer token or digest secret is checked without waiting)")

    def _work(self) -> None:
        while True:
            with self._ready:
                while not (self._lanes[0] or self._lanes[1]) and not self._closed:
                    self._ready.wait()
                lane = self._lanes[0] or self._lanes[1]
                if not lane:
                    return      # closed and drained
                queued, check, done = lane.popleft()
            if self.clock() - queued > self.wait:
                done(None, self._busy())
                continue
            try:
                result = check()
            except Exception as e:   # noqa: BLE001 - handed to the caller
                done(None, e)
                continue
            try:
                done(result, None)
            except Exception:   # noqa: BLE001 - a callback's failure is not the check's
                log.exception("a password check's callback failed")
