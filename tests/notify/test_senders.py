"""How the notification senders are shared (issue 27, item 9): by consumer host, by subscriber,
and a reserve for subscribers holding none; and the sender threads picking by those rules."""

from __future__ import annotations

import threading
import time
from collections import Counter

from cddlm.notify.senders import Senders, Shares


def fill(shares: Shares, host: str, subscriber: str, waiting: set[str]) -> int:
    """Take as many as the rules let ``subscriber`` take to ``host``; how many."""
    n = 0
    while shares.allows(host, subscriber, waiting):
        shares.count(shares.held, host, subscriber)
        n += 1
    return n


def test_alone_a_subscriber_takes_all_but_the_reserve_spread_over_hosts():
    shares = Shares(8)
    assert shares.reserve == 2 and shares.per_host == 4
    assert fill(shares, "h1", "alice", {"alice"}) == 4           # one host: half
    assert fill(shares, "h2", "alice", {"alice"}) == 2           # the last two are reserved
    # a newcomer takes one of the reserve at once, whoever holds the rest
    assert fill(shares, "h3", "bob", {"bob"}) == 1
    assert fill(shares, "h4", "carol", {"carol"}) == 1
    assert shares.busy() == 8 and not shares.allows("h5", "dave", {"dave"})


def test_while_others_want_senders_a_subscriber_holds_at_most_half():
    shares = Shares(8)
    assert fill(shares, "h1", "alice", {"alice", "bob"}) == 4
    assert fill(shares, "h2", "alice", {"alice", "bob"}) == 0
    assert fill(shares, "h2", "bob", {"alice", "bob"}) == 2      # the reserve is for newcomers
    for _ in range(2):
        shares.count(shares.held, "h1", "alice", -1)
    assert fill(shares, "h2", "bob", {"alice", "bob"}) == 2      # alice's freed ones


def test_a_round_counts_what_it_took_so_far():
    shares = Shares(4)
    more: Counter = Counter()
    taken = 0
    while shares.allows("h", "alice", {"alice"}, more):
        shares.count(more, "h", "alice")
        taken += 1
    assert taken == 2 and shares.busy() == 0


def test_a_free_sender_never_waits_behind_another_tenants_stuck_requests():
    release = threading.Event()
    sent: list[tuple[str, float]] = []

    def send(job):
        subscriber, started = job
        if subscriber == "alice":
            release.wait(10)            # alice's consumers never answer
        sent.append((subscriber, time.monotonic() - started))

    senders = Senders(4, send)
    senders.start()
    try:
        for _ in range(20):
            senders.put("hole", "alice", ("alice", time.monotonic()))
        deadline = time.monotonic() + 5
        while senders.shares.busy() < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        assert senders.shares.busy() == 2          # alice's share of one host: half
        for _ in range(3):
            senders.put("listener", "bob", ("bob", time.monotonic()))
        deadline = time.monotonic() + 5
        while sum(1 for who, _ in sent if who == "bob") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        bob = [seconds for who, seconds in sent if who == "bob"]
        # at once (a few ms), not behind alice's (held 10 s): 2 s allow for threads scheduled
        # late on a loaded machine (this runs beside the parallel part's other workers)
        assert len(bob) == 3 and max(bob) < 2.0, sent
    finally:
        release.set()
        assert len(senders.stop()) <= 18
