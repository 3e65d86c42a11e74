"""The Slurm runner: enacts the components placed on a host whose agent is ``slurm:NODE`` (or
``slurm``: the node named like the host) as batch jobs pinned to that node.

Placement is the portal's (its solver chose the host); Slurm is told exactly where. A node's
share of a batch (one application's components with the same demands) is one job array:
``sbatch --parsable -w NODE --array=0-(k-1) -J <stable name> --comment <app, generation, array
key> --no-requeue``, its script dispatching on ``$SLURM_ARRAY_TASK_ID`` to each component's
output files, directory, environment and argv (``exec``: the task is the process). A component
alone (a restart) is a job of its own, ``-J <stable name> --comment <app, generation, path>
-o/-e <its logs>``. The ``cpu`` and ``memory`` (MiB) demands are ``--cpus-per-task`` and
``--mem``. sbatch runs with the environment (an array's: what its tasks share), which the job
gets.

Identity: a job's (an array task's own) id is recorded as the component's pid, and its submit
time as the pid's start time (``slurm:<time>``, a task's ``slurm:<time>:ARRAY_TASK``: no process
of this machine ever matches it). A start looks before it submits: a live job of this user with
the component's name and comment is adopted, and so is its task in a live array of its
application, which an array's manifest (task index -> path, written before its sbatch) names;
so a start repeated after a portal crash never makes a second job or array; a stop without a
recorded id looks the same way. Liveness reads one ``squeue --json`` per sweep for every job of
every Slurm host (``slurmctl.Slurm`` shares it). Stopping sends the component's signal to the
batch step (``scancel --signal=SIG --batch JOBID`` or ``ARRAY_TASK``: a task alone), and cancels
the job after its grace.

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

import contextlib
import hashlib
import logging
import os
import re
import shlex
import shutil
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from sqlalchemy import select

from cddlm.application.enactment import confine, logs, procsh, states
from cddlm.application.enactment.confine import Escape
from cddlm.application.enactment.local import (READINESS_TIMEOUT, Later, LocalRunner, Outcome,
                                               Report, Target, _run_all, _Wait, _wait_all,
                                               readiness)
from cddlm.application.enactment.slurmctl import Job, Slurm, SlurmUnavailable, task_ref
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
MAX_ARRAY = 1000             # tasks of one job array (Slurm's MaxArraySize is 1001 by default)
ARRAYS = "arrays"            # the folder of the job arrays' manifests, by application
ARRAY_KEY = re.compile(r"[0-9a-f]{20}")
SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_slurm_agent(agent: str) -> bool:
    return agent == AGENT or agent.startswith(AGENT + ":")


def node_of(host: Host) -> str:
    return host.agent.partition(":")[2] or host.name


def job_name(app_id: str, path: str) -> str:
    """The stable name of a component's jobs (the comment says whose they are)."""
    return "cddlm-" + hashlib.sha256(("%s|%s" % (app_id, path)).encode()).hexdigest()[:20]


def job_comment(app_id: str, generation: int, path: str) -> str:
    return "cddlm app=%s gen=%d path=%s" % (app_id, generation, path)


def array_comment(app_id: str, generation: int, key: str) -> str:
    """The comment of a share submitted as one job array: its tasks' components are in the
    array's manifest, ``key`` (``SlurmRunner._manifest``)."""
    return "cddlm app=%s gen=%d array=%s" % (app_id, generation, key)


def _comment_fields(comment: str) -> dict[str, str]:
    """app, gen, and path (one component's job) or array (a share's job array)."""
    if not comment.startswith("cddlm "):
        return {}
    out: dict[str, str] = {}
    for key in ("app", "gen", "path"):
        marker = key + "="
        at = comment.find(" " + marker)
        if at < 0 and key == "path":
            at, marker, key = comment.find(" array="), "array=", "array"
        if at < 0:
            return {}
        rest = comment[at + 1 + len(marker):]
        out[key] = rest if key == "path" else rest.split(" ", 1)[0]
    return out


def identity(job: Job) -> str:
    """What the store keeps as the job's "start time": with its id, the job (an array's task:
    with the array's id and its index, ``ARRAY_TASK``, which name it in Slurm)."""
    if job.array_id and job.task is not None:
        return "slurm:%d:%d_%d" % (job.submitted, job.array_id, job.task)
    return "slurm:%d" % job.submitted


Ref = int | tuple[int, int]         # a job's id, or (array id, index) of an array's task


def recorded_task(started: str | None) -> tuple[int, int] | None:
    """The array task an identity (``identity``) names; None for a plain job's."""
    array, sep, task = (started or "").partition(":")[2].partition(":")[2].partition("_")
    return (int(array), int(task)) if sep and array.isdigit() and task.isdigit() else None


def ref_text(ref) -> str:
    return task_ref(*ref) if isinstance(ref, tuple) else str(ref)


def _where(job: Job) -> str:
    if job.array_id and job.task is not None:
        return "job %d (array task %s) on node %s" % (job.id, job.ref, job.node or "?")
    return "job %d on node %s" % (job.id, job.node or "?")


def ended(job: Job, node_reason: str | None = None) -> Outcome:
    """How a job that is no longer running ended, as the local runner says it of a process."""
    where = _where(job)
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
            left = [j.ref for j in jobs.values() if j.live and self._ours(j)
                    and _comment_fields(j.comment).get("app") == app_id]
            self.slurm.cancel(left, side_by_side=self.settings.slurm_submits)
        except SlurmUnavailable as e:
            log.warning("cannot look for jobs of %s left in Slurm: %s", app_id, e)
        self.files.remove_app(app_id)
        shutil.rmtree(self._arrays_dir(app_id), ignore_errors=True)

    # -- finding a component's job ----------------------------------------------------------------
    def _ours(self, job: Job, node: str | None = None) -> bool:
        return job.user_id == self.uid and job.name.startswith("cddlm-") and \
            (node is None or job.node in ("", node))

    def _look(self, jobs: dict[int, Job], top: int, ref: Ref) -> tuple[Job | None, bool]:
        """The job (or array task) ``ref`` in a snapshot of ``Slurm.jobs``, and whether the
        snapshot knows it or its array (one newer than the snapshot is not there yet)."""
        if isinstance(ref, tuple):
            return self.slurm.task(jobs, *ref), ref[0] <= top
        return jobs.get(ref), ref <= top

    @staticmethod
    def _ref(job: Job) -> Ref:
        return (job.array_id, job.task) if job.array_id and job.task is not None else job.id

    def _find(self, t: Target, job_id: int | None, started: str | None,
              jobs: dict[int, Job], arrays: dict[tuple[str, str], tuple[int, int]]) -> Job | None:
        """The component's live job: the recorded one, else one of this user with its name
        and comment (a submit whose answer was lost), else its task in a live job array of
        its application (``arrays``: what their manifests say)."""
        task = recorded_task(started)
        known = self.slurm.task(jobs, *task) if task else jobs.get(job_id or 0)
        if known is not None and known.live and (task or not started or identity(known) == started):
            return known
        name = job_name(t.app_id, t.path)
        for job in jobs.values():
            fields = _comment_fields(job.comment)
            if job.live and job.name == name and self._ours(job, self.node(t.host)) and \
                    fields.get("app") == t.app_id and fields.get("path") == t.path:
                return job
        task = arrays.get((t.app_id, t.path))
        job = self.slurm.task(jobs, *task) if task else None
        return job if job is not None and job.live and self._ours(job, self.node(t.host)) else None

    def _arrays(self, jobs: dict[int, Job], apps: set[str]) -> dict[tuple[str, str], tuple[int, int]]:
        """(application, path) -> (array id, index) of every live task of this user's job
        arrays of ``apps``, as the arrays' manifests say."""
        found: dict[tuple[str, str], tuple[int, int]] = {}
        read: set[int] = set()
        for job in jobs.values():
            fields = _comment_fields(job.comment)
            if not job.array_id or job.array_id in read or fields.get("app") not in apps or \
                    "array" not in fields or not job.live or not self._ours(job):
                continue
            read.add(job.array_id)
            for index, path in self._manifest(fields["app"], fields["array"]).items():
                task = self.slurm.task(jobs, job.array_id, index)
                if task is not None and task.live:
                    found[(fields["app"], path)] = (job.array_id, index)
        return found

    def _arrays_dir(self, app_id: str) -> str:
        """Where the manifests of an application's job arrays are (beside, not among, the
        components' directories)."""
        return os.path.join(self.files.root, self._arrays_below(app_id))

    def _arrays_below(self, app_id: str) -> str:
        return os.path.join(ARRAYS, os.path.basename(self.files.app_dir(app_id)))

    def _manifest_path(self, app_id: str, key: str) -> str:
        return os.path.join(self._arrays_dir(app_id), key)

    def _manifest(self, app_id: str, key: str) -> dict[int, str]:
        """An array's tasks: index -> component path (written before its submit). It is on the
        folder the nodes write, where a component's program may write too: a line that is not
        an index (ASCII digits, a job array's size at most) and a path is left out."""
        if not ARRAY_KEY.fullmatch(key):
            return {}
        try:
            with open(self._manifest_path(app_id, key), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            return {}
        out = {}
        for line in lines:
            index, _, path = line.partition(" ")
            if index.isascii() and index.isdigit() and len(index) <= 9 and path:
                out[int(index)] = path
        return out

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
            refs = self._submit_all(mine, seen, keep_lease, report)
        except SlurmUnavailable as e:
            raise Later(2.0, str(e)) from None
        _run_all([(key, t, refs[n]) for n, (key, t, _, _) in enumerate(mine) if n in refs],
                 self._starting, keep_lease, report)

    def _submit_all(self, mine: list[tuple], seen: dict[int, Job], keep_lease: Callable[[], None],
                    report: Report) -> dict[int, Ref]:
        """Each component's job (by its place in ``mine``): its live job in ``seen``, or one
        submitted now: a node's share (of one application, with the same demands) as one job
        array, a component alone as a job; ``Settings.slurm_submits`` at once.
        ``SlurmUnavailable`` once the others are done when one could not be submitted (the
        retry finds those that were)."""
        refs: dict[int, Ref] = {}
        arrays = self._arrays(seen, {t.app_id for _, t, _, _ in mine})
        shares: dict[tuple, list[tuple[int, Target, _Prepared]]] = {}
        for n, (key, t, known_id, known_start) in enumerate(mine):
            if t.user:
                report([(key, Outcome("failed", "components on Slurm hosts run as the portal's "
                                                "user: --run-as is not supported there (host %s)"
                                      % t.host))])
                continue
            job = self._find(t, known_id, known_start, seen, arrays)
            if job is not None:
                refs[n] = self._ref(job)
                continue
            try:
                prepared = self._prepare(t)
            except (OSError, Escape) as e:
                report([(key, Outcome("failed", "cannot start %s: %s" % (t.path, e)))])
                continue
            shares.setdefault((t.app_id, t.generation, prepared.node, tuple(prepared.demand)),
                              []).append((n, t, prepared))
        submits: list[Callable[[], dict[int, Ref]]] = []
        for share in shares.values():
            if len(share) == 1:
                n, t, prepared = share[0]
                submits.append(lambda n=n, t=t, p=prepared: {n: self._submit(t, p)})
            else:
                for at in range(0, len(share), MAX_ARRAY):
                    submits.append(lambda part=share[at:at + MAX_ARRAY]: self._submit_array(part))
        failed: SlurmUnavailable | None = None
        with ThreadPoolExecutor(max(1, self.settings.slurm_submits),
                                thread_name_prefix="cddlm-sbatch") as pool:
            for done in as_completed([pool.submit(s) for s in submits]):
                try:
                    refs.update(done.result())
                except SlurmUnavailable as e:
                    failed = e
                keep_lease()
        if failed is not None:
            raise failed
        return refs

    def _prepare(self, t: Target) -> "_Prepared":
        workdir = self.files._make_dirs(t, None)
        env = self.files._env(t, workdir)
        node = self.node(t.host)
        env.update(CDDLM_HOST=t.host, CDDLM_NODE=node)
        demand = t.attributes.get("demand") or {}
        options = []
        if demand.get("cpu"):
            options.append("--cpus-per-task=%d" % max(1, -(-float(demand["cpu"]) // 1)))
        if demand.get("memory"):
            options.append("--mem=%dM" % max(1, -(-float(demand["memory"]) // 1)))
        marker = self._marker(t)
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)       # (an earlier start's: this one's is made when it begins)
        return _Prepared(workdir, self.files._cwd(t, workdir), env, node, options)

    def _marker(self, t: Target) -> str:
        """The file a component's job script makes as it begins on its node (``_launched``),
        beside the application's array manifests; its watcher keeps the program's pid and
        ports there (``on_node``)."""
        return os.path.join(self.files.root, self._marker_below(t.app_id, t.path))

    def _marker_below(self, app_id: str, path: str) -> str:
        return os.path.join(self._arrays_below(app_id), "launched",
                            hashlib.sha256(path.encode()).hexdigest()[:24])

    def _watch(self, t: Target) -> str:
        """The job script's line that makes the marker and starts the watcher of the program
        it ``exec``s next (``procsh.REPORTER``: its pid and listening ports, in the marker)."""
        return 'rp %s "${SLURM_JOB_ID:-0}"' % shlex.quote(self._marker(t))

    def on_node(self, row) -> tuple[int | None, list[int]]:
        """A component's (a ``repository.Component``'s) pid on its node, and the TCP ports it
        listens on there while it runs, as its job's watcher last wrote them in its marker
        (the portal cannot read a node's /proc): (None, []) before the watcher wrote, or
        when what is there is not this job's (an earlier run's) or not a watcher's strict
        form (``procsh.report``). Ports the watcher did not see (a child of the program
        listening) are those its ``tcp`` readiness found, as recorded."""
        report = None
        if row.type == "process" and row.pid:
            try:
                data, _ = confine.read_tail(self.files.root, self._marker_below(row.app_id, row.path),
                                            procsh.MAX_REPORT + 1, 0)
                report = procsh.report(data, row.pid)
            except (Escape, OSError):
                report = None
        pid = report[0] if report else None
        if row.observed not in (states.STARTING, states.RUNNING):
            return pid, []
        return pid, (report[1] if report and report[1] else list(row.runtime.get("ports") or []))

    def _submit(self, t: Target, p: "_Prepared") -> int:
        """One component as a job of its own: its script starts its watcher (``_watch``),
        then ``exec``s its argv."""
        script = "#!/bin/sh\n%s%s\nexec %s\n" % (procsh.REPORTER, self._watch(t), _argv(t))
        options = ["-w", p.node, "-J", job_name(t.app_id, t.path),
                   "--comment", job_comment(t.app_id, t.generation, t.path),
                   "-o", os.path.join(p.workdir, "stdout.log"),
                   "-e", os.path.join(p.workdir, "stderr.log"),
                   "--open-mode=append", "--no-requeue", "--chdir", p.cwd] + p.demand
        return self.slurm.submit(script, options, p.env)

    def _submit_array(self, share: list[tuple[int, Target, "_Prepared"]]) -> dict[int, Ref]:
        """A node's share as one job array: task ``i`` is the share's ``i``th component. Its
        manifest (index -> path) is written first, so that a start repeated after a crash
        finds the array (by its comment) and each component's task in it. The script
        dispatches on ``$SLURM_ARRAY_TASK_ID``: the task's output to its component's logs,
        the environment that differs from the share's, its watcher (``_watch``, with the
        component's environment), its directory, and ``exec`` of its argv (the task is the
        process)."""
        first = share[0][1]
        node = share[0][2].node
        paths = [t.path for _, t, _ in share]
        key = hashlib.sha256(("%s|%s|%d|%d|%s" % (first.app_id, node, first.generation,
                                                  time.time_ns(), "|".join(paths))).encode()
                             ).hexdigest()[:20]
        manifest = self._manifest_path(first.app_id, key)
        os.makedirs(os.path.dirname(manifest), exist_ok=True)
        with open(manifest + ".new", "w", encoding="utf-8") as f:
            f.write("".join("%d %s\n" % (i, path) for i, path in enumerate(paths)))
        os.replace(manifest + ".new", manifest)
        common = dict(share[0][2].env)
        for _, _, p in share[1:]:
            common = {k: v for k, v in common.items() if p.env.get(k) == v}
        lines = ["#!/bin/sh", procsh.REPORTER, 'case "$SLURM_ARRAY_TASK_ID" in']
        for i, (_, t, p) in enumerate(share):
            own = {k: v for k, v in p.env.items() if k not in common}
            exports = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in sorted(own.items())
                               if SHELL_NAME.fullmatch(k))
            odd = " ".join(shlex.quote("%s=%s" % kv) for kv in sorted(own.items())
                           if not SHELL_NAME.fullmatch(kv[0]))
            lines.append("%d) exec >>%s 2>>%s; %s%s; cd %s || exit 1; exec %s%s;;" % (
                i, shlex.quote(os.path.join(p.workdir, "stdout.log")),
                shlex.quote(os.path.join(p.workdir, "stderr.log")),
                "export %s; " % exports if exports else "", self._watch(t), shlex.quote(p.cwd),
                "env %s " % odd if odd else "", _argv(t)))
        lines += ["esac", 'echo "cddlm: no component is task $SLURM_ARRAY_TASK_ID" >&2', "exit 127", ""]
        options = ["-w", node, "--array=0-%d" % (len(share) - 1), "-J", "cddlm-" + key,
                   "--comment", array_comment(first.app_id, first.generation, key),
                   "-o", "/dev/null", "-e", "/dev/null", "--no-requeue",
                   "--chdir", self.files.app_dir(first.app_id)] + share[0][2].demand
        array = self.slurm.submit("\n".join(lines), options, common)
        return {n: (array, i) for i, (n, _, _) in enumerate(share)}

    def _starting(self, t: Target, ref: Ref) -> "_Wait":
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
        name = ref_text(ref)
        if ready and "log" in ready:
            try:
                follower = logs.Follower(self.files.app_dir(t.app_id), t.path, user_regex(
                    "(?m)" + str(ready["log"]), self.settings.limits.max_pattern_chars + 4))
            except PatternError as e:
                return self._failing(ref, Outcome("failed", "readiness log pattern: %s" % e))
        timeout = float((ready or {}).get("timeout") or READINESS_TIMEOUT)

        def poll() -> Outcome | None:
            try:
                jobs, top = self.slurm.jobs()
            except SlurmUnavailable as e:       # asked again at the next poll, for a while
                if time.monotonic() - since > self.settings.slurm_pending_timeout:
                    return Outcome("failed", "job %s: Slurm gave no answer for %g s: %s" % (
                        name, self.settings.slurm_pending_timeout, e))
                return None
            job, knows = self._look(jobs, top, ref)
            if job is None:
                if not knows:
                    return None     # newer than the snapshot
                return Outcome("failed", "job %s vanished from Slurm before it ran" % name)
            base = dict(pid=job.id, pid_start=identity(job), runtime={
                "job": job.ref, "node": job.node or node, "host": t.host, "workdir": workdir})
            if job.state in ("PENDING", "CONFIGURING", "REQUEUED"):
                if time.monotonic() - since > self.settings.slurm_pending_timeout:
                    return wait.become(self._failing(ref, Outcome(
                        "failed", "job %s still pending on node %s after %g s (%s)" % (
                            name, node, self.settings.slurm_pending_timeout, job.reason),
                        **base)))
                return None
            if not job.live:
                return self._ended(job, base)
            if not self._launched(t):       # allocated, its script not begun on the node yet
                if time.monotonic() - since > self.settings.slurm_pending_timeout:
                    return wait.become(self._failing(ref, Outcome(
                        "failed", "job %s allocated on node %s but its script did not begin "
                                  "within %g s (is %s shared with the node?)" % (
                                      name, node, self.settings.slurm_pending_timeout,
                                      self.files.root), **base)))
                return None
            self._cap_logs(t)               # launched: its logs are being written
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
                return wait.become(self._failing(ref, Outcome(
                    "failed", "not ready after %gs: %s (%s)" % (timeout, problem, _where(job)),
                    **base)))
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

    def _failing(self, ref: Ref, failed: Outcome) -> "_Wait":
        """``failed``, once the job is cancelled (TERM to its script, the rest 2 s later)."""
        return self._stopping(ref, "TERM", 2.0).ending_with(failed)

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
        ref = recorded_task(started) or job_id
        job, knows = self._look(jobs, top, ref)
        if job is None or (started and identity(job) != started):
            if not knows:
                return None
            return Outcome("failed", "job %s is no longer known to Slurm (it ended more than "
                                     "MinJobAge ago; exit status unknown)" % ref_text(ref))
        if not job.live:
            return self._ended(job)
        self._cap_logs(t)       # (a job adopted after a restart too)
        return None

    def _cap_logs(self, t: Target) -> None:
        """Keep the job's logs under the cap, as a local component's (``logs.CAPPER``; the
        node writes them, ``--open-mode=append`` or ``>>``, so a truncation leaves no hole):
        looked at on a schedule, since the kernel here hears nothing of a write on another
        machine."""
        logs.CAPPER.watch(self.files.app_dir(t.app_id), t.path,
                          self.settings.limits.max_log_bytes, heard=False)

    # -- stop -------------------------------------------------------------------------------------
    def stop(self, t: Target, job_id: int | None, started: str | None, keep_lease) -> Outcome:
        got: list = []
        self.stop_many([(None, t, job_id, started)], keep_lease, got.extend)
        return got[0][1]

    def stop_many(self, jobs: Iterable[tuple[Any, Target, int | None, str | None]],
                  keep_lease: Callable[[], None] | None, report: Report) -> None:
        """Send each job (or array task) its component's signal (one ``scancel`` per signal),
        then wait for them together, cancelling each after its grace period."""
        jobs = list(jobs)
        others = [j for j in jobs if j[1].type != "process"]
        if others:
            self.files.stop_many(others, keep_lease, report)
        mine = [j for j in jobs if j[1].type == "process"]
        for _, t, _, _ in mine:
            logs.CAPPER.forget(self.component_dir(t.app_id, t.path))
        try:
            # a recent look will do, unless a job to stop may be newer than it
            live, top = self.slurm.jobs()
            if any(not job_id or (recorded_task(started) or (job_id,))[0] > top
                   for _, _, job_id, started in mine):
                live, top = self.slurm.jobs(since=time.monotonic())
            unrecorded = {t.app_id for _, t, job_id, _ in mine if not job_id}
            arrays = self._arrays(live, unrecorded) if unrecorded else {}
            found: list[tuple[Any, Job | None, str, float]] = []
            for key, t, job_id, started in mine:
                sig = str(t.attributes.get("stop_signal") or "TERM")
                grace = t.attributes.get("grace")
                found.append((key, self._find(t, job_id, started, live, arrays), sig,
                              float(grace) if grace is not None else 5.0, t))
            report([(key, Outcome("stopped")) for key, job, _, _, _ in found if job is None])
            found = [f for f in found if f[1] is not None]
            by_signal: dict[str, list[str]] = {}
            at_once: list[str] = []
            for _, job, sig, _, t in found:
                if job.state == "RUNNING" and self._launched(t):
                    by_signal.setdefault(sig, []).append(job.ref)
                else:
                    at_once.append(job.ref)
            side = self.settings.slurm_submits
            self.slurm.cancel(at_once, side_by_side=side)
            for sig, refs in by_signal.items():
                self.slurm.cancel(refs, sig, side_by_side=side)
        except SlurmUnavailable as e:
            raise Later(2.0, str(e)) from None
        waits = []
        due = _Cancels(self.slurm, self.settings.slurm_submits)
        for key, job, sig, grace, _ in found:
            w = self._stopping(self._ref(job), None, grace, job, due)
            w.key = key
            waits.append(w)
        _wait_all(waits, keep_lease, report)

    def _launched(self, t: Target) -> bool:
        """Whether a job's script has begun on its node: it made its marker (``_marker``,
        removed before each submit). Slurm says RUNNING once it has allocated a job, and the
        nodes launch a share's tasks over seconds: a component is running once its script
        began (``_starting``), and a job not launched yet has no process to give its signal
        and grace to (a signal would wait for the launch), so a stop cancels it at once. One
        launching just then gets Slurm's own cancel: TERM, and KILL after the cluster's
        KillWait."""
        return os.path.exists(self._marker(t))

    def _stopping(self, ref: Ref, sig: str | None, grace: float, job: Job | None = None,
                  due: "_Cancels | None" = None) -> "_Wait":
        """Wait for the job (or array task) to end: ``sig`` to its batch step now (None:
        already sent), the whole job cancelled after ``grace`` seconds (with the others of
        ``due`` whose grace is over too: one scancel for all); after that Slurm ends it (on
        its node, when the node answers), and the wait ends ``GIVE_UP`` seconds later in any
        case."""
        name = ref_text(ref)
        due = due or _Cancels(self.slurm, 1)
        if sig is not None:
            try:
                self.slurm.cancel([name], sig)
            except SlurmUnavailable as e:   # (a pending job takes no signal) cancelled after grace
                log.info("could not signal job %s: %s", name, e)
        state = {"cancelled": False, "deadline": time.monotonic() + grace}
        known = {"job": job}

        def stopped(info: str | None = None) -> Outcome:
            j = known["job"]
            out = Outcome("stopped", info, pid=j.id if j is not None else
                          ref if isinstance(ref, int) else None)
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
                j, knows = self._look(jobs, top, ref)
                if (j is None and knows) or (j is not None and not j.live and j.state != "COMPLETING"):
                    due.drop(name)
                    known["job"] = j or known["job"]
                    return stopped()
                known["job"] = j or known["job"]
            if time.monotonic() >= state["deadline"]:
                if state["cancelled"]:
                    return stopped("job %s was cancelled; Slurm ends it on node %s when the "
                                   "node answers" % (name, getattr(known["job"], "node", "?")))
                due.cancel(name)
                state.update(cancelled=True,
                             deadline=time.monotonic() + GIVE_UP + self.settings.slurm_timeout)
            return None
        due.expect(name, state["deadline"])
        return _Wait(poll, STOP_POLL)


class _Cancels:
    """The cancels after the grace of a batch's stops: the first stop whose grace is over
    cancels every job of the batch whose grace is over too, in one (split) scancel, rather
    than a scancel each one after the other."""

    def __init__(self, slurm: Slurm, side_by_side: int):
        self.slurm, self.side_by_side = slurm, side_by_side
        self.waiting: dict[str, float] = {}     # ref -> when its grace is over

    def expect(self, name: str, deadline: float) -> None:
        self.waiting[name] = deadline

    def drop(self, name: str) -> None:
        self.waiting.pop(name, None)

    def cancel(self, name: str) -> None:
        """Cancel ``name`` (unless an earlier call did) and the others whose grace is over."""
        if name not in self.waiting:
            return
        now = time.monotonic()
        names = [n for n, deadline in self.waiting.items() if deadline <= now] or [name]
        for n in names:
            del self.waiting[n]
        try:
            self.slurm.cancel(names, side_by_side=self.side_by_side)
        except SlurmUnavailable as e:
            log.info("could not cancel %d jobs: %s", len(names), e)


@dataclass
class _Prepared:
    """What a component's submit needs, made before it (directories made, names resolved)."""
    workdir: str
    cwd: str
    env: dict[str, str]
    node: str
    demand: list[str]       # --cpus-per-task, --mem


def _argv(t: Target) -> str:
    return " ".join(shlex.quote(str(a)) for a in t.attributes["argv"])


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
