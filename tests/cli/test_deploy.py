"""``cddlm deploy`` and ``cddlm run`` (issue 13): all or nothing, names, progress, and what a
timeout, a failure or Ctrl-C leaves behind, against a live portal."""

from __future__ import annotations

import os
import pty
import re
import signal
import time

import pytest

from cddlm.client import Portal
from tests.cli.helpers import ROOT, cddlm, descriptor, pid_alive, popen, process

SLOW_READY = {"log": "never printed", "timeout": "8"}


def names(url: str) -> list[str]:
    """The names of the applications (read in process: what is checked here is the portal)."""
    portal = Portal(url)
    return [(el.text or "").strip() for app in portal.applications()
            for el in app.property_many("name")]


def test_mistakes_found_before_create_create_nothing(shared_portal, tmp_path):
    url = shared_portal.url
    before = names(url)
    bad = tmp_path / "bad.xml"
    bad.write_text('<application xmlns="urn:cddlm:lang:components:1">\n'
                   '<component name="x" type="process">\n</application>\n')
    r = cddlm("deploy", str(bad), portal=url, check=False)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == cddlm("lang", "resolve", str(bad), check=False).stderr
    assert "not-well-formed: %s:3: " % bad in r.stderr
    r = cddlm("deploy", "examples/webapp.cdl", "-p", "db.port", portal=url, check=False)
    assert r.returncode == 2 and "-p expects KEY=VALUE, got 'db.port'" in r.stderr
    r = cddlm("deploy", "examples/hello.xml", "--option", "validate-only=true", portal=url, check=False)
    assert r.returncode == 2 and "did you mean urn:cddlm:option:validate-only?" in r.stderr
    r = cddlm("deploy", str(tmp_path / "missing.xml"), portal=url, check=False)
    assert r.returncode == 1 and "cannot read" in r.stderr
    typo = descriptor(tmp_path / "typo.xml", process("x", ["sleep", "1"]).replace("process", "proces", 1))
    r = cddlm("deploy", str(typo), portal=url, check=False)
    assert r.returncode == 1 and "unknown-type" in r.stderr
    assert names(url) == before        # nothing was created, no name is held


def test_the_same_bad_cdl_names_the_same_file_and_line_as_lang_resolve(shared_portal, tmp_path):
    bad = tmp_path / "badref.cdl"
    text = (ROOT / "examples" / "webapp.cdl").read_text().replace(
        'cdl:ref="/db/env/PGPORT"', 'cdl:ref="/db/env/NOPE"')
    bad.write_text(text)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "/db/env/NOPE" in l)
    resolved = cddlm("lang", "resolve", str(bad), check=False)
    deployed = cddlm("deploy", str(bad), portal=shared_portal.url, check=False)
    assert resolved.returncode == deployed.returncode == 1
    assert deployed.stderr == resolved.stderr and ("%s:%d" % (bad, line)) in deployed.stderr
    assert "badref" not in names(shared_portal.url)


def test_a_fault_from_initialize_removes_the_application(shared_portal, tmp_path):
    """A problem only the portal sees (here: a host it does not have) leaves nothing behind."""
    pinned = descriptor(tmp_path / "pinned.xml", process(
        "x", ["sleep", "30"], extra='<attribute name="host">elsewhere</attribute>'))
    r = cddlm("deploy", str(pinned), portal=shared_portal.url, check=False)
    assert r.returncode == 1 and "Fault" in r.stderr and "created pinned" in r.stdout
    assert "pinned" not in names(shared_portal.url)
    r = cddlm("deploy", "examples/hello.xml", "--name", "pinned", portal=shared_portal.url)
    assert "pinned is running" in r.stdout             # the name was not held
    cddlm("terminate", "pinned", portal=shared_portal.url)


def test_names_default_to_the_file_stem_and_every_form_of_id_finds_the_application(shared_portal):
    url = shared_portal.url
    first = cddlm("deploy", "examples/hello.xml", "--settle", "0", portal=url).stdout
    second = cddlm("deploy", "examples/hello.xml", "--settle", "0", portal=url).stdout
    created = re.search(r"created (\S+) \((urn:uuid:\S+)\)", second)
    assert first.startswith("created hello (urn:uuid:") and created.group(1) == "hello-2"
    app_id = created.group(2)
    bare = app_id[len("urn:uuid:"):]
    for form in (app_id, bare, bare.upper()[:13]):
        assert "id:      %s" % app_id in cddlm("status", form, portal=url).stdout, form
    listing = cddlm("ls", portal=url).stdout
    assert re.search(r"^hello-2 +%s +running" % app_id, listing, re.M)
    ids = [line.split()[1] for line in listing.splitlines()[1:]]
    common = os.path.commonprefix([i[len("urn:uuid:"):] for i in ids if i != app_id] + [bare])
    if len(common) >= 4:           # a prefix of several ids is refused, naming them
        r = cddlm("status", common, portal=url, check=False)
        assert r.returncode == 1 and "is the beginning of" in r.stderr
    r = cddlm("deploy", "examples/hello.xml", "--name", "hello", portal=url, check=False)
    assert r.returncode == 1 and "already named 'hello'" in r.stderr and "--name" in r.stderr
    cddlm("terminate", "hello", portal=url)
    assert "created hello (" in cddlm("deploy", "examples/hello.xml", "--settle", "0", "--no-run",
                                      portal=url).stdout   # a terminated one frees its name
    for name in ("hello", "hello-2"):
        cddlm("destroy", name, "--force", portal=url)


def test_no_run_then_run(shared_portal):
    url = shared_portal.url
    r = cddlm("deploy", "examples/hello.xml", "--name", "later", "--no-run", portal=url)
    assert "waiting" not in r.stdout
    assert r.stdout.splitlines()[-1] == "later is initialized"
    assert "state:   initialized" in cddlm("status", "later", portal=url).stdout
    r = cddlm("run", "later", "--settle", "0", portal=url)
    assert r.stdout.splitlines()[-1] == "later is running"
    r = cddlm("run", "later", portal=url, check=False)
    assert r.returncode == 1 and "WrongStateFault" in r.stderr
    cddlm("terminate", "later", portal=url)


def test_a_timeout_says_what_still_runs_and_how_to_stop_it(shared_portal, tmp_path):
    url = shared_portal.url
    slow = descriptor(tmp_path / "slow.xml", process("web", ["sleep", "300"], SLOW_READY),
                      process("worker", ["sleep", "300"]))
    started = time.monotonic()
    r = cddlm("deploy", str(slow), "--timeout", "2", portal=url, check=False)
    assert r.returncode == 4 and time.monotonic() - started < 15
    assert r.stderr.count("\n") == 1, r.stderr
    assert re.match(r"cddlm: slow is still initialized after 2s, waiting for web: log /never "
                    r"printed/ \(\d+s of 8s\); still running: .*worker \(pid \d+\)", r.stderr)
    assert "`cddlm terminate slow` stops it" in r.stderr
    # the application goes on (it is not half-removed): it fails when its readiness times out
    assert "slow" in names(url)
    worker = int(re.search(r"worker \(pid (\d+)\)", r.stderr).group(1))
    assert pid_alive(worker)
    cddlm("terminate", "slow", portal=url)
    assert not pid_alive(worker)


def test_cleanup_on_failure_leaves_nothing(shared_portal, tmp_path):
    url = shared_portal.url
    slow = descriptor(tmp_path / "gone.xml", process("web", ["sleep", "300"], SLOW_READY))
    r = cddlm("deploy", str(slow), "--timeout", "1", "--cleanup-on-failure", portal=url, check=False)
    assert r.returncode == 4 and "gone was removed" in r.stderr
    failing = descriptor(tmp_path / "dies.xml", process("x", ["sh", "-c", "echo broken >&2; exit 7"]),
                         process("y", ["sleep", "300"]))
    r = cddlm("deploy", str(failing), "--cleanup-on-failure", portal=url, check=False)
    assert r.returncode == 1 and "broken" in r.stderr and "dies was removed" in r.stderr
    assert "gone" not in names(url) and "dies" not in names(url)


def test_a_failure_prints_stderr_and_what_is_still_running(shared_portal, tmp_path):
    failing = descriptor(tmp_path / "fails.xml",
                         # x fails a moment after both started, so y has its pid by then (and
                         # within the settle time deploy watches for a failure)
                         process("x", ["sh", "-c", "sleep 1; echo broken >&2; exit 7"]),
                         process("y", ["sleep", "300"]))
    r = cddlm("deploy", str(failing), "--settle", "10", portal=shared_portal.url, check=False)
    assert r.returncode == 1 and "exited with status 7" in r.stderr and "broken" in r.stderr
    assert re.search(r"fails is failed; still running: y \(pid \d+\)", r.stderr)
    cddlm("terminate", "fails", portal=shared_portal.url)


@pytest.mark.parametrize("cleanup", [False, True])
def test_ctrl_c_says_what_still_runs_or_cleans_up(shared_portal, tmp_path, cleanup):
    url = shared_portal.url
    name = "interrupted-%d" % cleanup
    slow = descriptor(tmp_path / "slow.xml", process("web", ["sleep", "300"], SLOW_READY),
                      process("worker", ["sleep", "300"]))
    args = ["deploy", str(slow), "--name", name] + (["--cleanup-on-failure"] if cleanup else [])
    p = popen(*args, portal=url)
    line = p.stdout.readline()
    assert line.startswith("created %s" % name)
    app = Portal(url).lookup(name)                  # Ctrl-C while deploy waits for web
    deadline = time.monotonic() + 30
    while not any(h.get("waitingFor") for h in app.ping()["health"]):
        assert time.monotonic() < deadline and p.poll() is None, p.stderr.read()
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err
    if cleanup:
        assert "%s was removed" % name in err and name not in names(url)
    else:
        assert err.startswith("cddlm: interrupted; still running: ") and "worker (" in err
        assert "`cddlm terminate %s`" % name in err and name in names(url)
        cddlm("terminate", name, portal=url)


def test_progress_says_what_it_waits_for_and_ticks_on_a_terminal(shared_portal, tmp_path):
    url = shared_portal.url
    late = descriptor(tmp_path / "late.xml", process(
        "web", ["sh", "-c", "sleep 2; echo Serving HTTP; sleep 300"], {"log": "Serving HTTP"}))
    # not a terminal (a pipe, a log): what a terminal keeps at the end, the last line (a wait
    # longer than 10 s also writes a line every 10 s: tests/cli/test_units.py)
    r = cddlm("deploy", str(late), "--settle", "0", portal=url)
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith("created late"), lines
    assert re.match(r"\[ +\d+\.\ds\] late: running \(1 running\)$", lines[1]), lines
    assert float(lines[1][1:].split("s]")[0]) >= 1.5 and lines[-1] == "late is running"
    cddlm("terminate", "late", portal=url)
    # a terminal: the line is redrawn in place, and its clocks tick
    controller, terminal = pty.openpty()
    p = popen("deploy", str(late), "--name", "late-tty", "--settle", "0", portal=url,
              stdout=terminal)
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    p.wait(60)
    os.close(controller)
    text = seen.decode()
    redraws = re.findall(r"\r\x1b\[K\[ *(\d+\.\d)s\] late-tty: initialized[^\r]*?\((\d+)s of 30s\)", text)
    assert len(redraws) >= 5, text
    assert float(redraws[-1][0]) > float(redraws[0][0]) + 1 and int(redraws[-1][1]) >= 1
    assert "late-tty is running" in text
    Portal(url).lookup("late-tty").terminate()


def test_terminate_and_destroy_force_do_not_wait_for_a_readiness_wait(shared_portal, tmp_path):
    url = shared_portal.url
    slow = descriptor(tmp_path / "waits.xml", process("web", ["sleep", "300"],
                                                      {"log": "never printed", "timeout": "60"}))
    for name, command in (("waits", ["terminate", "waits"]),
                          ("waits-2", ["destroy", "waits-2", "--force"])):
        assert cddlm("deploy", str(slow), "--name", name, "--timeout", "1", portal=url,
                     check=False).returncode == 4
        # done in seconds, not after the readiness wait (60 s): 30 s leave a loaded machine
        # room (the whole test took 9.8 s beside two busy loops, against 10 s for each command)
        started = time.monotonic()
        r = cddlm(*command, "--timeout", "30", portal=url, check=False)
        assert r.returncode == 0 and time.monotonic() - started < 30, r.stderr
