"""Processes started from threads with descriptor tables of their own.

A new process begins with a copy of its parent's descriptor table and closes all but its three
standard ones before it runs its program. The portal holds a descriptor for each process it
watches (a pidfd, see ``watch``), so with k processes running the next start copies and closes
k descriptors: measured on a 2-core VM, 1,000 starts of ``/bin/true`` took 0.35 s beside no
other descriptor and 1.44 s beside 10,000, which made starting 10,000 processes grow faster
than their number.

``Spawner`` runs each start on a thread that has unshared its descriptor table
(``unshare(CLONE_FILES)``) and closed everything in it but 0-2: whatever the rest of the portal
holds, a start copies a handful of descriptors. The thread's table is its alone, so what runs
there opens, uses and closes its own descriptors and nothing else: no logging (a handler's
file is not in that table, and its number may name another file there), no database, no user
lookups (a name service may keep a socket); callers do those first and pass the results in.
Where the table cannot be unshared (not Linux), starts run on the calling thread as before.

Signals: the thread does not block them (a process started from it would inherit the mask).
Linux gives a signal sent to the process to its main thread unless that thread blocks it or
has one pending, and the portal's handlers (SIGTERM, SIGINT) write to no descriptor (no
``set_wakeup_fd``), so a handler that did run on this thread would touch nothing of its table.
"""

from __future__ import annotations

import ctypes
import os
import queue
import threading
from typing import Any, Callable, TypeVar

T = TypeVar("T")

CLONE_FILES = 0x00000400


def _unshare_descriptors() -> bool:
    """Give the calling thread a descriptor table of its own holding only 0, 1 and 2."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_FILES) != 0:
            return False
    except (OSError, AttributeError):
        return False
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    return True


class Spawner:
    """``call(fn, ...)`` runs ``fn`` on one of the spawning threads and returns its result (or
    raises its exception) on the caller's; ``threads`` calls run side by side (as many as
    the engine has workers: their starts went side by side before)."""

    def __init__(self, threads: int = 4, name: str = "cddlm-spawner"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._unshared: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(threads):
            threading.Thread(target=self._run, name="%s-%d" % (name, i), daemon=True).start()
        # whether every thread's table is its own (else none is used)
        self.separate = all([self._unshared.get() for _ in range(threads)])
        if not self.separate:
            for _ in range(threads):
                self._jobs.put(None)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        if not self.separate:
            return fn(*args)
        done = threading.Lock()
        done.acquire()
        outcome: list = []
        self._jobs.put((fn, args, outcome, done))
        done.acquire()
        result, error = outcome
        if error is not None:
            raise error
        return result

    def _run(self) -> None:
        self._unshared.put(_unshare_descriptors())
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args, outcome, done = job
            try:
                outcome[:] = [fn(*args), None]
            except BaseException as e:      # noqa: BLE001 - raised again on the caller's thread
                outcome[:] = [None, e]
            done.release()


_spawner: Spawner | None = None
_lock = threading.Lock()


def _forgotten_in_child() -> None:
    """A forked child has only the thread that forked: it starts a spawner of its own."""
    global _spawner, _lock
    _spawner, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forgotten_in_child)


def spawner(threads: int = 4) -> Spawner:
    """The process's one spawner, started on first use with ``threads`` threads."""
    global _spawner
    with _lock:
        if _spawner is None:
            _spawner = Spawner(max(1, threads))
        return _spawner
