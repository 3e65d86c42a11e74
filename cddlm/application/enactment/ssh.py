"""The SSH runner: enacts the components placed on a host whose agent is
``ssh://USER@ADDRESS[:PORT]``, a machine that runs sshd and nothing of ours.

It does what the local runner does, there: each component has a directory below the host's
``workdir`` (``ROOT/apps/<id>/<path>``, ``ROOT`` relative to the account's home unless absolute;
default ``.cddlm/HOST``) with ``stdout.log``, ``stderr.log``, its pid file and its exit status;
processes start in their own session and are known by (pid, start time) (``sshscript``).
Every batch is one command per host (deploy, start, stop: one script for all of a batch's
components there), readiness is awaited in rounds of one command per host, and the liveness
pass asks each host once about all its processes (``survey``); logs are read over the same
connection with offsets. Readiness ``tcp`` and ``http`` checks and probes connect from the
host itself (a direct-tcpip channel), so ``tcp: 8080`` means the host's own port 8080.

A host that does not answer is the host monitor's business, as for a host portal (``Agents``:
``portal().probe()``): down after the lease, up when it answers again. Meanwhile a start or a
stop is asked again later (``Later``), so a terminate during a partition completes once the
host answers, and stops what ran there.
"""

from __future__ import annotations

import logging
import os
import posixpath
import threading
import time
from typing import Any, Iterable

from cddlm.application import repository as repo
from cddlm.application.enactment import sshscript as sh
from cddlm.application.enactment.confine import Escape, inside
from cddlm.application.enactment.local import (STDERR_TAIL_LINES, Later, Outcome, Report, Target,
                                               _one, _substitute, log_lines)
from cddlm.application.enactment.sshlink import Link, Loop, Unreachable, parse_agent
from cddlm.application.hosts import Host
from cddlm.application.store import Store
from cddlm.config import Settings
from cddlm.errors import ConfigurationError

log = logging.getLogger(__name__)

DOWN_PREFIX = "unreachable"     # the host monitor's reason (remote.DOWN_PREFIX)
SURVEY_TTL = 1.0                # seconds a survey answers for a process's liveness
FILE_KEYS = 1 << 20             # script keys of a deploy's file writes (beside their directories)
EXE_KEYS = 1 << 21              # ... and of its executables' look-ups (one per executable)


class SshRunner:
    remote = False          # the engine resolves attributes here and sends them
    parallel = True         # a batch's hosts are enacted side by side (each waits on its own)
    monitored = True        # the host monitor decides when silence is a failure

    def __init__(self, host: Host, store: Store, settings: Settings, loop: Loop,
                 creds: dict[str, str]):
        self.host = host
        self.store = store
        self.settings = settings
        endpoint = parse_agent(host.agent)
        key = creds.get("ssh_key")
        for what in ("ssh_key", "known_hosts"):
            if creds.get(what) and not os.access(creds[what], os.R_OK):
                raise ConfigurationError("host %s: the %s file %s cannot be read"
                                         % (host.name, what, creds[what]))
        self.link = Link(endpoint, loop, key=key, known_hosts=creds.get("known_hosts"),
                         timeout=settings.ssh_timeout, keepalive=settings.ssh_keepalive,
                         channels=settings.ssh_channels)
        self._root_setting = host.workdir or ".cddlm/" + host.name
        self._root: str | None = host.workdir if host.workdir and host.workdir.startswith("/") else None
        self._seen: dict[int, tuple[float, str | None, list[str]]] = {}   # pid -> survey answer
        # stderr tails of processes seen ending, read then: the engine asks for one while it
        # records the failure (in a transaction: never a remote call there)
        self._tails: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._hostname: str | None = None

    # -- the host monitor's view ------------------------------------------------------------------
    def portal(self) -> Link:
        return self.link

    def sweep(self) -> int:
        return 0

    def forget(self) -> None:
        with self._lock:
            self._seen.clear()

    # -- places -----------------------------------------------------------------------------------
    def root(self) -> str:
        """The host's directory, absolute (asked of the host once)."""
        if self._root is None:
            got = self.link.run("mkdir -p %s && cd %s && pwd" % (sh.q(self._root_setting),
                                                                   sh.q(self._root_setting)))
            path = got.stdout.decode("utf-8", "replace").strip()
            if got.status != 0 or not path.startswith("/"):
                raise Unreachable("cannot make the directory %s on host %s: %s" % (
                    self._root_setting, self.host.name, got.stderr.decode("utf-8", "replace")[-200:]))
            self._root = path
        return self._root

    def hostname(self) -> str:
        """The machine's own name (``local.hostname``), asked of it once."""
        if self._hostname is None:
            try:
                got = self.link.run("uname -n")
            except Unreachable:
                return self.host.name       # (asked again next time)
            self._hostname = got.stdout.decode("utf-8", "replace").strip() or self.host.name
        return self._hostname

    def app_dir(self, app_id: str) -> str:
        base = self._root or self._root_setting
        return posixpath.join(base, "apps", app_id.rsplit(":", 1)[-1])

    def component_dir(self, app_id: str, path: str) -> str:
        return posixpath.join(self.app_dir(app_id), *path.split("/"))

    def _batch(self, lines: list[str]) -> dict[int, list[str]]:
        got = self.link.run(sh.script(lines))
        return sh.parse_lines(got.stdout)

    def _first(self, lines: list[str]) -> dict[int, list[str]]:
        """The first command of a batch: a host that does not answer it is asked again
        later (``Later``), holding no worker, however long it takes. One known to be silent
        is not tried: the host monitor's probe finds out when it answers again."""
        if self.link.silent():
            raise Later(1.0, "host %s does not answer" % self.host.name)
        try:
            return self._batch(lines)
        except Unreachable as e:
            raise Later(1.0, str(e)) from None

    def _file(self, t: Target) -> str | None:
        try:
            names = inside(self.app_dir(t.app_id), str(t.attributes["path"]))
        except Escape:
            return None
        return posixpath.join(self.app_dir(t.app_id), *names) if names else None

    def _cwd(self, t: Target) -> str:
        cwd = t.attributes.get("cwd")
        if not cwd:
            return self.component_dir(t.app_id, t.path)
        names = inside(self.app_dir(t.app_id), posixpath.join(t.path, str(cwd)))
        return posixpath.join(self.app_dir(t.app_id), *names)

    def _env(self, t: Target) -> dict[str, str]:
        env = {str(k): str(v) for k, v in (t.attributes.get("env") or {}).items()}
        env.update(CDDLM_APP_ID=t.app_id, CDDLM_HOST=self.host.name,
                   CDDLM_WORKDIR=self.component_dir(t.app_id, t.path),
                   CDDLM_COMPONENT="%s %s" % (t.app_id, t.path))
        return env

    # -- deploy -----------------------------------------------------------------------------------
    def deploy(self, t: Target) -> Outcome:
        return _one(lambda report: self.deploy_many([(None, t)], None, report))

    def deploy_many(self, jobs: Iterable[tuple[Any, Target]], keep_lease, report: Report) -> None:
        """Directories made (one ``mkdir`` for all), executables looked up (each once) and
        files written: one command for the batch."""
        jobs = list(jobs)
        self._reachable()
        dirs: list[str] = []
        exes: dict[tuple[str, str | None], int] = {}     # (executable, PATH) -> its key
        files: list[str] = []
        failed: dict[int, Outcome] = {}
        needs: dict[int, int] = {}                       # job -> the key of its executable
        for n, (key, t) in enumerate(jobs):
            workdir = self.component_dir(t.app_id, t.path)
            dirs.append(workdir)
            problem = None
            if t.type == "process":
                try:
                    cwd, env = self._cwd(t), self._env(t)
                    sh.env_exports(env)
                except (Escape, ValueError) as e:
                    problem = str(e)
                else:
                    exe = str(t.attributes["argv"][0])
                    if "/" in exe and not exe.startswith("/"):
                        exe = posixpath.normpath(posixpath.join(cwd, exe))
                    needs[n] = exes.setdefault((exe, env.get("PATH")), EXE_KEYS + len(exes))
            elif t.type == "file":
                problem = self._file_line(n, t, files)
            if problem is not None:
                failed[n] = Outcome("failed", problem, runtime={"workdir": workdir, "host": self.host.name})
        lines = ["umask 077", "mkdir -p %s 2>/dev/null" % " ".join(sh.q(d) for d in dirs)]
        lines += ["dk %d %s" % (n, sh.q(d)) for n, d in enumerate(dirs)]
        lines += ["%sex %d %s%s" % ("(PATH=%s; " % sh.q(path) if path else "", k, sh.q(exe),
                                    ")" if path else "") for (exe, path), k in exes.items()]
        answers = self._first(lines + files)
        out = []
        for n, (key, t) in enumerate(jobs):
            words = answers.get(n)
            if n in failed:
                out.append((key, failed[n]))
            elif words and words[0] == "ok" and n in needs:
                out.append((key, self._deployed(t, answers.get(needs[n]))))
            elif words and words[0] == "ok" and t.type == "file":
                out.append((key, self._deployed(t, answers.get(FILE_KEYS + n))))
            else:
                out.append((key, self._deployed(t, words)))
        report(out)

    def _file_line(self, n: int, t: Target, lines: list[str]) -> str | None:
        """The line writing a ``file`` component (added to ``lines``), or why it cannot be."""
        full = self._file(t)
        if full is None:
            return "file path %r must stay inside the application directory" % t.attributes["path"]
        content = str(t.attributes.get("content") or "")
        if t.attributes.get("substitute", True):
            content = _substitute(content, t.values)
        try:
            mode = "%o" % (int(str(t.attributes.get("mode") or "0644"), 8) & 0o7777)
        except ValueError:
            return "mode %r is not an octal number" % t.attributes.get("mode")
        if "\0" in content:
            return "a file's content cannot hold NUL over SSH"
        lines.append("fw %d %s %s %s" % (FILE_KEYS + n, sh.q(full), mode, sh.q(content)))
        return None

    def _deployed(self, t: Target, words: list[str] | None) -> Outcome:
        runtime = {"workdir": self.component_dir(t.app_id, t.path), "host": self.host.name}
        if not words:
            return Outcome("failed", "host %s gave no answer about it" % self.host.name, runtime=runtime)
        if words[0] == "fail":
            return Outcome("failed", " ".join(words[1:]), runtime=runtime)
        if words[0] == "missing":
            return Outcome("failed", "executable not found on host %s: %s"
                           % (self.host.name, t.attributes["argv"][0]), runtime=runtime)
        if t.type == "process" and len(words) > 1:
            runtime["executable"] = " ".join(words[1:])
        if t.type == "file":
            runtime["location"] = self._file(t)
        return Outcome("deployed", runtime=runtime)

    # -- start ------------------------------------------------------------------------------------
    def start(self, t: Target, known_pid, known_start, keep_lease) -> Outcome:
        return _one(lambda report: self.start_many([(None, t, known_pid, known_start)],
                                                   keep_lease, report))

    def start_many(self, jobs, keep_lease, report: Report) -> None:
        """Processes adopted (their pid file) or spawned, all in one command; then readiness,
        probes and files awaited in rounds of one command each (``_Rounds``)."""
        from cddlm.application.enactment.sshwait import Rounds
        jobs = list(jobs)
        self._reachable()
        spawns, collects, now_known = [], [], []
        rounds = Rounds(self, keep_lease, report)
        for n, (key, t, _pid, _start) in enumerate(jobs):
            if t.type == "process":
                try:
                    env = self._env(t)
                    spawn, collect = sh.start_line(n, self.component_dir(t.app_id, t.path),
                                                   self._cwd(t), env["CDDLM_COMPONENT"], env,
                                                   [str(a) for a in t.attributes["argv"]])
                except (Escape, ValueError) as e:
                    now_known.append((key, Outcome("failed", "cannot start: %s" % e)))
                    continue
                spawns.append(spawn)
                collects.append(collect)
            elif t.type == "file":
                full = self._file(t)
                if full is None:
                    now_known.append((key, Outcome("failed", "file %s is missing" % t.attributes.get("path"))))
                else:
                    rounds.add_file(key, full)
            elif t.type == "probe":
                rounds.add_probe(key, t.attributes)
            else:
                now_known.append((key, Outcome("running")))
        if now_known:
            report(now_known)
        answers = self._first(["P="] + spawns + collects) if spawns else {}
        started = []
        for n, (key, t, _pid, _start) in enumerate(jobs):
            words = answers.get(n) if t.type == "process" else None
            if t.type != "process" or any(k is key for k, _ in now_known):
                continue
            pid = sh.pid_of(words[1]) if words and words[0] == "run" and len(words) == 3 else None
            if pid is None:
                started.append((key, Outcome("failed", "cannot start %s on host %s: %s" % (
                    t.attributes["argv"][0], self.host.name,
                    " ".join(words[1:])[:200] if words else "no answer"))))
                continue
            begun = words[2] if words[2] != "-" else sh.ENDED_AT_START
            base = dict(pid=pid, pid_start=begun, runtime={
                "pid": pid, "host": self.host.name, "workdir": self.component_dir(t.app_id, t.path)})
            ready = t.attributes.get("readiness")
            if ready and not t.attributes.get("run_to_completion"):
                problem = rounds.add_process(key, t, ready, base)
                if problem is not None:
                    started.append((key, problem))
            else:
                started.append((key, Outcome("running", **base)))
        if started:
            report(started)
        rounds.wait()

    # -- check ------------------------------------------------------------------------------------
    def survey(self, procs: list[tuple[str, str, int | None]]) -> None:
        """One look at all of this host's processes ``procs`` (app id, path, pid) of a liveness
        pass: the checks that follow read its answers."""
        procs = [p for p in procs if p[2]]
        if not procs:
            return
        lines = ["lv %d %d - %s" % (n, pid, sh.q(self.component_dir(app_id, path)))
                 for n, (app_id, path, pid) in enumerate(procs)]
        if self._root is not None:      # and the logs past the cap rotated, as locally
            lines.append("cap %s %d" % (sh.q(posixpath.join(self._root, "apps")),
                                        self.settings.limits.max_log_bytes))
        try:
            answers = self._batch(lines)
        except Unreachable:
            return
        now = time.monotonic()
        with self._lock:
            if len(self._seen) > 100_000:
                self._seen.clear()
            for n, (_, _, pid) in enumerate(procs):
                if n in answers:
                    self._seen[pid] = (now, None, answers[n])

    def check(self, t: Target, pid: int | None, started: str | None) -> Outcome | None:
        if t.type != "process":
            return self._check_other(t)
        if not pid:
            return Outcome("failed", "no process recorded")
        with self._lock:
            seen = self._seen.pop(pid, None)
        if seen is None or time.monotonic() - seen[0] > SURVEY_TTL or \
                (seen[2][:1] == ["up"] and started and seen[2][1:2] != [started]):
            # not surveyed (or its pid now names another process): ask about this one
            try:
                words = self._batch(["lv 0 %d %s %s" % (pid, sh.q(started or "-"),
                                                        sh.q(self.component_dir(t.app_id, t.path)))]).get(0)
            except Unreachable:
                return None     # the host monitor decides when silence is a failure
        else:
            words = seen[2]

        out = self.liveness(words)
        if out is not None:
            self.keep_tail(t.app_id, t.path)
        return out

    def keep_tail(self, app_id: str, path: str) -> None:
        """Read a process's stderr tail now, for ``stderr_tail`` to give when asked."""
        tail = "\n".join(self.log_read(app_id, path, "stderr", lines=STDERR_TAIL_LINES)[0])
        with self._lock:
            if len(self._tails) > 1024:
                self._tails.clear()
            self._tails[(app_id, path)] = tail

    @staticmethod
    def liveness(words: list[str] | None) -> Outcome | None:
        """An ``lv`` answer as an outcome: None while up (or unknown)."""
        if not words or words[0] != "end":
            return None
        text, code, sig = sh.ended(words[1] if len(words) > 1 else "-")
        return Outcome("failed", text, exit_code=code, exit_signal=sig)

    def _check_other(self, t: Target) -> Outcome | None:
        from cddlm.application.enactment.sshwait import probe_problem
        try:
            if t.type == "file":
                full = self._file(t)
                words = self._batch(["fx 0 %s" % sh.q(full)]).get(0) if full else ["missing"]
                return None if words and words[0] == "ok" else Outcome("failed", "file was removed")
            if t.type == "probe":
                problem = probe_problem(self, t.attributes)
                return None if problem is None else Outcome("failed", problem)
        except Unreachable:
            return None
        return None

    # -- stop -------------------------------------------------------------------------------------
    def stop(self, t: Target, pid, started, keep_lease) -> Outcome:
        return _one(lambda report: self.stop_many([(None, t, pid, started)], keep_lease, report))

    def stop_many(self, jobs, keep_lease, report: Report) -> None:
        """Every process group signalled with its stop signal in one command, then all waited
        for in rounds, each for its grace period before KILL."""
        from cddlm.application.enactment.sshwait import Stops
        jobs = list(jobs)
        reported: list = []

        def seen(pairs: list) -> None:
            reported.extend(key for key, _ in pairs)
            report(pairs)
        try:
            self._reachable()
            Stops(self, keep_lease, seen).run(jobs)
        except Later:
            if self._abandoned():
                report([(key, Outcome("stopped", "host %s is marked down: its part was abandoned"
                                      % self.host.name)) for key, *_ in jobs
                        if not any(key is k for k in reported)])
                return
            raise

    def _abandoned(self) -> bool:
        """Whether an operator (not the host monitor) marked this host down."""
        with self.store.read() as conn:
            down = repo.down_hosts(conn)
        return self.host.name in down and not (down[self.host.name] or "").startswith(DOWN_PREFIX)

    def _reachable(self) -> None:
        """The host answers (its directory known), else ``Later``: the engine asks again."""
        try:
            self.root()
        except Unreachable as e:
            raise Later(1.0, str(e)) from None

    # -- logs and values --------------------------------------------------------------------------
    def remove_app(self, app_id: str) -> None:
        try:
            self.root()
            self.link.run("rm -rf %s" % sh.q(self.app_dir(app_id)))
        except Unreachable as e:
            log.warning("host %s: the files of %s stay (%s)", self.host.name, app_id, e)

    def stderr_tail(self, app_id: str, path: str, lines: int = STDERR_TAIL_LINES) -> str:
        """The tail read when the process was seen ending (``keep_tail``), never read now."""
        with self._lock:
            return self._tails.pop((app_id, path), "")

    def log_tail(self, app_id: str, path: str, stream: str, lines: int, max_bytes: int = 8192) -> list[str]:
        return self.log_read(app_id, path, stream, lines=lines, max_bytes=max_bytes)[0]

    def log_read(self, app_id: str, path: str, stream: str, *, lines: int = 0,
                 offset: int | None = None, max_bytes: int = 8192) -> tuple[list[str], int]:
        """As ``LocalRunner.log_read``, read over the host's connection."""
        if stream not in ("stdout", "stderr"):
            raise ValueError(stream)
        try:
            self.root()
            got = self.link.run(sh.script(["lg 0 x %s %s %d" % (
                sh.q(posixpath.join(self.component_dir(app_id, path), stream + ".log")),
                "-" if offset is None else int(offset), max(1, max_bytes))]))
        except Unreachable:
            return [], offset or 0
        found = sh.parse_logs(got.stdout)[0].get((0, "x"))
        if found is None:
            return [], offset or 0
        return log_lines(found[1], found[0], offset, lines, max_bytes)

    def ports(self, pid: int, started: str | None = None) -> list[int]:
        """The TCP ports process ``pid`` listens on there (empty when unknown)."""
        return self.ports_of([pid]).get(pid, [])

    def ports_of(self, pids: list[int]) -> dict[int, list[int]]:
        """The listening TCP ports of processes there, one command for all."""
        try:
            answers = self._batch(["pt %d %d" % (n, int(pid)) for n, pid in enumerate(pids)])
        except Unreachable:
            return {}
        return {pid: sh.ports(answers.get(n) or []) for n, pid in enumerate(pids)}


