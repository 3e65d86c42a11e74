"""The portal's logs (issue 31, Logs): ``--log-format json`` writes one object a line to
portal.log and stderr, with a request's fields; audit lines keep stable keys; at the default
level the terminal shows the banner and warnings, not a line per request."""

from __future__ import annotations

import json
import re
import signal

from tests.cli.helpers import cddlm

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
AUDIT_KEYS = {"action", "principal", "address", "application", "detail"}


def objects(text: str) -> list[dict]:
    """Every line as JSON (a line that is not fails the test, saying which)."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            raise AssertionError("not a JSON line: %r" % line) from None
    return out


def test_json_lines_carry_the_requests_fields_and_audit_keys(live_portal):
    lp = live_portal(extra=["--log-format", "json", "--log-level", "info"])
    cddlm("deploy", "examples/hello.xml", "--name", "logged", portal=lp.url)
    cddlm("status", "no-such-thing", check=False, portal=lp.url)
    cddlm("terminate", "logged", portal=lp.url)
    lp.proc.send_signal(signal.SIGTERM)
    assert lp.proc.wait(30) == 0
    for text in ((lp.state_dir / "portal.log").read_text(), lp.log_path.read_text()):
        lines = objects(text)
        for line in lines:
            assert {"time", "level", "logger", "message"} <= set(line), line
            assert TIME.match(line["time"]) and line["level"] in ("INFO", "WARNING", "ERROR")
        audit = [line for line in lines if line["logger"] == "cddlm.audit"]
        assert [a["action"] for a in audit] == ["create", "initialize", "run", "terminate"]
        created = audit[0]
        app_id = created["application"]
        assert app_id.startswith("urn:uuid:") and created["detail"] == "logged"
        for a in audit:
            assert AUDIT_KEYS <= set(a) and a["principal"] == "admin" and a["address"] == "127.0.0.1"
            assert a["application"] == app_id
        # a request's own fields: the operation it answers, and the application once named
        assert created["operation"] == "create"
        assert audit[1]["operation"] == "initialize" and audit[3]["operation"] == "terminate"
        assert any(line["message"].startswith("portal ready at ") for line in lines)
        assert lines[-1]["message"] == "stopped; the components it started keep running" or \
            any(line["message"].startswith("portal stopped (SIGTERM)") for line in lines)


def test_the_default_terminal_shows_the_banner_not_a_line_per_request(live_portal):
    lp = live_portal()
    cddlm("deploy", "examples/hello.xml", "--name", "quiet", portal=lp.url)
    cddlm("terminate", "quiet", portal=lp.url)
    lp.proc.send_signal(signal.SIGTERM)
    assert lp.proc.wait(30) == 0
    terminal = lp.log_path.read_text().splitlines()
    assert terminal[0].startswith("cddlm ") and terminal[0].endswith(" portal")
    assert terminal[-1] == "portal stopped (SIGTERM); no component was running"
    assert not [line for line in terminal if "cddlm.audit" in line or " INFO " in line], terminal
    kept = (lp.state_dir / "portal.log").read_text()      # the file keeps the audit, as text
    assert re.search(r" INFO cddlm\.audit: admin from 127\.0\.0\.1: create urn:uuid:\S+ \(quiet\)$",
                     kept, re.M), kept


def test_json_fields_beside_the_message_are_masked_as_it_is():
    """A descriptor's secret quoted in an audit's detail (a terminate's reason, say) is masked
    there too, not only in the message."""
    import io
    import logging
    from cddlm import logfields
    from cddlm.application import secrets
    from cddlm.cli.portal import masking
    from cddlm.lang.model import Component, Deployment
    held = Deployment([Component("db", "process", {"env": {"PW": "pw-90817x"}})],
                      secrets={"db/env/PW"})
    secrets.of(held)        # the portal holds the tree: its secrets are masked in log lines
    out = io.StringIO()
    hide = secrets.LogFilter()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logfields.formatter("json", masking(hide)))
    handler.addFilter(hide)
    logger = logging.getLogger("cddlm.audit.test-json-masks")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.info("admin from -: terminate a (%s)", "because pw-90817x leaked",
                    extra={"audit": {"action": "terminate", "principal": "admin", "address": None,
                                     "application": "a", "detail": "because pw-90817x leaked"}})
    finally:
        logger.removeHandler(handler)
    line = json.loads(out.getvalue())
    assert "pw-90817x" not in out.getvalue()
    assert line["detail"] == "because ******** leaked" and line["action"] == "terminate"
    del held
