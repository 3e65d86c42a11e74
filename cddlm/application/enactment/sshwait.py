"""What the SSH runner waits for, in rounds of one command per host: readiness after a start
(``Rounds``), the end of processes after their stop signal (``Stops``).

Each round sends one script with a line per component still awaited (is it alive, how did it
end, what is new in its logs, does its file exist) and, for ``tcp`` and ``http`` conditions,
connects from the host itself. Outcomes are reported as they come, the lease kept between
rounds; a component's own deadline (readiness timeout, grace period) is kept as the local
runner keeps it.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass, field
from typing import Any

from cddlm import netsafe
from cddlm.application.enactment import sshscript as sh
from cddlm.application.enactment.confine import Escape, inside
from cddlm.application.enactment.local import Later, Outcome, Report
from cddlm.application.enactment.sshlink import Unreachable
from cddlm.budget import PatternError, user_regex

ROUND_FIRST = 0.05      # seconds before the first look
ROUND_MAX = 0.5         # seconds between looks, at most
FAIL_GRACE = 2.0        # seconds a process failing its readiness has after TERM, then KILL
KILL_WAIT = 5.0         # seconds after KILL before a wait gives up
FILE_KEYS = 1 << 20     # script keys of file checks (beside the same component's liveness)
CARRY = 64 * 1024       # bytes of an unfinished log line kept for the next look


def _no_names(host: str, port: int) -> list[str]:
    if host.lower() == "localhost":
        return ["127.0.0.1"]
    raise OSError("names are not resolved for an SSH host's checks: give an address")


def _target(spec: str) -> tuple[str, int]:
    host, _, port = str(spec).rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


def probe_problem(runner: Any, attrs: dict, timeout: float | None = None) -> str | None:
    """None when the ``tcp`` (HOST:PORT, or a port of the host) or ``http`` target of a
    readiness condition or probe answers from the host; else what is wrong. ``netsafe.Refused``
    when the portal's probe networks forbid the address."""
    networks = runner.settings.probe_networks
    wait = timeout or float(attrs.get("timeout") or 2.0)
    if attrs.get("tcp"):
        spec = str(attrs["tcp"])
        try:
            host, port = _target(spec if ":" in spec else "127.0.0.1:" + spec)
        except ValueError:
            return "tcp %s: not HOST:PORT" % spec
        address = netsafe.vet_host(host, port, networks, resolver=_no_names, what="tcp target")[0]
        try:
            runner.link.tcp(address, port, timeout=wait)
            return None
        except OSError as e:
            return "tcp %s: %s (from host %s)" % (spec, e, runner.host.name)
    if attrs.get("http"):
        url = str(attrs["http"])
        target = netsafe.vet(url, networks, schemes=("http",), resolver=_no_names,
                             what="http target")
        request = ("GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n"
                   % (target.target, target.host)).encode("latin-1", "replace")
        try:
            head = runner.link.tcp(target.addresses[0], target.port, request, timeout=wait)
        except OSError as e:
            return "http %s: %s (from host %s)" % (url, e, runner.host.name)
        words = head.split(b"\r\n", 1)[0].split()
        status = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
        return None if 0 < status < 400 else "http %s: status %s" % (url, status or "unreadable")
    return "probe has neither tcp nor http"


@dataclass
class _Item:
    key: Any
    kind: str                           # process | file | probe
    deadline: float
    base: dict = field(default_factory=dict)
    ready: dict = field(default_factory=dict)
    workdir: str = ""
    pattern: Any = None
    offsets: dict = field(default_factory=lambda: {"stdout": None, "stderr": None})
    carry: dict = field(default_factory=lambda: {"stdout": b"", "stderr": b""})
    failure: Outcome | None = None      # set: it is being stopped, then fails with this
    signalled: float | None = None
    killed: float | None = None
    problem: str = "not looked at yet"
    file: str = ""
    attrs: dict = field(default_factory=dict)
    where: tuple = ()                   # (app id, path) of a process


class Rounds:
    """Readiness of processes, probes and files of one start batch on one host."""

    def __init__(self, runner: Any, keep_lease, report: Report):
        self.runner, self.keep, self.report = runner, keep_lease, report
        self.items: list[_Item] = []

    def add_process(self, key, t, ready: dict, base: dict) -> Outcome | None:
        timeout = float(ready.get("timeout") or 30.0)
        item = _Item(key, "process", time.monotonic() + timeout, base, ready,
                     self.runner.component_dir(t.app_id, t.path), where=(t.app_id, t.path))
        if "log" in ready:
            try:
                item.pattern = user_regex("(?m)" + str(ready["log"]),
                                          self.runner.settings.limits.max_pattern_chars + 4)
            except PatternError as e:
                item.failure = Outcome("failed", "readiness log pattern: %s" % e, **base)
        if "file" in ready:
            try:
                item.file = posixpath.join(item.workdir, *inside(item.workdir, str(ready["file"])))
            except Escape as e:
                item.failure = Outcome("failed", "readiness file: %s" % e, **base)
        self.items.append(item)
        return None

    def add_file(self, key, full: str) -> None:
        self.items.append(_Item(key, "file", time.monotonic(), file=full))

    def add_probe(self, key, attrs: dict) -> None:
        deadline = time.monotonic() + max(5.0, 5 * float(attrs.get("timeout") or 2))
        self.items.append(_Item(key, "probe", deadline, attrs=attrs))

    def wait(self) -> None:
        interval = ROUND_FIRST
        while self.items:
            time.sleep(interval)
            interval = min(ROUND_MAX, interval * 1.5)
            done = self._round()
            if done:
                self.report(done)
            if self.items and self.keep is not None:
                self.keep()

    def _round(self) -> list:
        lines = []
        for n, item in enumerate(self.items):
            if item.kind == "file":
                lines.append("fx %d %s" % (n, sh.q(item.file)))
            elif item.kind == "process":
                pid, start = item.base["pid"], item.base.get("pid_start") or "-"
                if item.failure is not None:
                    lines.append(self._stopping(n, item))
                lines.append("lv %d %d %s %s" % (n, pid, sh.q(start), sh.q(item.workdir)))
                if item.failure is None and item.pattern is not None:
                    for stream in ("stdout", "stderr"):
                        at = item.offsets[stream]
                        lines.append("lg %d %s %s %s %d" % (n, stream, sh.q(item.workdir + "/" + stream + ".log"),
                                                            "0" if at is None else at, sh.CHUNK))
                if item.failure is None and item.file:
                    lines.append("fx %d %s" % (n + FILE_KEYS, sh.q(item.file)))
        logs, answers = {}, {}
        if lines:
            try:
                got = self.runner.link.run(sh.script(lines))
                logs, answers = sh.parse_logs(got.stdout)
            except Unreachable as e:
                answers = {}
                for item in self.items:
                    item.problem = str(e)
        done, left = [], []
        now = time.monotonic()
        for n, item in enumerate(self.items):
            out = self._judge(n, item, answers, logs, now)
            (left if out is None else done).append(item if out is None else (item.key, out))
        self.items = left
        ready = [out for _, out in done if out.event == "running" and out.pid]
        if ready:       # the ports they listen on now, one look for all (``resolve web/port``)
            found = self.runner.ports_of([out.pid for out in ready])
            for out in ready:
                if found.get(out.pid):
                    out.runtime = dict(out.runtime, ports=found[out.pid])
        return done

    def _judge(self, n: int, item: _Item, answers: dict, logs: dict, now: float) -> Outcome | None:
        if item.kind == "file":
            words = answers.get(n)
            if words is None:
                return None if now < item.deadline + 30 else Outcome("failed", "host gave no answer")
            return Outcome("running", runtime={"location": item.file, "host": self.runner.host.name}) \
                if words[0] == "ok" else Outcome("failed", "file %s is missing" % item.file)
        if item.kind == "probe":
            return self._probe(item, now)
        words = answers.get(n)
        gone = self.runner.liveness(words)
        if item.failure is not None:
            if gone is not None:
                return item.failure
            if item.killed is not None and now - item.killed > KILL_WAIT:
                return item.failure
            return None
        if gone is not None:
            self.runner.keep_tail(*item.where)
            base = dict(item.base)
            base.update(exit_code=gone.exit_code, exit_signal=gone.exit_signal)
            return Outcome("failed", "exited before it was ready: " + (gone.info or "exited"), **base)
        if words is None:
            problem = item.problem
        else:
            try:
                problem = self._readiness(n, item, answers, logs)
            except netsafe.Refused as e:
                item.failure = Outcome("failed", "readiness check refused: %s" % e, **item.base)
                return None
        if problem is None:
            return Outcome("running", **item.base)
        if now > item.deadline:
            item.failure = Outcome("failed", "not ready after %gs: %s" % (
                float(item.ready.get("timeout") or 30.0), problem), **item.base)
        item.problem = problem
        return None

    def _readiness(self, n: int, item: _Item, answers: dict, logs: dict) -> str | None:
        ready = item.ready
        if "tcp" in ready or "http" in ready:
            return probe_problem(self.runner, ready, timeout=1.0)
        if "file" in ready:
            words = answers.get(n + FILE_KEYS)
            return None if words and words[0] == "ok" else "file %s does not exist" % ready["file"]
        if "log" in ready:
            seen = False
            for stream in ("stdout", "stderr"):
                found = logs.get((n, stream))
                if found is None:
                    continue
                start, data = found
                if item.offsets[stream] is not None and start != item.offsets[stream]:
                    item.carry[stream] = b""        # truncated or rotated: read from its start
                item.offsets[stream] = start + len(data)
                block = item.carry[stream] + data
                end = block.rfind(b"\n") + 1
                complete, rest = block[:end], block[end:]
                if len(rest) > CARRY:
                    complete, rest = block, b""
                item.carry[stream] = rest
                seen = seen or (bool(complete) and item.pattern.search(complete) is not None)
            return None if seen else "log line /%s/ not seen" % ready["log"]
        return None

    def _probe(self, item: _Item, now: float) -> Outcome | None:
        try:
            problem = probe_problem(self.runner, item.attrs)
        except netsafe.Refused as e:
            return Outcome("failed", "probe refused: %s" % e)
        except Unreachable as e:
            problem = str(e)
        if problem is None:
            return Outcome("running", runtime={"host": self.runner.host.name})
        return Outcome("failed", problem) if now > item.deadline else None

    @staticmethod
    def _stopping(n: int, item: _Item) -> str:
        """The line that stops a process that failed its readiness: TERM, KILL after a while."""
        now = time.monotonic()
        pid, start = item.base["pid"], item.base.get("pid_start") or "-"
        if item.signalled is None:
            item.signalled = now
            return "sg %d %d %s TERM >/dev/null" % (n, pid, sh.q(start))
        if item.killed is None and now - item.signalled > FAIL_GRACE:
            item.killed = now
            return "sg %d %d %s KILL >/dev/null" % (n, pid, sh.q(start))
        return ":"


class Stops:
    """The stop of one batch's components on one host."""

    def __init__(self, runner: Any, keep_lease, report: Report):
        self.runner, self.keep, self.report = runner, keep_lease, report

    def run(self, jobs: list) -> None:
        r = self.runner
        lines, now_known = [], []
        for n, (key, t, pid, started) in enumerate(jobs):
            if t.type == "process":
                sig = str(t.attributes.get("stop_signal") or "TERM")
                if sig not in ("TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2"):
                    sig = "TERM"
                lines.append("so %d %s %s %s %s %s" % (
                    n, pid or "-", sh.q(started or "-"), sig,
                    sh.q(r.component_dir(t.app_id, t.path)), sh.q("%s %s" % (t.app_id, t.path))))
            elif t.type == "file" and not t.attributes.get("keep") and r._file(t):
                lines.append("rm -f %s; echo %d gone" % (sh.q(r._file(t)), n))
            else:
                now_known.append((key, Outcome("stopped")))
        answers = r._first(lines) if lines else {}     # (Later: nothing reported yet)
        if now_known:
            self.report(now_known)
        waits, done = [], []
        now = time.monotonic()
        for n, (key, t, pid, started) in enumerate(jobs):
            words = answers.get(n)
            if t.type != "process" or not words:
                if words is not None or t.type == "file":
                    done.append((key, Outcome("stopped")))
                continue
            if words[0] != "sent":
                done.append((key, Outcome("stopped", pid=pid, pid_start=started)))
                continue
            grace = float(t.attributes.get("grace") if t.attributes.get("grace") is not None else 5)
            waits.append({"n": n, "key": key, "pgid": words[1], "pid": int(words[2]),
                          "start": started if pid and int(words[2]) == pid else None,
                          "dir": r.component_dir(t.app_id, t.path), "deadline": now + grace,
                          "killed": False})
        if done:
            self.report(done)
        self._wait(waits)

    def _wait(self, waits: list[dict]) -> None:
        interval = ROUND_FIRST / 2
        while waits:
            time.sleep(interval)
            interval = min(ROUND_MAX, interval * 2)
            now = time.monotonic()
            lines = []
            for w in waits:
                if now >= w["deadline"] and not w["killed"]:
                    lines.append("kg %d %s >/dev/null" % (w["n"], w["pgid"]))
                    w["killed"], w["deadline"] = True, now + KILL_WAIT
                lines.append("lv %d %d %s %s" % (w["n"], w["pid"], sh.q(w["start"] or "-"), sh.q(w["dir"])))
            try:
                answers, silent = self.runner._batch(lines), None
            except Unreachable as e:
                answers, silent = {}, e
            done, left, leftovers = [], [], []
            for w in waits:
                gone = self.runner.liveness(answers.get(w["n"]))
                if gone is None and w["killed"] and now >= w["deadline"] and silent is not None:
                    # nothing is known of them: their stops are asked again once it answers
                    if done:
                        self.report(done)
                    raise Later(1.0, "host %s stopped answering: %s" % (self.runner.host.name, silent))
                if gone is not None or (w["killed"] and now >= w["deadline"]):
                    out = Outcome("stopped", pid=w["pid"], pid_start=w["start"])
                    if gone is not None:
                        out.exit_code, out.exit_signal = gone.exit_code, gone.exit_signal
                        if not w["killed"]:
                            leftovers.append("kg %d %s >/dev/null" % (w["n"], w["pgid"]))
                    done.append((w["key"], out))
                else:
                    left.append(w)
            if leftovers:
                try:        # what is left in their groups (the program ended: its session goes)
                    self.runner._batch(leftovers)
                except Unreachable:
                    pass
            if done:
                self.report(done)
            waits = left
            if waits and self.keep is not None:
                self.keep()
