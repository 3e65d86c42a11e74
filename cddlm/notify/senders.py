"""The notification senders, shared fairly by consumer hosts and by subscribers (tenants).

A consumer that never answers holds a sender for as long as a request may last (connect and
read timeouts, then a deadline), so who may hold how many senders is what keeps one tenant's
silent consumers from delaying another tenant's notifications. ``Shares`` is the rule, counted
per consumer host and per subscriber:

- one consumer host holds at most half of them;
- one subscriber holds at most half while another subscriber wants some too (all of them,
  less the reserve, when alone: a single tenant, or local mode, is not slowed down);
- a subscriber who already holds one may not take the last quarter (at least one): those are
  kept for subscribers who hold none, so a newcomer finds a free one at once.

The dispatcher applies it to the requests it has in flight (claimed and not yet recorded; twice
as many as there are senders) when it claims subscriptions, and ``Senders`` applies it again to
the requests being sent when a sender picks its next one: requests wait in one queue per
subscriber, and a free sender takes the oldest request it may of the next subscriber in turn,
never one behind another tenant's.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict, deque
from typing import Any, Callable

TOTAL = "*"         # the key of every request in a ``Shares`` count
NONE: Counter = Counter()


class Shares:
    """The requests ``held`` per host and per subscriber, out of ``size``, and whether one more
    may be taken (with ``more`` counted on top: what a round has taken so far)."""

    def __init__(self, size: int):
        self.size = size
        self.per_host = max(1, size // 2)
        self.per_subscriber = max(1, size // 2)
        self.reserve = max(1, size // 4)
        self.held: Counter = Counter()

    def allows(self, host: str, subscriber: str, waiting: set[str], more: Counter = NONE) -> bool:
        """Whether a request of ``subscriber`` to ``host`` may be taken; ``waiting``: the
        subscribers that want one now."""
        def n(key) -> int:
            return self.held[key] + more[key]
        busy, mine = n(TOTAL), n(("subscriber", subscriber))
        contended = len(waiting) > 1 or any(
            key[0] == "subscriber" and key[1] != subscriber for key in self.held if key != TOTAL)
        return (busy < self.size and n(("host", host)) < self.per_host
                and not (contended and mine >= self.per_subscriber)
                and not (mine and self.size - busy <= self.reserve))

    @staticmethod
    def count(counts: Counter, host: str, subscriber: str, n: int = 1) -> None:
        for key in (TOTAL, ("host", host), ("subscriber", subscriber)):
            counts[key] += n
            if not counts[key]:
                del counts[key]

    def busy(self) -> int:
        return self.held[TOTAL]


class Senders:
    """``workers`` threads, each calling ``send(job)`` for the jobs ``put`` to them, picked
    fairly (see the module docstring)."""

    def __init__(self, workers: int, send: Callable[[Any], None], name: str = "cddlm-notify"):
        self.shares = Shares(workers)
        self.send = send
        self.name = name
        self._waiting: OrderedDict[str, deque] = OrderedDict()    # subscriber -> (host, job)
        self._cond = threading.Condition()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._stopping = False
        self._threads = [threading.Thread(target=self._run, name="%s-%d" % (self.name, i),
                                          daemon=True) for i in range(self.shares.size)]
        for t in self._threads:
            t.start()

    def put(self, host: str, subscriber: str, job: Any) -> None:
        with self._cond:
            self._waiting.setdefault(subscriber, deque()).append((host, job))
            self._cond.notify()

    def stop(self) -> list[Any]:
        """Stop taking jobs; returns those that were still waiting (the threads finish the
        jobs they are sending, and end)."""
        with self._cond:
            self._stopping = True
            dropped = [job for jobs in self._waiting.values() for _, job in jobs]
            self._waiting.clear()
            self._cond.notify_all()
        return dropped

    def _pick(self) -> tuple[str, str, Any] | None:
        """The next job a free sender may take (under the lock): subscribers in turn, each
        one's oldest job whose host may have one more."""
        wanting = set(self._waiting)
        for subscriber, jobs in self._waiting.items():
            for i, (host, job) in enumerate(jobs):
                if self.shares.allows(host, subscriber, wanting):
                    del jobs[i]
                    if jobs:
                        self._waiting.move_to_end(subscriber)    # the others go first next
                    else:
                        del self._waiting[subscriber]
                    self.shares.count(self.shares.held, host, subscriber)
                    return host, subscriber, job
        return None

    def _run(self) -> None:
        while True:
            with self._cond:
                picked = self._pick()
                while picked is None and not self._stopping:
                    self._cond.wait()
                    picked = self._pick()
                if picked is None:
                    return
            host, subscriber, job = picked
            try:
                self.send(job)
            finally:
                with self._cond:
                    self.shares.count(self.shares.held, host, subscriber, -1)
                    self._cond.notify_all()
