"""`make cluster` (examples/multihost/cluster.sh) as a user runs it: its host portals are ready
before the front starts, the front's datacenter names the ports HOST_PORT chose, a host portal
that cannot start stops the others with its reason, and Ctrl-C stops every portal, exit 0."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cli.helpers import cddlm
from tests.conftest import ROOT, free_port, kill_leftovers, ready_url

SCRIPT = ROOT / "examples" / "multihost" / "cluster.sh"


@pytest.fixture
def state():
    """A folder for STATE that the host portals' components (nobody, as root) may pass through,
    as /tmp/cddlm-cluster is: pytest's tmp_path is below a folder of mode 0700."""
    folder = Path(tempfile.mkdtemp(prefix="cddlm-cluster-test-"))
    folder.chmod(0o711)
    yield folder / "cluster"
    shutil.rmtree(folder, ignore_errors=True)


def host_ports() -> int:
    """A first port N with N, N+1, N+2 free on 127.0.0.2, .3, .4."""
    while True:
        base, held = free_port(), []
        try:
            for i in range(3):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.%d" % (i + 2), base + i))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()


def start(state: Path, host_port: int) -> tuple[subprocess.Popen, int]:
    front = free_port()
    env = dict(os.environ, STATE=str(state), FRONT_PORT=str(front),
               HOST_PORT=str(host_port), CDDLM=str(Path(sys.executable).with_name("cddlm")))
    # its own process group, as a terminal's foreground job (Ctrl-C reaches all of it)
    proc = subprocess.Popen(["sh", str(SCRIPT)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    return proc, front


def portals_of(state: Path) -> list[int]:
    """The pids of portals serving under this test's state folder."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and str(state).encode() in Path("/proc/%s/cmdline" % entry).read_bytes():
                out.append(int(entry))
        except OSError:
            continue
    return out


def stop(proc: subprocess.Popen, state: Path) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in portals_of(state):
        os.kill(pid, signal.SIGKILL)


def test_ctrl_c_stops_every_portal_and_is_no_error(state):
    """...and the front, whose placement ran CP-SAT (which had left SIGINT at its default action:
    the front died at once, silent), says what keeps running on its hosts."""
    base = host_ports()
    proc, front = start(state, base)
    try:
        url = ready_url(proc, timeout=120)
        assert url == "http://127.0.0.1:%d/cddlm/portal" % front
        hosts = cddlm("host", "ls", portal=url).stdout
        for i in range(3):      # the datacenter names the ports HOST_PORT chose, and each answers
            assert "h%d    http://127.0.0.%d:%d/cddlm/portal  up" % (i + 1, i + 2, base + i) in hosts, hosts
        cddlm("deploy", "examples/multihost/spread.xml", portal=url)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert portals_of(state) == []
    finally:
        stop(proc, state)
        kill_leftovers(state)
    assert ("portal stopped (Ctrl-C); 5 components of 1 application keep running, re-adopted at "
            "the next start") in err.decode().splitlines(), err.decode()


def test_a_host_portal_that_cannot_start_stops_the_others_and_says_why(state):
    base = host_ports()
    with socket.socket() as taken:      # another program holds h2's port
        taken.bind(("127.0.0.3", base + 1))
        taken.listen()
        proc, _ = start(state, base)
        try:
            _, err = proc.communicate(timeout=120)
        finally:
            stop(proc, state)
    assert proc.returncode == 1
    lines = err.decode().splitlines()
    assert lines[0] == "host portal h2 did not start (%s):" % (state / "h2" / "out.log")
    assert "port %d on 127.0.0.3 is already in use" % (base + 1) in lines[1]
    assert lines[-1] == "(HOST_PORT=N puts the three host portals on ports N to N+2)"
    assert portals_of(state) == []
