"""The Slurm commands the portal uses, each bounded by a deadline: ``sbatch`` (submit),
``squeue --json`` (every job, one call per sweep shared by all of a portal's Slurm hosts),
``sinfo --json`` (the nodes), ``scancel`` and ``scontrol show topology``.

The portal's machine must be a submit host: the commands on ``PATH`` (or in the folder
``SLURM_BIN`` names),
``SLURM_CONF`` honoured, munge running. Nothing is installed on the nodes. (pyslurm and
slurmrestd were tried and do not work with Debian's Slurm 22.05: ../shared/notes/engines.md.)

Each command runs in a session of its own, so the terminal's signals (Ctrl-C) reach the
portal only. A command that cannot be run, times out or fails is ``SlurmUnavailable`` with
what it said; answers that are not the JSON expected are too. A snapshot of the jobs is shared (``jobs``); a
job newer than the snapshot has a higher id than every job in it, so its absence means nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cddlm.errors import CddlmError
from cddlm.placement import slurm as topology

MAX_OUTPUT = 64 * 1024 * 1024   # bytes of one command's answer (squeue over many jobs is large)
# job states in which a job holds (or will hold) its node: a look before a submit finds these
LIVE = frozenset({"PENDING", "CONFIGURING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING",
                  "SIGNALING", "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})


CANCEL_SHARE = 50     # jobs one scancel is given at least, when many are split over several

# what scancel says of a job that ended meanwhile: nothing to do, no failure
ENDED_ALREADY = re.compile(r"already completing or completed|Invalid job id specified|"
                           r"Job has already finished")


class SlurmUnavailable(CddlmError):
    """A Slurm command could not be run, did not answer in time, or failed."""


@dataclass(frozen=True)
class Job:
    """One job as ``squeue --json`` shows it."""
    id: int
    name: str
    comment: str
    state: str              # RUNNING, PENDING, COMPLETED, FAILED, CANCELLED, NODE_FAIL, ...
    reason: str             # Slurm's state reason (Resources, NonZeroExitCode, ...)
    node: str               # its node (batch host), "" while pending
    user_id: int
    exit_status: int        # a wait status: code << 8, or the signal's number
    submitted: int          # submit time (seconds): with the id, the job's identity
    array_id: int = 0       # a job array's task: the array's id (0: not an array's)
    task: int | None = None     # its index (None: the record of an array's pending tasks)
    pending: str = ""       # that record's indices still pending ("0-5,7%2")

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def ref(self) -> str:
        """What ``scancel`` names it by: ``ARRAY_TASK`` for an array's task, else its id."""
        return task_ref(self.array_id, self.task) if self.array_id and self.task is not None \
            else str(self.id)

    @classmethod
    def of(cls, raw: dict) -> "Job":
        state = raw.get("job_state") or ""
        return cls(int(raw["job_id"]), str(raw.get("name") or ""), str(raw.get("comment") or ""),
                   str(state[0] if isinstance(state, list) and state else state),
                   str(raw.get("state_reason") or ""),
                   str(raw.get("batch_host") or raw.get("nodes") or ""),
                   int(raw.get("user_id") if raw.get("user_id") is not None else -1),
                   _number(raw.get("exit_code")), _number(raw.get("submit_time")),
                   _number(raw.get("array_job_id")), _task(raw.get("array_task_id")),
                   str(raw.get("array_task_string") or ""))


def task_ref(array_id: int, task: int) -> str:
    """How Slurm names an array's task: ``ARRAY_TASK``."""
    return "%d_%d" % (array_id, task)


def _task(value: Any) -> int | None:
    """An array task's index (22.05: a number, or null for the pending ones' record; later
    versions an object saying whether it is set)."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) else None
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def task_indices(text: str) -> set[int]:
    """The indices of ``array_task_string`` (``0-5,7,9-11:2%4``)."""
    out: set[int] = set()
    for part in text.split("%", 1)[0].split(","):
        part, _, step = part.partition(":")
        first, _, last = part.partition("-")
        try:
            out.update(range(int(first), int(last or first) + 1, int(step or 1)))
        except ValueError:
            continue
    return out


def _number(value: Any) -> int:
    """A number of Slurm's JSON (22.05 gives plain numbers, later versions objects)."""
    if isinstance(value, dict):
        value = value.get("number", value.get("return_code", 0))
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


class Slurm:
    """A portal's client of one Slurm cluster (shared by all its Slurm hosts)."""

    def __init__(self, timeout: float = 10.0, ttl: float = 1.0, env: dict | None = None):
        self.timeout = timeout
        self.ttl = ttl
        self.env = env
        self._lock = threading.Lock()
        self._fetching = threading.Lock()       # one squeue at a time; the others share it
        self._took = 0.0                        # seconds the last squeue (and its JSON) took
        self._jobs: tuple[float, dict[int, Job], int] | None = None   # (when, by id, highest id)
        self._nodes: tuple[float, dict[str, dict]] | None = None
        self._tasks: tuple[dict, dict[tuple[int, int], Job], dict[int, tuple[Job, set[int]]]] | None = None

    # -- running commands -----------------------------------------------------------------------
    def _command(self, name: str) -> str:
        folder = os.environ.get("SLURM_BIN")
        found = shutil.which(name, path=folder) if folder else shutil.which(name)
        if not found:
            raise SlurmUnavailable("the Slurm command %s is not on PATH: the portal's machine must "
                                   "be a Slurm submit host" % name)
        return found

    def run(self, argv: list[str], stdin: str | None = None, env: dict | None = None,
            benign: re.Pattern | None = None) -> str:
        name = argv[0]
        try:
            # a session of its own: a Ctrl-C at the portal's terminal (SIGINT to its whole
            # foreground group) stops the portal, not a sinfo it is waiting for
            done = subprocess.run([self._command(name)] + argv[1:], input=stdin, env=env or self.env,
                                  capture_output=True, text=True, timeout=self.timeout,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable("%s gave no answer in %g s" % (name, self.timeout)) from None
        except OSError as e:
            raise SlurmUnavailable("cannot run %s: %s" % (name, e.strerror or e)) from None
        if done.returncode != 0 and benign is not None and done.stderr.strip() and all(
                benign.search(line) for line in done.stderr.splitlines() if line.strip()):
            return done.stdout      # only complaints that change nothing
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout or "").split())[:500]
            raise SlurmUnavailable("%s failed (status %d): %s" % (name, done.returncode,
                                                                  said or "no message"))
        if len(done.stdout) > MAX_OUTPUT:
            raise SlurmUnavailable("%s answered more than %d bytes" % (name, MAX_OUTPUT))
        return done.stdout

    def _json(self, argv: list[str], key: str) -> list:
        text = self.run(argv)
        try:
            data = json.loads(text)
            items = data[key]
            if not isinstance(items, list):
                raise TypeError(key)
        except (ValueError, KeyError, TypeError):
            raise SlurmUnavailable("%s did not answer JSON with %s: %r" % (argv[0], key, text[:200])) from None
        return items

    # -- jobs -----------------------------------------------------------------------------------
    def jobs(self, since: float | None = None) -> tuple[dict[int, Job], int]:
        """Every job Slurm knows and the highest job id among them (a job with a higher id may
        be newer than the snapshot). One ``squeue --json`` serves every caller: for ``ttl``
        seconds, and at least three times as long as it took (1,000 jobs are 3.5 MB of JSON:
        a busy controller is not asked over and over), or, given ``since`` (a
        ``time.monotonic()``), any snapshot begun after then; callers that come while one is
        being read wait for it."""
        with self._fetching:
            with self._lock:
                if self._jobs is not None:
                    begun, jobs, top = self._jobs
                    if (begun >= since) if since is not None else \
                            time.monotonic() - begun < max(self.ttl, 3 * self._took):
                        return jobs, top
            begun = time.monotonic()
            raw = self._json(["squeue", "--json"], "jobs")
            try:
                jobs = {j.id: j for j in map(Job.of, raw)}
            except (KeyError, TypeError, ValueError) as e:
                raise SlurmUnavailable("squeue --json: a job without %s" % e) from None
            top = max(jobs, default=0)
            with self._lock:
                self._jobs, self._took = (begun, jobs, top), time.monotonic() - begun
            return jobs, top

    def task(self, jobs: dict[int, Job], array_id: int, task: int) -> Job | None:
        """Task ``task`` of array ``array_id`` in the snapshot ``jobs`` (of ``jobs()``): its own
        record once it ran, else (still pending) its array's pending record with its index."""
        with self._lock:
            if self._tasks is None or self._tasks[0] is not jobs:
                tasks: dict[tuple[int, int], Job] = {}
                waiting: dict[int, tuple[Job, set[int]]] = {}
                for job in jobs.values():
                    if job.array_id and job.task is not None:
                        tasks[(job.array_id, job.task)] = job
                    elif job.array_id:
                        waiting[job.array_id] = (job, task_indices(job.pending))
                self._tasks = (jobs, tasks, waiting)
            _, tasks, waiting = self._tasks
        found = tasks.get((array_id, task))
        if found is None and task in waiting.get(array_id, (None, ()))[1]:
            found = dataclasses.replace(waiting[array_id][0], task=task)
        return found

    def submit(self, script: str, options: list[str], env: dict[str, str]) -> int:
        """``sbatch --parsable OPTIONS`` with ``script`` on its standard input: the job id.
        The job's environment is ``env`` (and the ``SLURM_*``/``SBATCH_*`` settings of the
        portal's own): sbatch runs with exactly that and exports all of it. (``--export=NONE``
        or a list would have slurmd load the account's login environment with ``su -``, which
        costs a login shell per job, and hangs where a login does.)"""
        environment = {k: v for k, v in (self.env or os.environ).items()
                       if k.startswith(("SLURM_", "SBATCH_"))}
        environment.update(env)
        out = self.run(["sbatch", "--parsable", "--export=ALL"] + options, stdin=script,
                       env=environment)
        first = out.strip().split(";", 1)[0]
        if not first.isdigit():
            raise SlurmUnavailable("sbatch answered %r, not a job id" % out[:200])
        return int(first)

    def cancel(self, ids: list[int | str], signal: str | None = None, side_by_side: int = 1) -> None:
        """``scancel`` the jobs (ids, or ``ARRAY_TASK`` for an array's task); with ``signal``,
        only send it to each job's batch step. scancel asks the controller once per job (an
        array's task too), one after the other: many are split over up to ``side_by_side``
        scancels at once (at least ``CANCEL_SHARE`` jobs each)."""
        names = sorted({str(i) for i in ids})
        if not names:
            return
        argv = ["scancel"] + (["--signal=" + signal, "--batch"] if signal else [])
        parts = max(1, min(side_by_side, len(names) // CANCEL_SHARE))
        if parts == 1:
            self.run(argv + names, benign=ENDED_ALREADY)
            return
        with ThreadPoolExecutor(parts, thread_name_prefix="cddlm-scancel") as pool:
            for done in [pool.submit(self.run, argv + names[n::parts], benign=ENDED_ALREADY)
                         for n in range(parts)]:
                done.result()       # (the first failure, once all were asked)

    # -- nodes ----------------------------------------------------------------------------------
    def nodes(self, fresh: bool = False) -> dict[str, dict]:
        """Every node as ``sinfo --json`` lists it, by name (shared for ``ttl`` seconds)."""
        with self._lock:
            if not fresh and self._nodes is not None and time.monotonic() - self._nodes[0] < self.ttl:
                return self._nodes[1]
        nodes = {str(n.get("name")): n for n in self._json(["sinfo", "--json"], "nodes")
                 if isinstance(n, dict)}
        with self._lock:
            self._nodes = (time.monotonic(), nodes)
        return nodes

    def down(self) -> dict[str, str]:
        """The nodes that cannot run jobs now, with why."""
        out = {}
        for name, node in self.nodes().items():
            why = topology.node_down(node)
            if why:
                out[name] = why
        return out

    def datacenter(self) -> tuple[dict, dict[str, str]]:
        """The cluster as a datacenter (``--datacenter slurm:``) and the nodes down now."""
        switches = topology.parse_topology(self.run(["scontrol", "show", "topology"]))
        nodes = list(self.nodes(fresh=True).values())
        return topology.datacenter(nodes, switches, self._cluster_name()), self.down()

    def _cluster_name(self) -> str:
        for line in self.run(["scontrol", "show", "config"]).splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "ClusterName" and value.strip():
                return value.strip()
        return "slurm"
