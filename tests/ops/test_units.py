"""Running as a service (issue 31, Units): the systemd units in examples/systemd verified by
systemd's own tools, readiness told over a real $NOTIFY_SOCKET, and a clean stop on SIGTERM
and Ctrl-C that says what keeps running (in a real terminal, under `make serve`)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from cddlm import sdnotify
from cddlm.cli import build_parser
from tests.cli.helpers import cddlm
from tests.conftest import ROOT, LivePortal, kill_leftovers
from tests.debian import ensure_package

UNITS = ROOT / "examples" / "systemd"
SERVICES = ("cddlm-portal.service", "cddlm-host-portal.service")
INSTALLED = "/opt/cddlm/bin/cddlm"


def analyzer() -> str:
    why = ensure_package("systemd", lambda: shutil.which("systemd-analyze") is not None,
                         "systemd-analyze")
    if why:
        pytest.skip(why)
    return shutil.which("systemd-analyze")


def installed_copies(folder: Path) -> list[Path]:
    """The units as installed here: ExecStart names this checkout's cddlm (verify wants a
    program that exists)."""
    program = Path(sys.executable).with_name("cddlm")
    assert program.exists(), program
    out = []
    for name in SERVICES:
        path = folder / name
        path.write_text((UNITS / name).read_text().replace(INSTALLED, str(program)))
        out.append(path)
    return out


def test_systemd_analyze_verifies_the_units(tmp_path):
    tool = analyzer()
    units = installed_copies(tmp_path)
    done = subprocess.run([tool, "verify", *map(str, units)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done
    for unit in units:       # hardened: systemd's own exposure score says "OK" (or better)
        done = subprocess.run([tool, "security", "--offline=true", str(unit)], capture_output=True,
                              text=True, timeout=120)
        score = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout)
        assert score and float(score.group(1)) <= 5.0, done.stdout[-500:]


def test_the_units_command_lines_are_the_commands_own(tmp_path):
    """Every option of each ExecStart is one `cddlm portal serve` takes, with values it accepts."""
    for name in SERVICES:
        text = (UNITS / name).read_text().replace("\\\n", " ")
        line = next(l for l in text.splitlines() if l.startswith("ExecStart="))
        argv = shlex.split(line[len("ExecStart="):].replace("%S", "/var/lib"))
        assert argv[0] == INSTALLED and argv[1:3] == ["portal", "serve"]
        args = build_parser().parse_args(argv[1:])
        assert args.run_as == "cddlm-{user}" and args.users and args.log_format == "json"
        assert args.state_dir.startswith("/var/lib/cddlm")
        unit = dict(l.split("=", 1) for l in text.splitlines() if "=" in l and not l.startswith("#"))
        assert unit["Type"] == "notify" and unit["KillMode"] == "process"
        assert unit["StateDirectory"] == args.state_dir.rsplit("/", 1)[1]
        for hardening in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome"):
            assert unit[hardening] in ("yes", "strict", "read-only"), hardening


def test_the_accounts_file_makes_the_accounts(tmp_path):
    ensure_package("systemd", lambda: shutil.which("systemd-sysusers") is not None, "systemd-sysusers")
    if shutil.which("systemd-sysusers") is None:
        pytest.skip("systemd-sysusers is missing")
    (tmp_path / "etc").mkdir()
    done = subprocess.run(["systemd-sysusers", "--root=%s" % tmp_path, str(UNITS / "cddlm.sysusers")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text()
    assert re.search(r"^cddlm-alice:x:\d+:\d+:[^:]*:/nonexistent:/usr/sbin/nologin$", passwd, re.M)


def test_readiness_and_stopping_are_told_to_systemd(tmp_path, monkeypatch):
    """Type=notify: READY=1 once the portal answers, STOPPING=1 when it is asked to stop, on a
    real unix datagram socket; SIGTERM stops it cleanly (exit 0) with its one line."""
    address = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(60)
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    state = tmp_path / "state"
    state.mkdir()
    lp = LivePortal(state).start()
    try:
        message = listener.recv(4096).decode()
        base = lp.url.rsplit("/cddlm/", 1)[0]
        with urllib.request.urlopen(base + "/readyz", timeout=10) as r:   # it answers by now
            assert r.status == 200
        assert message.splitlines() == ["READY=1", "STATUS=serving at %s" % lp.url]
        lp.proc.send_signal(signal.SIGTERM)
        assert listener.recv(4096) == b"STOPPING=1"
        assert lp.proc.wait(30) == 0
    finally:
        lp.stop()
        listener.close()
    assert lp.log_path.read_text().splitlines()[-1] == \
        "portal stopped (SIGTERM); no component was running"


def test_an_abstract_notify_socket_is_spoken_to_too():
    name = "cddlm-test-%d" % os.getpid()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        listener.settimeout(5)
        assert sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": "@" + name})
        assert listener.recv(100) == b"READY=1"
    assert not sdnotify.notify("READY=1", environ={})
    assert not sdnotify.notify("READY=1", environ={"NOTIFY_SOCKET": "/nonexistent/socket"})


def test_ctrl_c_under_make_serve_stops_cleanly_and_says_what_keeps_running(tmp_path):
    """As a new user runs it: `make serve` in a terminal (tmux), a deploy, then Ctrl-C."""
    why = ensure_package("tmux", lambda: shutil.which("tmux") is not None, "tmux")
    if why:
        pytest.skip(why)
    if not (ROOT / ".venv" / "bin" / "cddlm").exists():
        pytest.skip("make serve runs .venv/bin/cddlm, which `make install` has not made here")
    server = "cddlm-test-%d" % os.getpid()
    tmux = ["tmux", "-L", server]
    script = tmp_path / "run.sh"
    script.write_text('cd %s && make serve ARGS="--port 0 --state-dir %s"\n'
                      % (shlex.quote(str(ROOT)), shlex.quote(str(tmp_path / "state"))))
    subprocess.run(tmux + ["new-session", "-d", "-s", "t", "-x", "200", "-y", "50",
                           "bash --noprofile --norc %s" % script, ";",
                           "set-option", "remain-on-exit", "on"], check=True, timeout=30)
    try:
        screen = wait_screen(tmux, lambda s: "portal ready at " in s)
        url = re.search(r"portal ready at (\S+)", screen).group(1)
        cddlm("deploy", "examples/hello.xml", "--name", "stays", portal=url)
        subprocess.run(tmux + ["send-keys", "-t", "t", "C-c"], check=True, timeout=30)
        log = tmp_path / "state" / "portal.log"
        # the pane's end as tmux knows it (its "Pane is dead" line is not always drawn)
        screen = wait_screen(tmux, lambda s: "portal stopped" in s and pane_dead(tmux),
                             why=lambda: "portal.log ends:\n" + log.read_text()[-1500:])
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True, timeout=30)
        kill_leftovers(tmp_path)
    assert ("portal stopped (Ctrl-C); 2 components of 1 application keep running, re-adopted "
            "at the next start") in screen, screen
    assert "make: ***" not in screen and "Traceback" not in screen and "Interrupt" not in screen, screen


APART = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="a" type="process"><attribute name="argv"><item>sleep</item><item>600</item></attribute></component>
  <component name="b" type="process"><attribute name="argv"><item>sleep</item><item>600</item></attribute></component>
  <group name="g"><member>a</member><member>b</member></group>
  <policy type="anti-collocation" level="host" group="g" hard="true"/>
</application>
"""


def test_ctrl_c_stops_cleanly_after_a_placement_by_cp_sat(tmp_path):
    """CP-SAT set SIGINT to its default action after each solve: a portal that had placed an
    application with a policy then died at Ctrl-C at once, saying nothing (`make cluster`)."""
    descriptor = tmp_path / "apart.xml"
    descriptor.write_text(APART)
    state = tmp_path / "state"
    state.mkdir()
    lp = LivePortal(state, extra=["--datacenter", "examples/datacenter.yaml"]).start()
    try:
        cddlm("deploy", str(descriptor), portal=lp.url)
        audit = cddlm("audit", "apart", portal=lp.url).stdout
        assert "cp-sat" in audit, audit          # (what the portal must survive)
        lp.proc.send_signal(signal.SIGINT)
        assert lp.proc.wait(30) == 0
    finally:
        lp.stop()
        kill_leftovers(tmp_path)
    assert lp.log_path.read_text().splitlines()[-1] == (
        "portal stopped (Ctrl-C); 2 components of 1 application keep running, re-adopted at "
        "the next start")


def pane_dead(tmux: list[str]) -> bool:
    return subprocess.run(tmux + ["display-message", "-p", "-t", "t", "#{pane_dead}"],
                          capture_output=True, text=True, timeout=30).stdout.strip() == "1"


def wait_screen(tmux: list[str], done, timeout: float = 60.0, why=lambda: "") -> str:
    deadline = time.monotonic() + timeout
    while True:
        screen = subprocess.run(tmux + ["capture-pane", "-p", "-t", "t", "-S", "-200"],
                                capture_output=True, text=True, timeout=30).stdout
        if done(screen):
            return screen
        if time.monotonic() > deadline:
            raise AssertionError("the terminal never showed what was awaited:\n%s\n%s"
                                 % (screen, why()))
        time.sleep(0.1)
