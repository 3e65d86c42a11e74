"""The pure parts of the command line and of what it reads: --portal forms, option names, the
progress line and tables, the runner's log reader, and what a readiness wait is described as."""

from __future__ import annotations

import io
import os

import pytest

from cddlm.application.enactment.local import LocalRunner, cap_lines, waiting
from cddlm.cli import common, output
from cddlm.lang.model import Lazy


@pytest.mark.parametrize("given, endpoint", [
    ("http://127.0.0.1:8080/cddlm/portal", "http://127.0.0.1:8080/cddlm/portal"),
    ("http://127.0.0.1:8080/cddlm/portal/", "http://127.0.0.1:8080/cddlm/portal"),
    ("http://127.0.0.1:8080/cddlm/portal?wsdl", "http://127.0.0.1:8080/cddlm/portal"),
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/cddlm/portal"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/cddlm/portal"),
    ("127.0.0.1:8080", "http://127.0.0.1:8080/cddlm/portal"),
    ("portal.example:443/prefix/", "http://portal.example:443/prefix/cddlm/portal"),
    ("https://h/prefix/cddlm/portal", "https://h/prefix/cddlm/portal"),
    ("[::1]:8080", "http://[::1]:8080/cddlm/portal"),
])
def test_portal_forms(given, endpoint):
    assert common.endpoint(given) == endpoint


@pytest.mark.parametrize("bad", ["ftp://h/x", "http://", ""])
def test_portal_that_is_no_url(bad):
    with pytest.raises(common.UsageError):
        common.endpoint(bad)


def test_options_are_uris():
    assert common.option_pairs(["urn:cddlm:option:validate-only=true", "urn:x:n=12",
                                "http://o.example/t=a=b"]) == {
        "urn:cddlm:option:validate-only": True, "urn:x:n": 12, "http://o.example/t": "a=b"}
    with pytest.raises(common.UsageError) as e:
        common.option_pairs(["validate-only=true"])
    assert e.value.hint == "did you mean urn:cddlm:option:validate-only?"
    with pytest.raises(common.UsageError) as e:
        common.option_pairs(["frobnicate=1"])
    assert "urn:cddlm:option:client-token" in e.value.hint
    for bad in (["urn:a=1", "urn:a=2"], ["urn:a"], ["=1"]):
        with pytest.raises(common.UsageError):
            common.option_pairs(bad)


def status(state: str, *health: dict) -> dict:
    return {"state": state, "health": list(health)}


def test_progress_on_a_pipe_writes_the_last_line_and_one_a_while_if_something_changed():
    web = {"path": "web", "type": "process", "state": "starting", "waitingFor": "log /x/",
           "waited": 1.0, "timeout": 30.0}
    out = io.StringIO()
    p = output.Progress("app", out)                           # a quick wait: what a terminal
    p(status("initialized", web))                             # shows at its end, no more
    p(status("running", dict(web, state="running", waitingFor=None)))
    p.done()
    (line,) = out.getvalue().splitlines()
    assert line.endswith("] app: running (1 running)")
    out = io.StringIO()
    p = output.Progress("app", out, every=0.0)                # a long one: a line a while
    p(status("initialized", web))
    p(status("initialized", dict(web, waited=2.0)))           # only the clock moved
    p(status("running", dict(web, state="running", waitingFor=None)))
    p.done()                                                  # written already: not twice
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].endswith("] app: initialized (1 starting); waiting for web: log /x/ (1s of 30s)")
    assert lines[1].endswith("] app: running (1 running)")


def test_progress_on_a_terminal_redraws_in_place_at_every_poll():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    p = output.Progress("app", out)
    web = {"path": "web", "type": "process", "state": "starting", "waitingFor": "tcp 80",
           "waited": 1.0, "timeout": 5.0}
    compound = {"path": "site", "type": "compound", "state": "starting"}
    for waited in (1.0, 2.0, 3.0):
        p(status("initialized", dict(web, waited=waited), compound))
    p.done()
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 3 and text.endswith("(3s of 5s)\n")
    assert "(1 starting)" in text                              # containers are not counted


def test_table_pads_columns_and_drops_empty_ones():
    out = io.StringIO()
    output.table(("A", "EMPTY", "B"), [("x", None, 1), ("longer", "", None)], out)
    assert out.getvalue() == "A       B\nx       1\nlonger\n"


def test_waiting_in_words():
    assert waiting({"log": "Serving HTTP"}, 10.0, 22.5) == {
        "waitingFor": "log /Serving HTTP/", "waited": 12.5, "timeout": 30.0}
    assert waiting({"tcp": 8080, "timeout": "60"}, 5.0, 4.0)["waitingFor"] == "tcp 8080"
    w = waiting({"http": Lazy("ref", "web/url"), "timeout": "x"}, 0, 1)
    assert w["waitingFor"] == "http ${web/url}" and w["timeout"] == 30.0


def test_log_reader_tail_follow_and_refusals(tmp_path):
    runner = LocalRunner("h", str(tmp_path))
    folder = runner.component_dir("urn:uuid:a", "web")
    os.makedirs(folder)
    log = os.path.join(folder, "stdout.log")
    with open(log, "w") as f:
        f.write("one\ntwo\nthr")
    assert runner.log_read("urn:uuid:a", "web", "stdout", lines=2) == (["two", "thr"], 11)
    assert runner.log_read("urn:uuid:a", "web", "stdout", offset=0) == (["one", "two"], 8)
    assert runner.log_read("urn:uuid:a", "web", "stdout", offset=8) == ([], 8)   # a partial line waits
    with open(log, "a") as f:
        f.write("ee\nfour\n")
    assert runner.log_read("urn:uuid:a", "web", "stdout", offset=8) == (["three", "four"], 19)
    assert runner.log_read("urn:uuid:a", "web", "stdout", offset=99) == (
        ["one", "two", "three", "four"], 19)                   # shorter now: it was replaced
    # at most max_bytes per read; a line longer than that comes in pieces
    with open(log, "w") as f:
        f.write("x" * 10 + "\n")
    assert runner.log_read("urn:uuid:a", "web", "stdout", offset=0, max_bytes=4) == (["xxxx"], 4)
    assert runner.log_read("urn:uuid:a", "web", "stdout", lines=5, max_bytes=4) == ([], 11)
    # only a regular file, never through a link the component put there
    secret = tmp_path / "secret"
    secret.write_text("password\n")
    os.unlink(log)
    os.symlink(secret, log)
    assert runner.log_read("urn:uuid:a", "web", "stdout", lines=5) == ([], 0)
    os.unlink(log)
    os.mkfifo(log)
    assert runner.log_read("urn:uuid:a", "web", "stdout", lines=5) == ([], 0)   # does not block
    assert runner.log_read("urn:uuid:a", "nothing", "stderr", offset=7) == ([], 7)


def test_log_lines_are_capped_in_lines_and_bytes():
    found = ["one", "two", "thr\u00e9e", "four"]        # 4, 4, 7 and 5 bytes with their newlines
    # a tail: the last lines, as many as asked and as fit
    assert cap_lines(found, 100, 2) == (["thr\u00e9e", "four"], 12)
    assert cap_lines(found, 100, 10) == (found, 20)
    assert cap_lines(found, 12, 10) == (["thr\u00e9e", "four"], 12)
    assert cap_lines(found, 11, 10) == (["four"], 5)     # a line that does not fit ends it
    assert cap_lines(found, 4, 10) == ([], 0)            # the last line alone is too long
    assert cap_lines(found, 100, 0) == ([], 0)
    # after an offset: the first lines that fit, and how far into the log they reach
    assert cap_lines(found, 100) == (found, 20)
    assert cap_lines(found, 14) == (["one", "two"], 8)
    assert cap_lines(found, 15) == (["one", "two", "thr\u00e9e"], 15)
    # a first line longer than the cap comes in pieces, never cut inside a character
    assert cap_lines(["x\u00e9\u00e9\u00e9", "y"], 4) == (["x\u00e9"], 3)
    assert cap_lines(["\u00e9\u00e9\u00e9"], 4) == (["\u00e9\u00e9"], 4)
    assert cap_lines([], 4) == ([], 0)
