"""Users' XPath in helper processes: the time and result budgets, busy helpers, XPath 1.0 only."""

from __future__ import annotations

import threading
import time

import pytest

from cddlm.errors import Busy, InvalidQueryExpression, QueryEvaluationError
from cddlm.xpathsafe import BudgetExceeded, XPathPool

DOC = b"<r>" + b"".join(b'<a n="%d"><b>%d</b></a>' % (i, i) for i in range(30)) + b"</r>"
COSTLY = "count(%s) > 0" % ("//*[count(" * 4 + "//*" + ") > 0]" * 4)


@pytest.fixture
def pool():
    p = XPathPool(1, seconds=0.5, wait=0.05, max_result_bytes=2000)
    yield p
    p.close()


def test_results_of_every_kind(pool):
    assert pool.query(DOC, "count(//a)", {}).value == 30
    assert pool.query(DOC, "//a[@n='3']/b/text()", {}).items == (("text", "3"),)
    assert pool.query(DOC, "//a[@n='4']", {}).items == (("element", '<a n="4"><b>4</b></a>'),)
    assert pool.query(DOC, "boolean(//zz)", {}).value is False


def test_a_costly_query_is_stopped_at_its_budget_and_the_helper_replaced(pool):
    # the helper started first: its start (a Python, niced, slow on a loaded machine) is
    # not the budget's (test_a_helper_slow_to_start_does_not_spend_the_budget)
    assert pool.query(DOC, "1", {}).value == 1
    started = time.monotonic()
    with pytest.raises(BudgetExceeded):
        pool.query(DOC, COSTLY, {})
    assert time.monotonic() - started < 3
    assert pool.query(DOC, "count(//b)", {}).value == 30        # a new helper answers


def test_a_query_finding_no_free_helper_is_busy(pool):
    slow = threading.Thread(target=lambda: pytest.raises(BudgetExceeded, pool.query, DOC, COSTLY, {}))
    slow.start()
    # the one helper taken by the slow query (for its start and its 0.5 s): awaited, where a
    # fixed 0.2 s assumed its thread had run by then
    deadline = time.monotonic() + 30
    while pool._free.qsize():
        assert time.monotonic() < deadline, "the slow query never took the helper"
        time.sleep(0.005)
    with pytest.raises(Busy):
        pool.query(DOC, "1", {})
    slow.join()


def test_results_too_large_and_expressions_refused_before_a_helper(pool):
    with pytest.raises(QueryEvaluationError) as e:
        pool.query(DOC, "//*", {})
    assert "larger than 2000 bytes" in e.value.message
    for bad in ("//a[", "x" * 5000, "str:padding(10, 'x')"):
        with pytest.raises(InvalidQueryExpression):
            pool.query(DOC, bad, {"str": "http://exslt.org/strings"})


def test_a_helper_slow_to_start_does_not_spend_the_budget(pool, tmp_path, monkeypatch):
    """On a busy machine a new helper (Python, niced) took longer to start than a message
    filter's 0.5 s, and the filter failed: the budget begins once the helper is ready."""
    import sys
    from cddlm import xpathsafe
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 1.5\nexec %s \"$@\"\n" % sys.executable)
    slow.chmod(0o755)
    monkeypatch.setattr(xpathsafe.sys, "executable", str(slow))
    started = time.monotonic()
    assert pool.query(DOC, "count(//a)", {}).value == 30
    assert time.monotonic() - started >= 1.5      # it did wait for the start, past the budget
