"""The CPUs the portal's own threads run on (``cddlm portal serve --cpu``), apart from the
processes it starts.

A Python process hands its interpreter lock from thread to thread on every request (the HTTP
event loop, a worker, the database driver's waits); when those threads sit on different cores
each hand-over is a cross-core wake-up, which on small or virtual machines costs more than the
request's own work (measured: benchmarks/portal_throughput.py ``--pin``). ``pin`` keeps every
thread of the portal, those running and those to come, on the given CPUs. A process started
from a pinned thread would inherit the mask, so whoever starts one does it ``unpinned()``: the
starting thread has the full set back for that moment, and the child keeps it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterator

_full: set[int] | None = None        # the CPUs the process could use before ``pin``
_lock = threading.Lock()


def available() -> set[int]:
    return set(os.sched_getaffinity(0))


def pin(cpus: set[int]) -> None:
    """Run every thread of this process, now and later, on ``cpus`` (a subset of ``available``)."""
    global _full
    allowed = available()
    if not cpus or not cpus <= allowed:
        raise ValueError("CPUs %s: this process may use %s" % (_show(cpus), _show(allowed)))
    with _lock:
        if _full is None:
            _full = allowed
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):   # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


@contextlib.contextmanager
def unpinned() -> Iterator[None]:
    """The calling thread on every CPU the process had before ``pin`` (a child it starts
    meanwhile inherits that), then back; nothing when the portal is not pinned."""
    if _full is None:
        yield
        return
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, _full)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def parse(text: str) -> set[int]:
    """``0``, ``0,2`` or ``0-3`` (as taskset -c and /proc's Cpus_allowed_list write them)."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError("not a CPU list: %r (e.g. 0, 0,2 or 0-3)" % text)
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _show(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus)) or "none"
