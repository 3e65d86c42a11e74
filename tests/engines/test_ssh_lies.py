"""Components on an SSH host that lie through what their program controls: the files in its
own directory (its pid file, its status file, which the portal's scripts read) and the names
/proc shows of it. A pid file that names no process, or a process not of the component (init:
whose process group is every process of the account), starts nothing and signals nothing: the
component fails saying so, the application terminates, and a process of another application
on the same host lives on; a status file holding a huge number is no exit status; a file named
``x -> socket:[INODE]`` makes no other process's port its own. No worker fails
"unexpectedly" on any of it.

Tried and found sound (covered by tests/engines/test_ssh.py): component names (a strict
pattern), argv, environment values and file contents reach the remote shell quoted, as data;
an environment name the shell cannot set is refused. The log reader frames each read by its
length, so a log line cannot pose as an answer; a process's name holding ") " is read from
/proc/PID/stat's last ")"."""

from __future__ import annotations

import os
import signal

import pytest

from cddlm import ns
from cddlm.client import Portal
from tests.conftest import LivePortal
from tests.engines.sshd import SshHosts
from tests.engines.test_ssh import alive, native, process, proc_env
from tests.netns import wait_until

LIES = ("junk", "1 x", "1", "-5", "99999999999999999999999")


@pytest.fixture(scope="module")
def portal(tmp_path_factory):
    with SshHosts(1) as hosts:
        state = tmp_path_factory.mktemp("ssh-lies")
        lp = LivePortal(state, extra=["--datacenter", str(hosts.datacenter), "--agent-credentials",
                                      str(hosts.credentials), "--agent-lease", "3",
                                      "--liveness-interval", "0.5", "--ssh-keepalive", "1"]).start()
        try:
            yield lp
        finally:
            lp.stop()


def test_a_pid_file_that_lies_starts_and_signals_nothing(portal):
    front = Portal(portal.url, failover=False)
    victim = front.create()
    victim.initialize(ns.NATIVE, body=native(process("v", "sleep", "600", host="h1")))
    victim.run()
    assert victim.wait_for("running", timeout=60) == "running"
    (v,) = victim.components()
    # each liar writes its pid file over and over, from its first instant
    app = front.create()
    app.initialize(ns.NATIVE, body=native("".join(
        process("liar%d" % i, "sh", "-c", 'while :; do echo "%s" > pid; done' % lie, host="h1")
        for i, lie in enumerate(LIES))))
    app.run()
    assert app.wait_for("running", "failed", timeout=60) in ("running", "failed"), app.ping()
    assert wait_until(lambda: all(c["state"] in ("running", "failed") for c in app.components()), 30), \
        app.components()
    for c in app.components():
        if c["state"] == "failed":
            assert "its pid file" in (c["info"] or ""), c
        else:       # read before the program wrote: its own pid, its own process
            assert ("CDDLM_COMPONENT=%s %s" % (app.reference.resource_id, c["path"])).encode() \
                in proc_env(c["pid"]), c
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated", app.components()
    assert alive(v["pid"]) and victim.state() == "running"      # no signal to every process
    assert "failed unexpectedly" not in portal.log_path.read_text()
    victim.terminate()
    assert victim.wait_for("terminated", timeout=60) == "terminated"


def test_a_status_file_that_lies_is_no_exit_status(portal):
    # the program's child writes the status file after the supervising sh has written it
    writer = ('(i=0; while [ $i -lt 40 ]; do echo 99999999999999999999999 > status; i=$((i+1)); '
              'sleep 0.1; done) & sleep 0.3; exit 3')
    app = Portal(portal.url, failover=False).create()
    app.initialize(ns.NATIVE, body=native(process("w", "sh", "-c", writer, host="h1")))
    app.run()
    assert app.wait_for("failed", timeout=60) == "failed", app.ping()
    (c,) = app.components()
    assert c["exitCode"] in (3, None), c
    assert "failed unexpectedly" not in portal.log_path.read_text()
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated"
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        try:
            if ("CDDLM_COMPONENT=%s w" % app.reference.resource_id).encode() in proc_env(pid):
                os.kill(pid, signal.SIGKILL)        # (its writer, should one be left)
        except OSError:
            continue


CLAIMS = ("import socket, time\n"
          "listening = [l.split()[9] for l in open('/proc/net/tcp').read().splitlines()[1:]\n"
          "             if l.split()[3] == '0A']\n"
          "held = [open('x -> socket:[%s]' % inode, 'w') for inode in listening]\n"
          "mine = socket.socket()\n"
          "print(len(held), flush=True)\n"
          "time.sleep(600)\n")
LISTENS = ("import socket, time\n"
           "s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen()\n"
           "time.sleep(600)\n")


def test_a_file_named_like_a_socket_claims_no_port(portal):
    """A process holding a socket of its own and files named ``x -> socket:[INODE]`` after the
    listening sockets of the host (``ls -l /proc/PID/fd`` shows such a file as ``N -> DIR/x
    -> socket:[INODE]``) listens on nothing: no port of another process is reported as its."""
    front = Portal(portal.url, failover=False)
    victim = front.create()
    victim.initialize(ns.NATIVE, body=native(process("v", "python3", "-c", LISTENS, host="h1")))
    victim.run()
    assert victim.wait_for("running", timeout=60) == "running"
    assert wait_until(lambda: victim.resolve("v/ports"), 30)
    (port,) = victim.resolve("v/ports")
    app = front.create()
    app.initialize(ns.NATIVE, body=native(process(
        "claims", "python3", "-c", CLAIMS, host="h1",
        extra='<attribute name="readiness"><item name="log">^[1-9]</item></attribute>')))
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    for _ in range(3):      # (its ports are read afresh on each look)
        assert app.resolve("claims/ports") == "", port        # (an empty list: no item)
    app.terminate()
    victim.terminate()
    for a in (app, victim):
        assert a.wait_for("terminated", timeout=60) == "terminated"


def test_a_program_that_clears_its_environment_is_still_its_components(portal):
    """The identity check that keeps a lying pid file from naming another process must not
    refuse the component's own program when it starts with an environment of its own
    (``env -i``): its session's leader, the wrapper's ``sh``, still names the component."""
    app = Portal(portal.url, failover=False).create()
    app.initialize(ns.NATIVE, body=native(process("bare", "env", "-i", "sleep", "600", host="h1")))
    app.run()
    assert app.wait_for("running", "failed", timeout=60) == "running", app.components()
    (c,) = app.components()
    assert b"CDDLM_COMPONENT" not in proc_env(c["pid"]), c         # (its own environment: none)
    assert open("/proc/%d/cmdline" % c["pid"], "rb").read().split(b"\0")[0] == b"sleep"
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated", app.components()
    assert wait_until(lambda: not alive(c["pid"]), 30), "its process outlived its terminate"
