"""Readiness: whether this portal can do its work now (``GET /readyz``).

Each check is a name and a function that returns None (fine) or a short reason; the
composition root chooses them (the store reachable and its schema this program's, the
engine's and the log capper's threads alive, on a host portal a front portal renewing its
delegated applications). The answer is computed at most once per ``cache`` seconds, however
many pollers ask, and the store is asked on a thread of its own with a deadline: a store that
does not answer makes the portal not ready within ``deadline`` seconds instead of holding the
poller (and a server thread) for as long as the database takes.

Reasons name what is wrong, never a password or a user's data.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable

from cddlm.application.store import Store
from cddlm.errors import StoreUnavailable

Check = Callable[[], "str | None"]


class Readiness:
    """``checks`` in order; those named in ``after_store`` read the store themselves, and are
    skipped while the ``store`` check fails (they would wait on it past its deadline)."""

    def __init__(self, checks: dict[str, Check], *, cache: float = 0.5,
                 after_store: frozenset[str] = frozenset(),
                 clock: Callable[[], float] = time.monotonic):
        self.checks = checks
        self.after_store = after_store
        self.cache = cache
        self.clock = clock
        self._lock = threading.Lock()
        self._answer: tuple[float, dict[str, str]] | None = None

    def problems(self) -> dict[str, str]:
        """{check: reason} of the checks that fail now (empty: ready)."""
        with self._lock:
            now = self.clock()
            if self._answer is not None and now - self._answer[0] < self.cache:
                return self._answer[1]
            found = {}
            for name, check in self.checks.items():
                if name in self.after_store and "store" in found:
                    continue
                try:
                    reason = check()
                except Exception as e:      # a check that breaks says so; it is not ready
                    reason = "the check failed: %s" % type(e).__name__
                if reason:
                    found[name] = reason
            self._answer = (self.clock(), found)
            return found


class StoreProbe:
    """The store answers a read of its schema revision within ``deadline`` seconds, and that
    revision is the one this program migrated to (a newer program sharing the store may have
    moved it on). One probe at a time, on its own thread."""

    def __init__(self, store: Store, deadline: float = 2.0):
        self.store = store
        self.deadline = deadline
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cddlm-ready")
        self._running: Future | None = None
        self._since = 0.0

    def __call__(self) -> str | None:
        if self._running is None or self._running.done():
            self._running = self._pool.submit(self.store.schema_problem)
            self._since = time.monotonic()
        try:
            return self._running.result(timeout=max(0.0, self.deadline - (time.monotonic() - self._since)))
        except FutureTimeout:
            return "the store has not answered for %.1f s" % (time.monotonic() - self._since)
        except StoreUnavailable as e:
            return "the store is unreachable: %s" % e

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def front_renewed(last: Callable[[], "float | None"], delegated: Callable[[], bool],
                  window: float, clock: Callable[[], float] = time.time) -> Check:
    """A host portal's check: while it holds applications delegated by a front portal, a
    front portal pinged one of them in the last ``window`` seconds (``last``: when, or None
    since this portal started)."""
    started = clock()

    def check() -> str | None:
        seen = last()
        age = clock() - (seen if seen is not None else started)
        if age <= window or not delegated():
            return None
        return ("no front portal has pinged its delegated applications for %.0f s (more than "
                "%g s)" % (age, window))
    return check
