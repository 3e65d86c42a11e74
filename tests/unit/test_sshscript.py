"""The SSH runner's pure parts: agent addresses, the scripts' quoting and the parsing of their
answers (a process's output never reaches them: only the lengths the script printed frame a
log read), and exit statuses as sh reports them. The remote side runs against a local ``sh``
here; tests/engines runs it over real sshds."""

from __future__ import annotations

import subprocess

import pytest

from cddlm.application.enactment import sshscript as sh
from cddlm.application.enactment.sshlink import Endpoint, parse_agent
from cddlm.errors import ConfigurationError


def test_agent_addresses():
    assert parse_agent("ssh://deploy@10.0.0.5") == Endpoint("deploy", "10.0.0.5", 22)
    assert parse_agent("ssh://deploy@[fd00::5]:2222") == Endpoint("deploy", "fd00::5", 2222)
    for bad in ("ssh://10.0.0.5", "ssh://u:secret@h", "http://u@h", "ssh://u@h/path", "ssh://u@h:99999",
                "ssh://u@", "ssh://u@h?x=1"):
        with pytest.raises(ConfigurationError, match="agent"):
            parse_agent(bad)


def run(lines: list[str]) -> bytes:
    return subprocess.run(["sh", "-s"], input=sh.script(lines).encode(), capture_output=True,
                          check=True, timeout=10).stdout


def test_environment_names_the_shell_cannot_set_are_refused():
    assert sh.env_exports({}) == ":"
    assert sh.env_exports({"A_1": "x y"}) == "export A_1='x y'"
    for bad in ("1A", "A-B", "A;touch x", "", "A B"):
        with pytest.raises(ValueError, match="cannot be set over SSH"):
            sh.env_exports({bad: "1"})


def test_log_reads_are_framed_by_length(tmp_path):
    log = tmp_path / "stdout.log"
    forged = b"0 log x 0 3\nabc\n1 up 123\n"          # a process writing what answers look like
    log.write_bytes(b"first\n" + forged + b"last\n")
    logs, lines = sh.parse_logs(run(["lg 0 x %s 0 1000" % sh.q(log), "lg 1 y %s - 5" % sh.q(log),
                                     "echo 2 up 42"]))
    assert logs[(0, "x")] == (0, log.read_bytes())
    size = len(log.read_bytes())
    assert logs[(1, "y")] == (size - 5, b"last\n")
    assert lines == {2: ["up", "42"]}
    # an offset past the end (the log was truncated): read from its start
    assert sh.parse_logs(run(["lg 0 x %s 99999 4" % sh.q(log)]))[0][(0, "x")] == (0, b"firs")
    # a read cut short ends the parse, keeping what came before it
    cut = b"0 log x 0 10\nabc"
    assert sh.parse_logs(b"3 up 1\n" + cut) == ({}, {3: ["up", "1"]})


def test_a_missing_or_linked_log_reads_as_empty(tmp_path):
    (tmp_path / "link.log").symlink_to("/etc/passwd")
    logs, _ = sh.parse_logs(run(["lg 0 x %s 0 100" % sh.q(tmp_path / "link.log"),
                                 "lg 1 x %s 0 100" % sh.q(tmp_path / "none.log")]))
    assert logs == {(0, "x"): (0, b""), (1, "x"): (0, b"")}


def test_liveness_by_pid_and_start_time(tmp_path):
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with open("/proc/%d/stat" % proc.pid) as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
        (tmp_path / "status").write_text("")
        got = sh.parse_lines(run(["lv 0 %d %s %s" % (proc.pid, start, sh.q(tmp_path)),
                                  "lv 1 %d 1 %s" % (proc.pid, sh.q(tmp_path)),
                                  "lv 2 %d - %s" % (proc.pid, sh.q(tmp_path))]))
        assert got[0] == ["up", start] and got[2] == ["up", start]
        assert got[1] == ["end", "-"], "another start time: not this process"
    finally:
        proc.kill()
        proc.wait()
    (tmp_path / "status").write_text("143\n")
    assert sh.parse_lines(run(["lv 0 %d %s %s" % (proc.pid, start, sh.q(tmp_path))]))[0] == ["end", "143"]


def test_a_program_that_ends_while_its_start_is_checked_started_and_ended(tmp_path):
    """``wt`` reads a new component's pid file, sees the process alive, then reads its
    environment; a quick program (a run-to-completion step's ``date``) can end in between.
    That start succeeded (the liveness pass reads its status): it is no foreign pid. Here the
    process ends exactly there: the environment check kills it before failing."""
    for ends in (True, False):
        proc = subprocess.Popen(["sleep", "30"])
        try:
            (tmp_path / "pid").write_text("%d\n" % proc.pid)
            ours = 'ours() { %s return 1; }' % ('kill -KILL "$1"; sleep 0.3;' if ends else "")
            got = sh.parse_lines(run([ours, "wt 0 %s %s" % (sh.q(tmp_path), sh.q("seq/s1"))]))[0]
        finally:
            proc.kill()
            proc.wait()
        if ends:
            assert got == ["run", str(proc.pid), "-"], got
        else:   # alive and not the component's: refused, as before
            assert got[0] == "fail" and "not its own" in " ".join(got), got


def test_a_process_that_had_ended_at_its_start_is_no_process_later(tmp_path):
    """A start that found its pid gone ("run PID -": a quick program, or a pid the program
    wrote that was nobody's then) is recorded with ``ENDED_AT_START``: a live process that has
    that pid later is neither taken for the component (liveness says it ended, with its
    status) nor signalled when it is stopped."""
    proc = subprocess.Popen(["sleep", "30"])
    try:
        (tmp_path / "status").write_text("0\n")
        d, never = sh.q(tmp_path), sh.q(sh.ENDED_AT_START)
        got = sh.parse_lines(run(["lv 0 %d %s %s" % (proc.pid, never, d),
                                  "so 1 %d %s TERM %s seq/s1" % (proc.pid, never, d),
                                  "lv 2 %d - %s" % (proc.pid, d)]))
        assert got[0] == ["end", "0"] and got[1] == ["gone"], got
        assert got[2][0] == "up"        # (any start time: the process is there)
        assert proc.poll() is None, "a stranger was signalled"
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_file_rewritten_while_it_is_read_gives_no_pid(tmp_path):
    """A program rewriting its pid file with a long number, over and over: ``sh``'s ``read``
    took a byte at a time, and a rewrite between two bytes left it the number's first digits,
    a short "pid" (CI saw a component of pid 9999). Read in one piece, it is refused."""
    d = sh.q(tmp_path)
    got = sh.parse_lines(run([
        "echo 4242 > %s/pid; pf %s && echo 0 took $p" % (d, d),
        "(while :; do echo 99999999999999999999999 > %s/pid; done) & W=$!" % d,
        "n=0; i=0; while [ $i -lt 2000 ]; do i=$((i+1)); pf %s && n=$((n+1)); done" % d,
        "kill $W; echo 1 took $n"]))
    assert got[0] == ["took", "4242"] and got[1] == ["took", "0"], got


def test_exit_statuses_as_sh_reports_them():
    assert sh.ended("0") == ("exited with status 0", 0, None)
    assert sh.ended("3") == ("exited with status 3", 3, None)
    assert sh.ended("143") == ("killed by signal SIGTERM", None, "SIGTERM")
    assert sh.ended("137")[2] == "SIGKILL"
    assert sh.ended("255") == ("exited with status 255", 255, None)
    assert sh.ended("-")[1:] == (None, None) and "not recorded" in sh.ended("-")[0]
    assert sh.ended("garbage")[1:] == (None, None)


def test_ports_are_read_in_hexadecimal():
    assert sh.ports(["ports", "1F90", "0050", "1F90", "zz"]) == [80, 8080]
    assert sh.ports(["end", "1"]) == [] and sh.ports([]) == []
