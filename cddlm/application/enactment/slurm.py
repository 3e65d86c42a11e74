"""The Slurm runner: enacts the components placed on a host whose agent is ``slurm:NODE`` (or
``slurm``: the node named like the host) as batch jobs pinned to that node.

Placement is the portal's (its solver chose the host); Slurm is told exactly where: ``sbatch
--parsable -w NODE -J <stable name> --comment <app, generation, path> -o/-e <the component's
logs> --no-requeue``, with the component's ``cpu`` and ``memory`` (MiB) demands as
``--cpus-per-task`` and ``--mem``. sbatch runs with the component's environment, which the job
gets; its script, given on sbatch's standard input, ``exec``s the component's argv, so the job
is the process and its signals are the process's.

Identity: a job's id is recorded as the component's pid, and its submit time as the pid's start
time (``slurm:<time>``: no process of this machine ever matches it). A start looks before it
submits: a live job of this user with the component's name and comment is adopted, so a start
repeated after a portal crash never makes a second job; a stop without a recorded id looks the
same way. Liveness reads one ``squeue --json`` per sweep for every job of every Slurm host
(``slurmctl.Slurm`` shares it). Stopping sends the component's signal to the batch step
(``scancel --signal=SIG --batch``), and cancels the job after its grace.

One runner serves every host of the cluster, so the engine hands it a batch's components on
all nodes at once. Logs are the job's output files, in the component's directory under
``HOSTS_DIR/slurm`` (``--hosts-dir``): that folder must be on a filesystem both the portal and
the nodes reach at the same path. Files and probes are the
local runner's (the portal writes the files there, and probes from where it runs).

Node failures: the host monitor (``SlurmNodes``) marks a host down when its node is ``DOWN``
or ``NOT_RESPONDING``, naming Slurm's reason, which fails its components (and cancels their
jobs); a job that ends ``NODE_FAIL`` fails its component with the node's reason.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable, Iterable

from sqlalchemy import select

from cddlm.application.enactment import logs
from cddlm.application.enactment.local import (READINESS_TIMEOUT, Later, LocalRunner, Outcome,
                                               Report, Target, _run_all, _Wait, _wait_all,
                                               readiness)
from cddlm.application.enactment.slurmctl import Job, Slurm, SlurmUnavailable
from cddlm.application.hosts import Host
from cddlm.application.store import Store
from cddlm.application.tables import hosts as hosts_table
from cddlm.budget import PatternError, user_regex
from cddlm.config import Settings

log = logging.getLogger(__name__)

AGENT = "slurm"
DOWN_PREFIX = "slurm:"       # the reason the node monitor gives; only it lifts such a mark
STOP_POLL = 0.2              # seconds between looks at stopping jobs
GIVE_UP = 10.0               # seconds after the cancel a stop stops waiting (Slurm ends the job)


def is_slurm_agent(agent: str) -> bool:
    return agent == AGENT or agent.startswith(AGENT + ":")


def node_of(host: Host) -> str:
    return host.agent.partition(":")[2] or host.name


def job_name(app_id: str, path: str) -> str:
    """The stable name of a component's jobs (the comment says whose they are)."""
    return "cddlm-" + hashlib.sha256(("%s|%s" % (app_id, path)).encode()).hexdigest()[:20]


def job_comment(app_id: str, generation: int, path: str) -> str:
    return "cddlm app=%s gen=%d path=%s" % (app_id, generation, path)


def _comment_fields(comment: str) -> dict[str, str]:
    if not comment.startswith("cddlm "):
        return {}
    out: dict[str, str] = {}
    for key in ("app", "gen", "path"):
        marker = key + "="
        at = comment.find(" " + marker)
        if at < 0:
            return {}
        rest = comment[at + 1 + len(marker):]
        out[key] = rest if key == "path" else rest.split(" ", 1)[0]
    return out


def identity(job: Job) -> str:
    """What the store keeps as the job's "start time": with its id, the job."""
    return "slurm:%d" % job.submitted


def ended(job: Job, node_reason: str | None = None) -> Outcome:
    """How a job that is no longer running ended, as the local runner says it of a process."""
    where = "job %d on node %s" % (job.id, job.node or "?")
    status = job.exit_status
    if job.state == "NODE_FAIL":
        return Outcome("failed", "%s: the node failed%s" % (
            where, ": " + node_reason if node_reason else ""), exit_signal="KILL")
    if job.state in ("COMPLETED", "FAILED", "COMPLETING") or (job.state == "CANCELLED" and status):
        if status & 0x7F:
            name = _signal_name(status & 0x7F)
            return Outcome("failed", "killed by signal %s (%s)" % (name, where), exit_signal=name)
        code = status >> 8
        if job.state == "CANCELLED":
            return Outcome("failed", "%s was cancelled" % where, exit_code=code)
        return Outcome("failed", "exited with status %d (%s)" % (code, where), exit_code=code)
    return Outcome("failed", "%s ended %s%s" % (where, job.state,
                                                " (%s)" % job.reason if job.reason not in ("", "None") else ""))


def _signal_name(number: int) -> str:
    import signal
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


class SlurmRunner:
    """The components of every host of one Slurm cluster (each host a node): one runner, so
    that the engine hands it a whole batch, all nodes' shares, at once (one look, one cancel per
    signal, one wait). Their files are in one folder (``root``), on the shared filesystem."""

    remote = False      # attributes are resolved here, as for a local host

    def __init__(self, slurm: Slurm, root: str, settings: Settings):
        self.slurm = slurm
        self.settings = settings
        self.nodes: dict[str, str] = {}         # host name -> its node
        self.files = LocalRunner(AGENT, root, settings)   # directories, logs, files, probes
        self.uid = os.getuid()

    def add(self, host: Host) -> "SlurmRunner":
        """Run the components of ``host`` too (on its node)."""
        self.nodes[host.name] = node_of(host)
        return self

    def node(self, host: str) -> str:
        return self.nodes.get(host, host)

    # -- places and logs: the local runner's, on the shared filesystem ---------------------------
    def component_dir(self, app_id: str, path: str) -> str:
        return self.files.component_dir(app_id, path)

    def stderr_tail(self, app_id: str, path: str, lines: int = 20) -> str:
        return self.files.stderr_tail(app_id, path, lines)

    def log_read(self, *args, **kwargs) -> tuple[list[str], int]:
        return self.files.log_read(*args, **kwargs)

    def remove_app(self, app_id: str) -> None:
        """The application is destroyed: cancel any job of it left (one whose start was never
        recorded), then remove its files."""
        try:
            jobs, _ = self.slurm.jobs(since=time.monotonic())
            left = [j.id for j in jobs.values() if j.live and self._ours(j)
                    and _comment_fields(j.comment).get("app") == app_id]
            self.slurm.cancel(left)
        except SlurmUnavailable as e:
            log.warning("cannot look for jobs of %s left in Slurm: %s", app_id, e)
        self.files.remove_app(app_id)

    # -- finding a component's job ----------------------------------------------------------------
    def _ours(self, job: Job, node: str | None = None) -> bool:
        return job.user_id == self.uid and job.name.startswith("cddlm-") and \
            (node is None or job.node in ("", node))

    def _find(self, t: Target, job_id: int | None, started: str | None,
              jobs: dict[int, Job]) -> Job | None:
        """The component's live job: the recorded one, else one of this user with its name
        and comment (a submit whose answer was lost)."""
        known = jobs.get(job_id or 0)
        if known is not None and known.live and (not started or identity(known) == started):
            return known
        name = job_name(t.app_id, t.path)
        for job in jobs.values():
            fields = _comment_fields(job.comment)
            if job.live and job.name == name and self._ours(job, self.node(t.host)) and \
                    fields.get("app") == t.app_id and fields.get("path") == t.path:
                return job
        return None

    # -- deploy -----------------------------------------------------------------------------------
    def deploy(self, t: Target) -> Outcome:
        if t.type != "process":
            out = self.files.deploy(t)
            if "host" in out.runtime:
                out.runtime["host"] = t.host
            return out
        if t.user:
            return Outcome("failed", "components on Slurm hosts run as the portal's user: "
                                     "--run-as is not supported there (host %s)" % t.host)
        try:
            workdir = self.files._make_dirs(t, None)
        except OSError as e:
            return Outcome("failed", "cannot create the directory of %s: %s" % (t.path, e))
        return Outcome("deployed", runtime={"workdir": workdir, "host": t.host,
                                            "node": self.node(t.host)})

    # -- start ------------------------------------------------------------------------------------
    def start(self, t: Target, known_pid: int | None, known_start: str | None, keep_lease) -> Outcome:
        got: list = []
        self.start_many([(None, t, known_pid, known_start)], keep_lease, got.extend)
        return got[0][1]

    def start_many(self, jobs: Iterable[tuple[Any, Target, int | None, str | None]],
                   keep_lease: Callable[[], None], report: Report) -> None:
        """Submit (or adopt) each component's job, then wait for them together: running, and
        ready where a readiness condition says so. ``Later`` when Slurm does not answer."""
        jobs = list(jobs)
        others = [j for j in jobs if j[1].type != "process"]
        if others:
            self.files.start_many(others, keep_lease, report)
        mine = [j for j in jobs if j[1].type == "process"]
        if not mine:
            return
        try:
            # one look for the whole batch: what an earlier, interrupted start submitted is
            # there; what this batch submits it knows (a look per submit cost O(N^2))
            seen, _ = self.slurm.jobs(since=time.monotonic())
            ids = self._submit_all(mine, seen, keep_lease, report)
        except SlurmUnavailable as e:
            raise Later(2.0, str(e)) from None
        _run_all([(key, t, ids[n]) for n, (key, t, _, _) in enumerate(mine) if n in ids],
                 self._starting, keep_lease, report)

    def _submit_all(self, mine: list[tuple], seen: dict[int, Job], keep_lease: Callable[[], None],
                    report: Report) -> dict[int, int]:
        """Each component's job (by its place in ``mine``): its live job in ``seen``, or one
        submitted now, ``Settings.slurm_submits`` at once. ``SlurmUnavailable`` once the others
        are done when one could not be submitted (the retry finds those that were)."""
        ids: dict[int, int] = {}
        todo: list[tuple[int, Target]] = []
        for n, (key, t, known_id, known_start) in enumerate(mine):
            if t.user:
                report([(key, Outcome("failed", "components on Slurm hosts run as the portal's "
                                                "user: --run-as is not supported there (host %s)"
                                      % t.host))])
                continue
            job = self._find(t, known_id, known_start, seen)
            if job is not None:
                ids[n] = job.id
            else:
                todo.append((n, t))
        failed: SlurmUnavailable | None = None
        with ThreadPoolExecutor(max(1, self.settings.slurm_submits),
                                thread_name_prefix="cddlm-sbatch") as pool:
            futures = {pool.submit(self._submit, t): n for n, t in todo}
            for done in as_completed(futures):
                try:
                    ids[futures[done]] = done.result()
                except SlurmUnavailable as e:
                    failed = e
                keep_lease()
        if failed is not None:
            raise failed
        return ids

    def _submit(self, t: Target) -> int:
        workdir = self.files._make_dirs(t, None)
        env = self.files._env(t, workdir)
        node = self.node(t.host)
        env.update(CDDLM_HOST=t.host, CDDLM_NODE=node)
        cwd = self.files._cwd(t, workdir)
        script = "#!/bin/sh\nexec %s\n" % " ".join(shlex.quote(str(a)) for a in t.attributes["argv"])
        options = ["-w", node, "-J", job_name(t.app_id, t.path),
                   "--comment", job_comment(t.app_id, t.generation, t.path),
                   "-o", os.path.join(workdir, "stdout.log"), "-e", os.path.join(workdir, "stderr.log"),
                   "--open-mode=append", "--no-requeue", "--chdir", cwd]
        demand = t.attributes.get("demand") or {}
        if demand.get("cpu"):
            options.append("--cpus-per-task=%d" % max(1, -(-float(demand["cpu"]) // 1)))
        if demand.get("memory"):
            options.append("--mem=%dM" % max(1, -(-float(demand["memory"]) // 1)))
        return self.slurm.submit(script, options, env)

    def _starting(self, t: Target, job_id: int) -> "_Wait":
        """Wait for the job to run (failing it after ``slurm_pending_timeout`` in the queue),
        then for its readiness condition."""
        ready = t.attributes.get("readiness")
        ready = dict(ready) if isinstance(ready, dict) and ready and not t.attributes.get(
            "run_to_completion") else None
        workdir = self.component_dir(t.app_id, t.path)
        node = self.node(t.host)
        since = time.monotonic()
        state: dict[str, Any] = {"running": None}
        follower = None
        if ready and "log" in ready:
            try:
                follower = logs.Follower(self.files.app_dir(t.app_id), t.path, user_regex(
                    "(?m)" + str(ready["log"]), self.settings.limits.max_pattern_chars + 4))
            except PatternError as e:
                return self._failing(job_id, Outcome("failed", "readiness log pattern: %s" % e))
        timeout = float((ready or {}).get("timeout") or READINESS_TIMEOUT)

        def poll() -> Outcome | None:
            try:
                jobs, top = self.slurm.jobs()
            except SlurmUnavailable as e:       # asked again at the next poll, for a while
                if time.monotonic() - since > self.settings.slurm_pending_timeout:
                    return Outcome("failed", "job %d: Slurm gave no answer for %g s: %s" % (
                        job_id, self.settings.slurm_pending_timeout, e), pid=job_id)
                return None
            job = jobs.get(job_id)
            if job is None:
                if job_id > top:
                    return None     # newer than the snapshot
                return Outcome("failed", "job %d vanished from Slurm before it ran" % job_id)
            base = dict(pid=job.id, pid_start=identity(job), runtime={
                "job": job.id, "node": job.node or node, "host": t.host, "workdir": workdir})
            if job.state in ("PENDING", "CONFIGURING", "REQUEUED"):
                if time.monotonic() - since > self.settings.slurm_pending_timeout:
                    return wait.become(self._failing(job_id, Outcome(
                        "failed", "job %d still pending on node %s after %g s (%s)" % (
                            job_id, node, self.settings.slurm_pending_timeout, job.reason),
                        **base)))
                return None
            if not job.live:
                return self._ended(job, base)
            if ready is None:
                return Outcome("running", **base)
            if state["running"] is None:
                state["running"] = time.monotonic()
                if "tcp" in ready and ":" not in str(ready["tcp"]):     # a port of its node
                    ready["tcp"] = "%s:%s" % (self._address(node), ready["tcp"])
            port = str(ready.get("tcp") or "").rpartition(":")[2]
            if port.isdigit():      # the port it listens on, as its readiness found it
                base["runtime"]["ports"] = [int(port)]
            problem = readiness(ready, self.files.app_dir(t.app_id), t.path,
                                self.settings.probe_networks, follower)
            if problem is None:
                return Outcome("running", **base)
            if time.monotonic() - state["running"] > timeout:
                return wait.become(self._failing(job_id, Outcome(
                    "failed", "not ready after %gs: %s (job %d on node %s)" % (
                        timeout, problem, job_id, node), **base)))
            return None
        wait = _Wait(poll, 0.1)
        return wait

    def _address(self, node: str) -> str:
        found = self.slurm.nodes().get(node) or {}
        return str(found.get("address") or node)

    def _ended(self, job: Job, base: dict | None = None) -> Outcome:
        reason = None
        if job.state == "NODE_FAIL":
            try:
                node = self.slurm.nodes(fresh=True).get(job.node) or {}
                reason = str(node.get("reason") or "") or None
            except SlurmUnavailable:
                reason = None
        out = ended(job, reason)
        if base:
            out.pid, out.pid_start, out.runtime = base["pid"], base["pid_start"], base["runtime"]
        return out

    def _failing(self, job_id: int, failed: Outcome) -> "_Wait":
        """``failed``, once the job is cancelled (TERM to its script, the rest 2 s later)."""
        return self._stopping(job_id, "TERM", 2.0).ending_with(failed)

    # -- check ------------------------------------------------------------------------------------
    def check(self, t: Target, job_id: int | None, started: str | None) -> Outcome | None:
        if t.type != "process":
            return self.files.check(t, job_id, started)
        if not job_id:
            return Outcome("failed", "no job recorded")
        try:
            jobs, top = self.slurm.jobs()
        except SlurmUnavailable as e:
            log.info("cannot check the jobs of host %s: %s", t.host, e)
            return None     # Slurm's silence is not the job's failure
        job = jobs.get(job_id)
        if job is None or (started and identity(job) != started):
            if job_id > top:
                return None
            return Outcome("failed", "job %d is no longer known to Slurm (it ended more than "
                                     "MinJobAge ago; exit status unknown)" % job_id)
        return None if job.live else self._ended(job)

    # -- stop -------------------------------------------------------------------------------------
    def stop(self, t: Target, job_id: int | None, started: str | None, keep_lease) -> Outcome:
        got: list = []
        self.stop_many([(None, t, job_id, started)], keep_lease, got.extend)
        return got[0][1]

    def stop_many(self, jobs: Iterable[tuple[Any, Target, int | None, str | None]],
                  keep_lease: Callable[[], None] | None, report: Report) -> None:
        """Send each job its component's signal (one ``scancel`` per signal), then wait for them
        together, cancelling each after its grace period."""
        jobs = list(jobs)
        others = [j for j in jobs if j[1].type != "process"]
        if others:
            self.files.stop_many(others, keep_lease, report)
        try:
            # a recent look will do, unless a job to stop may be newer than it
            live, top = self.slurm.jobs()
            if any(not job_id or job_id > top for _, t, job_id, _ in jobs if t.type == "process"):
                live, top = self.slurm.jobs(since=time.monotonic())
            found: list[tuple[Any, Job | None, str, float]] = []
            for key, t, job_id, started in jobs:
                if t.type != "process":
                    continue
                sig = str(t.attributes.get("stop_signal") or "TERM")
                grace = t.attributes.get("grace")
                found.append((key, self._find(t, job_id, started, live), sig,
                              float(grace) if grace is not None else 5.0))
            report([(key, Outcome("stopped")) for key, job, _, _ in found if job is None])
            found = [f for f in found if f[1] is not None]
            by_signal: dict[str, list[int]] = {}
            for _, job, sig, _ in found:
                if job.state == "RUNNING":
                    by_signal.setdefault(sig, []).append(job.id)
            pending = [job.id for _, job, _, _ in found if job.state != "RUNNING"]
            self.slurm.cancel(pending)
            for sig, ids in by_signal.items():
                self.slurm.cancel(ids, sig)
        except SlurmUnavailable as e:
            raise Later(2.0, str(e)) from None
        waits = []
        for key, job, sig, grace in found:
            w = self._stopping(job.id, None, grace, job)
            w.key = key
            waits.append(w)
        _wait_all(waits, keep_lease, report)

    def _stopping(self, job_id: int, sig: str | None, grace: float, job: Job | None = None) -> "_Wait":
        """Wait for the job to end: ``sig`` to its batch step now (None: already sent), the
        whole job cancelled after ``grace`` seconds; after that Slurm ends it (on its node,
        when the node answers), and the wait ends ``GIVE_UP`` seconds later in any case."""
        if sig is not None:
            try:
                self.slurm.cancel([job_id], sig)
            except SlurmUnavailable as e:   # (a pending job takes no signal) cancelled after grace
                log.info("could not signal job %d: %s", job_id, e)
        state = {"cancelled": False, "deadline": time.monotonic() + grace}
        known = {"job": job}

        def stopped(info: str | None = None) -> Outcome:
            out = Outcome("stopped", info, pid=job_id)
            j = known["job"]
            if j is not None:
                out.pid_start = identity(j)
                if not j.live and j.state in ("COMPLETED", "FAILED"):
                    out.exit_code, out.exit_signal = ended(j).exit_code, ended(j).exit_signal
            return out

        def poll() -> Outcome | None:
            try:
                jobs, top = self.slurm.jobs()
            except SlurmUnavailable:
                jobs, top = None, 0
            if jobs is not None:
                j = jobs.get(job_id)
                if j is None and job_id <= top:
                    return stopped()
                if j is not None:
                    known["job"] = j
                    if not j.live and j.state != "COMPLETING":
                        return stopped()
            if time.monotonic() >= state["deadline"]:
                if state["cancelled"]:
                    return stopped("job %d was cancelled; Slurm ends it on node %s when the "
                                   "node answers" % (job_id, getattr(known["job"], "node", "?")))
                try:
                    self.slurm.cancel([job_id])
                except SlurmUnavailable:
                    pass
                state.update(cancelled=True,
                             deadline=time.monotonic() + GIVE_UP + self.settings.slurm_timeout)
            return None
        return _Wait(poll, STOP_POLL)


class SlurmNodes:
    """The host monitor of Slurm hosts: one ``sinfo --json`` per round; a host whose node is
    ``DOWN`` or ``NOT_RESPONDING`` is marked down with Slurm's reason (which fails its
    components), and marked up when the node is back."""

    def __init__(self, store: Store, slurm: Slurm, nodes: dict[str, str],
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.slurm = slurm
        self.nodes = nodes          # host name -> node name
        self.clock = clock

    def check(self) -> tuple[list[str], list[str]]:
        """One round; returns (hosts newly down, hosts back up)."""
        from cddlm.application.enactment.remote import Agents
        try:
            down = self.slurm.down()
        except SlurmUnavailable as e:
            log.warning("cannot read the Slurm nodes: %s", e)
            return [], []
        now = self.clock()
        went_down, came_up = [], []
        with self.store.write() as conn:
            marks = {r.name: r for r in conn.execute(select(hosts_table)).all()}
            for host, node in self.nodes.items():
                why = down.get(node)
                mark = marks.get(host)
                if why and not (mark is not None and mark.down):
                    Agents._mark(conn, host, True, DOWN_PREFIX + " " + why, now)
                    went_down.append(host)
                elif not why and mark is not None and mark.down and \
                        (mark.reason or "").startswith(DOWN_PREFIX):
                    Agents._mark(conn, host, False, None, now)
                    came_up.append(host)
        for host in went_down:
            log.warning("host %s is down: %s", host, down[self.nodes[host]])
        for host in came_up:
            log.info("host %s: its Slurm node is back: marked up", host)
        return went_down, came_up


def cluster_datacenter(settings: Settings) -> dict:
    """``--datacenter slurm:``: the datacenter of the cluster this machine submits to."""
    data, _ = Slurm(settings.slurm_timeout).datacenter()
    return data
