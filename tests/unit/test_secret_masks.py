"""Secret strings masked by what a text contains (issue 27, item 10): a tree's secret strings,
a concealer of them, an error masked in place, and the log filter that masks every line with
the secrets of the trees the portal holds."""

from __future__ import annotations

import gc
import io
import logging

import pytest

from cddlm.application import secrets
from cddlm.errors import DescriptorError
from cddlm.lang.model import Component, Deployment, Lazy


def tree() -> Deployment:
    web = Component("web", "process", {
        "argv": ["server", "--port", 8080],
        "env": {"PGPASSWORD": "pw-2291x", "DSN": "user:pw-2291x@db", "OPEN": "plain"},
        "readiness": {"tcp": Lazy("ref", "db/port")}})
    return Deployment([web], secrets={"web/env/PGPASSWORD", "web/env/DSN", "web/readiness"},
                      secret_values={"raw-value-77"})


def test_a_trees_secret_strings_are_its_values_at_secret_paths_and_those_it_was_told():
    t = tree()
    assert t.secret_strings() == {"pw-2291x", "user:pw-2291x@db", "raw-value-77"}
    assert t.secret_strings() is t.secret_strings()          # once per tree
    conceal = secrets.of(t)
    assert conceal is secrets.of(t)
    # the longer first: a value that holds another is masked whole
    assert conceal("dsn user:pw-2291x@db, pw pw-2291x, raw-value-77 plain") == \
        "dsn ********, pw ********, ******** plain"
    assert conceal.value({"a": ["x pw-2291x", 3]}) == {"a": ["x ********", 3]}
    assert not secrets.of(Deployment([Component("a", "file")])) and secrets.NOTHING("t") == "t"


def test_an_error_is_masked_in_place():
    e = DescriptorError("'127.0.0.1:pw-2291x' has no valid port", kind="invalid-attribute",
                        path="web/pw-2291x")
    with pytest.raises(DescriptorError) as raised, secrets.concealing(tree(), {"other-secret"}):
        raise e
    assert raised.value is e and "pw-2291x" not in str(e) and "********" in e.message
    assert e.path == "web/********" and e.args == (e.message,)


def test_log_lines_are_masked_while_the_portal_holds_the_tree():
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(secrets.LogFilter())
    logger = logging.getLogger("cddlm.test.secret-masks")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        held = tree()
        short = Deployment([Component("a", "process", {"argv": ["x"]})], secrets={"a/argv"})
        secrets.of(held), secrets.of(short)      # a three-letter secret is not masked in logs
        logger.warning("component failed: %s", "user:pw-2291x@db, x")
        try:
            raise ValueError("bad value 'raw-value-77'")
        except ValueError:
            logger.exception("unexpected")
        del held
        gc.collect()
        logger.warning("later: pw-2291x")       # the tree is gone: its secrets with it
    finally:
        logger.removeHandler(handler)
    text = out.getvalue()
    assert "component failed: ********, x" in text
    assert "ValueError: bad value '********'" in text and "raw-value-77" not in text
    assert "later: pw-2291x" in text
