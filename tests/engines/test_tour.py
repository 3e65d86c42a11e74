"""The portal of `make ssh-cluster` and `make slurm-cluster` (tests/engines/tour.py): killed
with `kill -9`, it is started again on the same state and its hosts stay (so the tour shows
what it re-adopted); Ctrl-C stops it and then closes the hosts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.conftest import ROOT, ready_url

PROGRAM = """
import sys
from tests.engines.tour import serve
sys.exit(serve(["--port", "0", "--state-dir", sys.argv[1]], lambda: print("hosts closed", flush=True)))
"""


def test_a_killed_portal_is_started_again_and_ctrl_c_closes_the_hosts(tmp_path):
    tour = subprocess.Popen([sys.executable, "-c", PROGRAM, str(tmp_path / "state")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        ready_url(tour, timeout=60)
        first = portal_pid(tour.pid)
        os.kill(first, signal.SIGKILL)
        ready_url(tour, timeout=60)      # its second "portal ready at"
        assert portal_pid(tour.pid) != first
        tour.send_signal(signal.SIGINT)
        out, err = tour.communicate(timeout=60)
    finally:
        if tour.poll() is None:
            tour.kill()
            tour.wait()
    assert tour.returncode == 0, err
    assert out.decode().splitlines()[-1] == "hosts closed"
    said = err.decode().splitlines()
    assert ("the portal was killed (SIGKILL): starting it again, as a supervisor would; the hosts "
            "stay (Ctrl-C stops everything)") in said
    assert said[-1] == "removing the test hosts, and what runs on them"


def portal_pid(parent: int) -> int:
    children = open("/proc/%d/task/%d/children" % (parent, parent)).read().split()
    assert len(children) == 1, children
    return int(children[0])
