"""The one line a person reads about a host portal that does not answer, and the bounded notes
of ``cddlm status``: pure functions, checked on the raw errors the outbound client and zeep give."""

from __future__ import annotations

import calendar

from cddlm.application.enactment.remote import short_cause, unreachable_line
from cddlm.cli.output import clip

SINCE = calendar.timegm((2026, 1, 2, 1, 2, 3, 0, 0, 0))


def test_the_line_names_the_host_since_when_in_utc_and_why_in_a_few_words():
    raw = ("http://10.213.178.12:18480/cddlm/portal: cannot connect to 10.213.178.12 port 18480: "
           "unreachable or too slow")
    assert unreachable_line("h2", SINCE, raw) == "host h2 unreachable since 01:02:03 UTC: cannot connect"
    assert unreachable_line("h2", None, raw) == "host h2 unreachable: cannot connect"
    assert unreachable_line("h2", SINCE, None) == "host h2 unreachable since 01:02:03 UTC"


def test_raw_errors_become_their_class_and_unknown_ones_are_cut_to_one_short_line():
    expect = {
        "http://h:1/p: no complete answer within 5s": "no answer in time",
        "http://h:1/p: no complete answer: unreachable or too slow": "no answer in time",
        "HTTPConnectionPool(host='127.0.0.2', port=18481): Max retries exceeded with url: /cddlm "
        "(Caused by NewConnectionError: [Errno 111] Connection refused)": "connection refused",
        "TLS with h failed: certificate not trusted": "certificate not trusted",
        "http://h:1/p answered HTTP 429 (too many requests)": "too many requests",
        "http://h:1/p answered more than 8388608 bytes (--agent-max-response-bytes)": "answer too large",
        "http://h:1/p answered garbage: XMLSyntaxError: ...": "answer is not SOAP",
        # an SSH host whose sshd is gone (make ssh-cluster's tour)
        "Unreachable: ssh://cddlm-ssh@10.213.69.11:2222: [Errno 111] Connect call failed "
        "('10.213.69.11', 2222)": "cannot connect",
    }
    for raw, words in expect.items():
        assert short_cause(raw) == words, raw
    odd = short_cause("something nobody foresaw, " * 20 + "\nsecond line")
    assert len(odd) <= 60 and odd.endswith("...") and "second" not in odd
    assert short_cause(None) == "" and short_cause("") == ""


def test_a_note_is_clipped_to_its_width_and_anything_else_is_left_alone():
    assert clip("x" * 100, 72) == "x" * 69 + "..." and len(clip("x" * 100, 72)) == 72
    assert clip("short", 72) == "short" and clip(None, 72) is None and clip(1234, 2) == 1234
    assert clip("x" * 100, None) == "x" * 100
