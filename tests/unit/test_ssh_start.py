"""The SSH runner's start, driven with the host's answers given (no sshd): what it records of a
process from the host's ``run PID START`` line. A start answered ``run PID -`` (the program had
ended before its start time was read, or its pid file named a pid that was nobody's) records
``ENDED_AT_START``, a start time no process has: recorded as none, any later process with that
pid would be taken for the component by liveness and signalled by its stop
(test_sshscript.py pins the host's side of that)."""

from __future__ import annotations

from cddlm.application.enactment import sshscript as sh
from cddlm.application.enactment.local import Outcome, Target
from cddlm.application.enactment.ssh import SshRunner
from cddlm.application.enactment.sshlink import Result
from cddlm.application.hosts import Host
from cddlm.config import Settings


class Answers:
    """The host's side of the link: each command gets the next of ``answers`` (then nothing)."""

    def __init__(self, *answers: bytes):
        self.answers = list(answers)
        self.scripts: list[str] = []

    def silent(self) -> bool:
        return False

    def run(self, script: str, timeout: float | None = None) -> Result:
        self.scripts.append(script)
        return Result(0, self.answers.pop(0) if self.answers else b"", b"")


def runner(*answers: bytes) -> tuple[SshRunner, Answers]:
    # an absolute workdir: the runner need not ask the host for its directory
    r = SshRunner(Host("h", "ssh://deploy@h.example", workdir="/srv/cddlm"), None, Settings(),
                  loop=None, creds={})
    r.link = host = Answers(*answers)
    return r, host


def process(path: str, **attrs) -> Target:
    return Target("app:1", path, "process", dict(argv=["/bin/sleep", "60"], **attrs), "h")


def start(r: SshRunner, *targets: Target) -> dict[str, Outcome]:
    got: list = []
    r.start_many([(t.path, t, None, None) for t in targets], None, got.extend)
    return dict(got)


def test_a_start_answered_run_pid_dash_records_a_start_time_no_process_has():
    r, host = runner(b"0 run 4242 -\n1 run 4243 918273\n")
    got = start(r, process("gone"), process("alive"))
    assert len(host.scripts) == 1 and "wt 0 " in host.scripts[0] and "wt 1 " in host.scripts[0]
    assert got["gone"].event == "running"
    assert (got["gone"].pid, got["gone"].pid_start) == (4242, sh.ENDED_AT_START)
    assert got["gone"].runtime["pid"] == 4242
    assert got["alive"].event == "running"
    assert (got["alive"].pid, got["alive"].pid_start) == (4243, "918273")


def test_readiness_asks_after_a_gone_process_by_that_start_time():
    # the first readiness round asks about pid 4242 under the recorded start time: "ended",
    # which no process has (under "-" a process that reused the pid would answer "up")
    r, host = runner(b"0 run 4242 -\n", b"0 end 0\n", b"0 log x 0 0\n\n")
    got = start(r, process("gone", readiness={"log": "ready", "timeout": 5}))
    lv = [line for line in host.scripts[1].splitlines() if line.startswith("lv 0 ")]
    assert lv == ["lv 0 4242 %s %s" % (sh.ENDED_AT_START, sh.q(r.component_dir("app:1", "gone")))]
    assert got["gone"].event == "failed" and "exited before it was ready" in got["gone"].info
    assert (got["gone"].pid, got["gone"].pid_start) == (4242, sh.ENDED_AT_START)
