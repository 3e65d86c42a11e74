"""procsh: reading /proc in POSIX sh and awk where the portal cannot read it itself, run here
against a local ``sh`` and real processes and sockets (tests/engines runs it on Slurm nodes
and SSH hosts); and the strict parse of what a Slurm job's watcher writes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from cddlm.application.enactment import procsh
from tests.netns import wait_until


def sh(body: str, *args: str) -> str:
    return subprocess.run(["sh", "-c", procsh.REPORTER + body, "sh", *args], capture_output=True,
                          text=True, check=True, timeout=10).stdout


def test_the_ports_a_process_listens_on_not_those_it_is_connected_by():
    server, server6 = socket.socket(), socket.socket(socket.AF_INET6)
    server.bind(("127.0.0.1", 0))
    server6.bind(("::1", 0))
    for s in (server, server6):
        s.listen()
    client = socket.create_connection(server.getsockname())
    try:
        got = procsh.hex_ports(sh('tp "$1"', str(os.getpid())).split())
        assert got == sorted([server.getsockname()[1], server6.getsockname()[1]])
        assert client.getsockname()[1] not in got
    finally:
        for s in (client, server, server6):
            s.close()
    sleeper = subprocess.Popen(["sleep", "30"])
    try:    # no socket: nothing (and no program run for it); a pid that is gone: nothing
        assert sh('hs "$1" || echo none; tp "$1"; tp 999999999; :', str(sleeper.pid)) == "none\n"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_hex_ports_are_each_once_in_range():
    assert procsh.hex_ports(["1F90", "0050", "1F90", "zz", "0000", "10000", ""]) == [80, 8080]


def test_a_watcher_report_is_parsed_strictly():
    assert procsh.report(b"42 1234 1F90 0050\n", 42) == (1234, [80, 8080])
    assert procsh.report(b"42 1234\n", 42) == (1234, [])
    assert procsh.report(b"42 1234", 42) == (1234, [])
    for junk in (b"", b"\n", b"41 1234\n", b"42 0\n", b"42 4194305\n", b"42 12345678\n",
                 b"42 1234 1f90\n", b"42 1234 1F90 \n", b"42  1234\n", b" 42 1234\n",
                 b"42 1234\n\n", b"42 1234\nextra\n", b"42 -1\n", b"\xff\xfe", b"42 12\x00",
                 b"42 1234" + b" 1F90" * 20000):
        assert procsh.report(junk, 42) is None, junk[:30]


def test_the_watcher_reports_a_program_until_it_ends_and_sets_nothing_of_its_environment(tmp_path):
    """``rp`` as a job script runs it: the marker at once with the pid, then the ports as the
    program opens them (atomically: a reader never sees a partial file); it sets no variable
    the program inherits, holds none of its output, and exits when the program does."""
    marker = tmp_path / "marker"
    ready = tmp_path / "ready"
    program = ("import os, socket, sys, time\n"
               "print(sorted(k for k in os.environ if len(k) == 1 or k in ('p', 't', 'o', 'd', 'n')))\n"
               "time.sleep(0.3)\n"
               "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
               "open(%r, 'w').write(str(s.getsockname()[1]))\n"
               "time.sleep(60)\n" % str(ready))
    script = 'rp "$1" 42; exec "$2" -c "$3"'
    job = subprocess.Popen(["sh", "-c", procsh.REPORTER + script, "sh", str(marker),
                            sys.executable, program], stdout=subprocess.PIPE, text=True,
                           env={"PATH": os.environ["PATH"]})
    try:
        assert job.stdout.readline() == "[]\n"      # no p, t, o, d, n, S, G ... of the watcher
        assert procsh.report(marker.read_bytes(), 42)[0] == job.pid    # the pid at once
        assert wait_until(ready.exists, 10)
        port = int(ready.read_text())
        assert wait_until(lambda: procsh.report(marker.read_bytes(), 42) == (job.pid, [port]), 10)
        # the watcher: the script's shell, forked (its command line), not the program's child
        watchers = [p for p in _pids() if _argv(p)[:2] == ["sh", "-c"] and _argv(p)[-1] == program]
        assert len(watchers) == 1 and _stat(watchers[0])[1] != str(job.pid)
        assert [os.readlink("/proc/%d/fd/%d" % (watchers[0], fd)) for fd in (0, 1, 2)] == \
            ["/dev/null"] * 3
    finally:
        job.kill()
        job.wait()
        job.stdout.close()
    started = time.monotonic()
    assert wait_until(lambda: _stat(watchers[0])[0] in ("gone", "Z"), 15)   # (init reaps it)
    assert time.monotonic() - started < 10      # within its longest pause (8 s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["marker", "ready"]    # no temporary left


def _argv(pid: int) -> list[str]:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def _stat(pid: int) -> list[str]:
    """State, parent ... of a process (``["gone"]`` once it is)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return ["gone"]


def _pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]
