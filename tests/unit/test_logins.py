"""The sign-in allowances (``portal/logins.py``) and the password-check threads
(``portal/passwords.py``) on a clock the test turns."""

from __future__ import annotations

import threading

import pytest

from cddlm.errors import Busy
from cddlm.portal.logins import Logins, place
from cddlm.portal.passwords import Checks


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_places_group_a_subnets_addresses():
    assert place("192.0.2.77") == "192.0.2.0/24"
    assert place("::ffff:192.0.2.77") == "192.0.2.0/24"
    assert place("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert place("2001:db8:1:2:aaaa::1", v6_prefix=48) == "2001:db8:1::/48"
    assert place("not an address") == "not an address"


def test_allowances_per_user_and_place_and_per_user():
    clock = Clock()
    logins = Logins(per_place_user=3, per_user=5, clock=clock)
    for _ in range(3):
        assert logins.refusal("10.0.0.1", "alice") is None
        logins.failed("10.0.0.1", "alice")
    wait, why = logins.refusal("10.0.0.9", "alice")          # the same /24
    assert wait == 20 and "alice from 10.0.0.0/24" in why
    assert logins.refusal("10.0.0.1", "bob") is None          # another user: not held up
    logins.failed("10.0.1.1", "alice")
    logins.failed("10.0.2.1", "alice")
    wait, why = logins.refusal("10.0.3.1", "alice")            # five from anywhere
    assert "too many failed sign-ins as alice;" in why
    clock.now += 12                                            # one refilled (5 a minute)
    assert logins.refusal("10.0.3.1", "alice") is None
    assert logins.refusal("10.0.0.1", "alice") is not None     # 3 a minute: 0.6 back


def test_fingerprints_know_a_password_seen_valid_only():
    logins = Logins(1, 1)
    right = logins.fingerprint("alice", "her-password")
    assert len(right) == 4 and not logins.known("alice", right)
    logins.succeeded("alice", right)
    assert logins.known("alice", right)
    assert not logins.known("alice", logins.fingerprint("alice", "a-guess"))
    assert not logins.known("bob", right)
    assert Logins(1, 1).fingerprint("alice", "her-password") != right     # a key per process


def test_checks_run_known_credentials_first_and_refuse_what_waited_too_long():
    clock = Clock()
    checks = Checks(threads=1, wait=5.0, clock=clock)
    gate, running, ran, outcomes = threading.Event(), threading.Event(), [], {}
    finished = threading.Semaphore(0)

    def done(name):
        def record(result, error):
            outcomes[name] = error if error is not None else result
            finished.release()
        return record

    checks.submit(lambda: running.set() or gate.wait(5) and ran.append("first"), done("first"))
    assert running.wait(5)          # the one thread is busy with it
    checks.submit(lambda: ran.append("unknown") or "u", done("unknown"))
    clock.now += 3
    checks.submit(lambda: ran.append("late") or "l", done("late"))
    checks.submit(lambda: ran.append("known") or "k", done("known"), known=True)
    clock.now += 3          # "unknown" has now waited 6 s, the others 3 s
    gate.set()
    for _ in range(4):
        assert finished.acquire(timeout=5)
    assert ran == ["first", "known", "late"]
    assert outcomes["known"] == "k" and outcomes["late"] == "l"
    assert isinstance(outcomes["unknown"], Busy)
    with pytest.raises(ZeroDivisionError):
        checks.run(lambda: 1 / 0)
    checks.close()


def test_attempts_checked_at_once_are_counted_before_they_fail():
    """32 guesses in flight used to pass the check before the first failure was counted."""
    logins = Logins(per_place_user=3, per_user=30)
    assert [logins.take("10.0.0.1", "bob") for _ in range(3)] == [None, None, None]
    assert logins.take("10.0.0.1", "bob") is not None
    logins.give_back("10.0.0.1", "bob")      # one was bob's password after all
    assert logins.take("10.0.0.1", "bob") is None
    assert logins.take("10.0.0.1", "alice") is None
