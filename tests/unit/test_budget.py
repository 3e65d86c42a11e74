"""The budget helper: users' patterns through RE2, XPath checks, running totals."""

from __future__ import annotations

import time

import pytest

from cddlm import budget


def test_catastrophic_patterns_match_in_linear_time():
    pattern = budget.user_regex("(a+)+$", 100)
    started = time.process_time()
    assert pattern.search("a" * 40 + "b") is None
    assert pattern.search(b"a" * 100_000 + b"b") is None        # bytes too (logs are bytes)
    assert time.process_time() - started < 0.5
    assert budget.user_regex("Serving HTTP", 100).search(b"... Serving HTTP on 0.0.0.0")


@pytest.mark.parametrize("pattern,why", [
    ("(a)\\1", "backreferences"), ("(?<=a)b", "look-around"), ("x" * 101, "longer than 100"),
    ("(", "missing"),
])
def test_patterns_re2_cannot_take_are_refused_with_the_reason(pattern, why):
    with pytest.raises(budget.PatternError) as e:
        budget.user_regex(pattern, 100)
    assert why in str(e.value)


def test_xpath_keeps_to_xpath_1_and_its_length():
    namespaces = {"api": "urn:api", "str": "http://exslt.org/strings", "re": "http://exslt.org/regular-expressions"}
    assert budget.check_xpath("api:state", namespaces, 100) == {"api": "urn:api"}
    with pytest.raises(budget.ExpressionError):
        budget.check_xpath("x" * 101, {}, 100)


def test_a_meter_stops_at_its_limit():
    meter = budget.Meter(10, lambda: ValueError("too much"))
    meter.add(10)
    with pytest.raises(ValueError):
        meter.add(1)
