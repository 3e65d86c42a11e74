"""A portal on a real Slurm cluster (tests/engines/slurm_cluster.py: slurmctld in the root
namespace, one slurmd per network namespace): ``--datacenter slurm:`` and each semantic the
issue asks of an engine, against the real daemons.

The portal runs Slurm's commands through counting wrappers (``SLURM_BIN``), so the tests can say
how often it submitted and looked. One cluster and one portal serve the whole module."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from cddlm import ns
from cddlm.application.enactment import logs
from cddlm.application.enactment.local import Target
from cddlm.application.enactment.slurm import SlurmRunner, job_comment, job_name
from cddlm.application.enactment.slurmctl import Slurm, SlurmUnavailable
from cddlm.application.hosts import Host
from cddlm.client import Portal
from cddlm.config import Limits, Settings
from tests.conftest import ROOT, LivePortal
from tests.engines.slurm_cluster import SlurmCluster
from tests.netns import wait_until

COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")
LIVENESS = 0.5


@dataclass
class Front:
    """The module's portal (restarted by the re-adoption test) and its client."""
    lp: LivePortal
    folder: Path

    @property
    def portal(self) -> Portal:
        return Portal(self.lp.url, failover=False)

    def calls(self, command: str) -> int:
        path = self.folder / "calls" / command
        return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm")
    with SlurmCluster(folder, nodes=3, features={"n1": ["db"]}, switches=2,
                      slurmd_timeout=6, kill_wait=2) as cluster:
        before = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(cluster.conf)
        try:
            yield cluster
        finally:
            if before is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = before


@pytest.fixture(scope="module")
def front(slurm, tmp_path_factory):
    folder = tmp_path_factory.mktemp("front")
    wrappers, calls = folder / "bin", folder / "calls"
    wrappers.mkdir()
    calls.mkdir()
    for name in COMMANDS:     # each call of the portal's leaves a line
        real = slurm.run("sh", "-c", "command -v %s" % name).stdout.strip()
        (wrappers / name).write_text('#!/bin/sh\necho x >> %s\nexec %s "$@"\n' % (calls / name, real))
        os.chmod(wrappers / name, 0o755)
    os.environ["SLURM_BIN"] = str(wrappers)
    holder = Front(start_portal(folder), folder)
    try:
        yield holder
    finally:
        os.environ.pop("SLURM_BIN", None)
        holder.lp.stop()


def start_portal(folder: Path) -> LivePortal:
    state = folder / "state"
    state.mkdir(exist_ok=True)
    return LivePortal(state, extra=["--datacenter", "slurm:", "--liveness-interval", str(LIVENESS),
                                    "--heartbeat", "1", "--lease-seconds", "5"]).start(60)


def application(*components: str, extra: str = "") -> str:
    return '<application xmlns="%s">%s%s</application>' % (ns.NATIVE, "".join(components), extra)


def process(name: str, *argv: str, **attributes: str) -> str:
    items = "".join("<item>%s</item>" % escape(a) for a in argv)
    more = "".join('<attribute name="%s">%s</attribute>' % kv for kv in attributes.items())
    return '<component name="%s" type="process"><attribute name="argv">%s</attribute>%s' \
           '</component>' % (name, items, more)


def deploy(front: Front, text: str, state: str = "running", timeout: float = 60):
    app = front.portal.create()
    app.initialize(ns.NATIVE, text=text)
    app.run()
    got = app.wait_for(state, "failed", timeout=timeout)
    assert got == state, (got, app.ping(), app.components())
    return app


def jobs(slurm: SlurmCluster) -> dict[int, dict]:
    raw = json.loads(slurm.run("squeue", "--json").stdout)["jobs"]
    return {j["job_id"]: j for j in raw}


LIVE = ("PENDING", "CONFIGURING", "RUNNING")


def live_jobs(slurm: SlurmCluster, name: str) -> list[dict]:
    return [j for j in jobs(slurm).values() if j["name"] == name and j["job_state"] in LIVE]


def of_app(slurm: SlurmCluster, app_id: str) -> list[dict]:
    """Every job (or array task) Slurm has of the application, whatever its state."""
    return [j for j in jobs(slurm).values() if ("app=%s " % app_id) in j["comment"]]


def job_of(now: dict[int, dict], app, path: str) -> dict:
    """The component's job (or array task, ``ARRAY_TASK``) in ``jobs(slurm)``, by its value
    ``job`` (its ``pid`` is the program's on its node)."""
    ref = app.resolve("%s/job" % path)
    if "_" not in ref:
        return now[int(ref)]
    array, task = (int(x) for x in ref.split("_"))
    (job,) = [j for j in now.values() if (j["array_job_id"], j["array_task_id"]) == (array, task)]
    return job


def made(slurm: SlurmCluster, app) -> list[int]:
    return [j["job_id"] for j in of_app(slurm, app.id)]


def arrays_of(slurm: SlurmCluster, app_id: str) -> set[int]:
    """The job arrays Slurm has of the application."""
    return {j["array_job_id"] for j in of_app(slurm, app_id) if j["array_job_id"]}


def submitted_as(job: dict, app_id: str, path: str) -> None:
    """``job`` is the component's: a job of its own (named after it), or a task of a job
    array of its application."""
    if job["array_job_id"]:
        assert job["comment"].startswith("cddlm app=%s gen=1 array=" % app_id), job["comment"]
        assert job["array_task_id"] is not None
    else:
        assert job["name"] == job_name(app_id, path)
        assert job["comment"] == job_comment(app_id, 1, path)


def processes_of(app_id: str) -> list[int]:
    """Processes of this machine (every node shares its PID space) running a component of
    the application, or a job's watcher (its environment the job's: an array's watcher has
    the application's, ``CDDLM_APP_ID``, its component's is exported by the script)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = open("/proc/%s/environ" % entry, "rb").read()
            except OSError:
                continue
            if ("CDDLM_COMPONENT=%s " % app_id).encode() in environ or \
                    ("\0CDDLM_APP_ID=%s\0" % app_id).encode() in b"\0" + environ:
                found.append(int(entry))
    return found


def comps(app) -> dict[str, dict]:
    return {c["path"]: c for c in app.components()}


def finish(app, timeout: float = 60) -> None:
    app.terminate()
    assert app.wait_for("terminated", timeout=timeout) == "terminated"


# -- the datacenter and placement ----------------------------------------------------------------
def test_the_cluster_is_the_datacenter_and_slurm_runs_what_the_solver_placed_where_it_placed_it(slurm, front):
    hosts = {h["name"]: h for h in front.portal.hosts()}
    assert sorted(hosts) == ["n1", "n2", "n3"]
    assert {h["agent"] for h in hosts.values()} == {"slurm:n1", "slurm:n2", "slurm:n3"}
    assert hosts["n3"]["free"] == {"cpu": 64.0, "memory": 4000.0}
    # the switches are levels: two components collocated under one leaf switch, on two hosts,
    # can only go to n1 and n2 (s1); a "db" one only to n1 (the feature is a trait)
    sleeper = ("sleep", "600")
    text = application(process("a", *sleeper), process("b", *sleeper),
                       process("db", *sleeper, traits="<item>db</item>"), extra=(
        '<group name="pair"><member>a</member><member>b</member></group>'
        '<policy type="collocation" level="switch0" group="pair" hard="true"/>'
        '<policy type="anti-collocation" level="host" group="pair" hard="true"/>'))
    submits = front.calls("sbatch")
    app = deploy(front, text)
    placed = comps(app)
    assert {placed["a"]["host"], placed["b"]["host"]} == {"n1", "n2"}
    assert placed["db"]["host"] == "n1"
    assert front.calls("sbatch") - submits == 2     # one per node's share: n1's is an array
    now = jobs(slurm)
    for path, c in placed.items():
        job = job_of(now, app, path)
        assert job["job_state"] == "RUNNING"
        assert job["batch_host"] == c["host"]     # sbatch -w: exactly where the solver said
        submitted_as(job, app.id, path)
        assert app.resolve("%s/job" % path) == (
            "%d_%d" % (job["array_job_id"], job["array_task_id"]) if job["array_job_id"]
            else str(job["job_id"]))
    # liveness: one squeue per sweep for all jobs, not one per component
    before, started = front.calls("squeue"), time.monotonic()
    time.sleep(4)
    sweeps = (time.monotonic() - started) / LIVENESS
    assert front.calls("squeue") - before <= sweeps + 2, (front.calls("squeue") - before, sweeps)
    finish(app)
    assert not processes_of(app.id)
    assert not [j for j in jobs(slurm).values() if j["name"].startswith("cddlm-")
                and j["job_state"] == "RUNNING"]


def test_the_tours_example_runs_as_docs_engines_md_shows(slurm, front):
    """examples/multihost/spread-slurm.xml (make slurm-cluster's tour): the workers on three
    nodes, web and its cache under one leaf switch, web's port read on its node."""
    app = deploy(front, (ROOT / "examples" / "multihost" / "spread-slurm.xml").read_text())
    placed = {path: c["host"] for path, c in comps(app).items()}
    assert sorted(placed[w] for w in ("worker1", "worker2", "worker3")) == ["n1", "n2", "n3"]
    assert {placed["web"], placed["cache"]} <= {"n1", "n2"} or placed["web"] == placed["cache"] == "n3"
    assert wait_until(lambda: comps(app)["web"]["ports"], 30)     # its watcher saw it listen
    finish(app)
    assert not processes_of(app.id)


def test_a_start_repeated_after_a_crash_adopts_the_job_it_finds(slurm, tmp_path):
    runner = SlurmRunner(Slurm(), str(tmp_path / "slurm"), Settings()).add(Host("n2", "slurm:n2"))
    t = Target("urn:uuid:%s" % uuid.uuid4(), "w", "process", {"argv": ["sleep", "600"]}, "n2",
               generation=1)
    assert runner.deploy(t).event == "deployed"
    first = runner.start(t, None, None, lambda: None)
    assert first.event == "running" and first.pid, first
    # the answer was lost (nothing recorded): the start again finds the job, submits none
    again = runner.start(t, None, None, lambda: None)
    assert (again.event, again.pid, again.pid_start) == ("running", first.pid, first.pid_start)
    assert len(live_jobs(slurm, job_name(t.app_id, t.path))) == 1
    # a stop without the recorded id finds it too
    assert runner.stop(t, None, None, None).event == "stopped"
    assert wait_until(lambda: not live_jobs(slurm, job_name(t.app_id, t.path)), 10)
    assert runner.check(t, first.pid, first.pid_start).event == "failed"
    Slurm().cancel([first.pid], "TERM")     # a job that ended meanwhile: nothing to do, no error
    Slurm().cancel([first.pid])


class Counting(Slurm):
    """The Slurm client, counting its submits; ``lose`` submits (sbatch runs, its answer is
    lost) or ``refuse`` them (raises before sbatch runs), as a portal killed on either side
    of the submit would."""

    def __init__(self, lose: int = 0, refuse: int = 0):
        super().__init__()
        self.submits, self.lose, self.refuse = 0, lose, refuse

    def submit(self, script, options, env):
        if self.refuse:
            self.refuse -= 1
            raise SlurmUnavailable("refused before sbatch (a test)")
        self.submits += 1
        got = super().submit(script, options, env)
        if self.lose:
            self.lose -= 1
            raise SlurmUnavailable("the answer of sbatch was lost (a test)")
        return got


def share(tmp_path, slurm_client: Slurm, n: int, node: str = "n2", argv=("sleep", "600"), **more):
    runner = SlurmRunner(slurm_client, str(tmp_path / "slurm"), Settings()).add(Host(node, "slurm:" + node))
    app_id = "urn:uuid:%s" % uuid.uuid4()
    targets = [Target(app_id, "w%d" % i, "process",
                      {"argv": list(argv), "env": {"ONLY_%d" % i: "it's %d" % i}, **more},
                      node, generation=1) for i in range(n)]
    for t in targets:
        assert runner.deploy(t).event == "deployed"
    return runner, targets


def start_all(runner: SlurmRunner, targets: list, known: dict | None = None) -> dict[str, object]:
    got: list = []
    known = known or {}
    runner.start_many([(t.path, t, *known.get(t.path, (None, None))) for t in targets],
                      lambda: None, got.extend)
    return dict(got)


def test_a_nodes_share_is_one_job_array_and_each_task_runs_its_own_component(slurm, tmp_path):
    client = Counting()
    runner, targets = share(tmp_path, client, 5, argv=("sh", "-c", 'echo "$CDDLM_COMPONENT $ONLY_3 $PWD"; '
                                                                   "echo err >&2; exec sleep 600"))
    got = start_all(runner, targets)
    assert client.submits == 1
    assert {o.event for o in got.values()} == {"running"}, got
    (array,) = arrays_of(slurm, targets[0].app_id)
    now = jobs(slurm)
    for n, t in enumerate(targets):
        job = now[got[t.path].pid]
        assert (job["array_job_id"], job["array_task_id"], job["batch_host"]) == (array, n, "n2")
        assert got[t.path].runtime["job"] == "%d_%d" % (array, n)
        assert os.path.exists(runner._marker(t))     # running once its script began, not at allocation
    # each task's output in its own component's logs, with its own environment and directory
    w3 = runner.component_dir(targets[0].app_id, "w3")
    assert wait_until(lambda: runner.log_read(targets[0].app_id, "w3", "stdout", lines=20)[0], 10)
    assert runner.log_read(targets[0].app_id, "w3", "stdout", lines=20)[0] == [
        "%s w3 it's 3 %s" % (targets[0].app_id, w3)]
    assert runner.log_read(targets[0].app_id, "w1", "stderr", lines=20)[0] == ["err"]
    assert "it's" not in runner.log_read(targets[0].app_id, "w1", "stdout", lines=20)[0][0]
    stopped: list = []
    runner.stop_many([(t.path, t, got[t.path].pid, got[t.path].pid_start) for t in targets], None,
                     stopped.extend)
    assert {o.event for _, o in stopped} == {"stopped"}
    assert not [j for j in of_app(slurm, targets[0].app_id) if j["job_state"] in LIVE]
    runner.remove_app(targets[0].app_id)


def test_a_submit_whose_answer_was_lost_is_adopted_without_a_second_array(slurm, tmp_path):
    client = Counting(lose=1)
    runner, targets = share(tmp_path, client, 4)
    with pytest.raises(Exception, match="lost"):       # the engine would ask again later
        start_all(runner, targets)
    # the portal restarted: a new runner, nothing recorded, the start asked again
    again = Counting()
    runner = SlurmRunner(again, str(tmp_path / "slurm"), Settings()).add(Host("n2", "slurm:n2"))
    got = start_all(runner, targets)
    assert again.submits == 0 and {o.event for o in got.values()} == {"running"}, got
    assert len(arrays_of(slurm, targets[0].app_id)) == 1
    assert len({o.pid for o in got.values()}) == 4
    # and what was recorded finds each task again, one by one
    for t in targets:
        assert runner.check(t, got[t.path].pid, got[t.path].pid_start) is None
    # a submit refused before sbatch ran: the next start submits the one array
    client = Counting(refuse=1)
    runner, others = share(tmp_path, client, 3)
    with pytest.raises(Exception, match="refused"):
        start_all(runner, others)
    assert not of_app(slurm, others[0].app_id)
    got2 = start_all(runner, others)
    assert client.submits == 1 and {o.event for o in got2.values()} == {"running"}
    assert len(arrays_of(slurm, others[0].app_id)) == 1
    for r, ts in ((runner, others), (runner, targets)):
        r.remove_app(ts[0].app_id)
    assert wait_until(lambda: not [j for j in of_app(slurm, targets[0].app_id) + of_app(slurm, others[0].app_id)
                                   if j["job_state"] in LIVE], 10)


def test_stopping_one_task_leaves_its_siblings_running_and_a_restart_is_a_job_of_its_own(slurm, tmp_path):
    client = Counting()
    runner, targets = share(tmp_path, client, 3, argv=(
        "sh", "-c", "trap 'echo got TERM; exit 0' TERM; echo up; while :; do sleep 0.2; done"),
        readiness={"log": "up"})      # (Slurm says RUNNING before slurmd launched the script)
    got = start_all(runner, targets)
    assert client.submits == 1
    victim = targets[1]
    out = runner.stop(victim, got[victim.path].pid, got[victim.path].pid_start, None)
    assert out.event == "stopped"
    assert wait_until(lambda: "got TERM" in runner.log_read(victim.app_id, victim.path, "stdout", lines=20)[0], 10)
    now = jobs(slurm)
    assert [now[got[t.path].pid]["job_state"] for t in targets] == ["RUNNING", "COMPLETED", "RUNNING"]
    # the stopped one started again: a job of its own, not a second array, not an old task
    again = start_all(runner, [victim], {victim.path: (got[victim.path].pid, got[victim.path].pid_start)})
    assert client.submits == 2 and again[victim.path].event == "running"
    job = jobs(slurm)[again[victim.path].pid]
    assert not job["array_job_id"] and job["name"] == job_name(victim.app_id, victim.path)
    assert len(arrays_of(slurm, victim.app_id)) == 1
    stopped: list = []
    runner.stop_many([(t.path, t, None, None) for t in targets], None, stopped.extend)
    assert {o.event for _, o in stopped} == {"stopped"}
    assert not [j for j in of_app(slurm, victim.app_id) if j["job_state"] in LIVE]
    runner.remove_app(victim.app_id)


def test_a_job_not_launched_yet_is_cancelled_at_once_not_given_its_signal_and_grace(slurm, tmp_path):
    """Slurm says RUNNING once it allocated a job, before the node launched it (a share's tasks
    launch over seconds): a job whose script has not begun (its marker not there yet) is
    cancelled at once (Slurm's TERM) rather than sent its own signal and waited for; a
    launched one gets its own signal. The marker removed stands for the launch to come."""
    client = Counting()
    argv = ("sh", "-c", "trap 'echo got USR1 >> signals; exit 0' USR1; "
            "trap 'echo got TERM >> signals; exit 0' TERM; echo up; while :; do sleep 0.2; done")
    runner, targets = share(tmp_path, client, 2, argv=argv, readiness={"log": "up"},
                            stop_signal="USR1", grace="30")
    got = start_all(runner, targets)
    waiting, launched = targets
    os.unlink(runner._marker(waiting))       # as if its node had not launched it yet
    started = time.monotonic()
    stopped: list = []
    runner.stop_many([(t.path, t, got[t.path].pid, got[t.path].pid_start) for t in targets], None,
                     stopped.extend)
    assert {o.event for _, o in stopped} == {"stopped"} and time.monotonic() - started < 20

    def said(t) -> str:
        path = os.path.join(runner.component_dir(t.app_id, t.path), "signals")
        return open(path).read().strip() if os.path.exists(path) else ""
    assert wait_until(lambda: said(waiting) and said(launched), 10), (said(waiting), said(launched))
    assert (said(waiting), said(launched)) == ("got TERM", "got USR1")
    runner.remove_app(waiting.app_id)


# -- readiness, logs, values ---------------------------------------------------------------------
def test_readiness_logs_with_offsets_and_values(slurm, front, tmp_path):
    go = tmp_path / "go"      # "two" comes once the first read is done (the nodes share files)
    text = application(
        process("web", "python3", "-u", "-m", "http.server", "18555",
                readiness='<item name="tcp">18555</item>'),
        process("talk", "sh", "-c", "echo one; until [ -e %s ]; do sleep 0.1; done; echo two; "
                "exec sleep 600" % go, readiness='<item name="log">one</item>'))
    app = deploy(front, text)
    c = comps(app)
    host = c["web"]["host"]
    assert app.resolve("web/pid") == str(c["web"]["pid"])
    assert app.resolve("web/node") == host
    assert app.resolve("web/port") == "18555"
    assert c["web"]["ports"] == [18555]
    assert job_of(jobs(slurm), app, "web")["batch_host"] == host
    first = app.logs("talk")
    assert first["lines"] == ["one"] and first["host"] == c["talk"]["host"]
    go.touch()
    assert wait_until(lambda: app.logs("talk", offset=first["offset"])["lines"] == ["two"], 10)
    finish(app)


def watchers_of(app_id: str) -> list[int]:
    """The job watchers (``procsh.REPORTER``) of the application's components: processes of
    its components that are their batch script's shell, not their program."""
    found = []
    for pid in processes_of(app_id):
        try:
            argv = Path("/proc/%d/cmdline" % pid).read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"slurm_script") for a in argv):
            found.append(pid)
    return found


def test_a_jobs_watcher_reports_its_pid_and_ports_on_its_node_and_ends_with_it(slurm, front):
    """A Slurm job's program (a job of its own, or an array's task) is seen on its node by the
    watcher its script starts: ``pid`` is the program's pid there, ``port`` the port it
    listens on (no readiness names it: port 0, the kernel's choice), in ``cddlm status`` and
    ``resolve``. What is in the marker is untrusted: junk is ignored. Nothing of the watcher
    outlives the job, or writes in the component's logs."""
    serve = ("python3", "-u", "-m", "http.server", "0")
    ready = '<item name="log">Serving HTTP</item>'
    text = application(process("a", *serve, host="n2", readiness=ready),    # n2's share: an array
                       process("b", *serve, host="n2", readiness=ready),
                       process("solo", *serve, host="n3", readiness=ready))  # a job of its own
    app = deploy(front, text)
    assert "_" in app.resolve("a/job") and "_" not in app.resolve("solo/job")
    assert wait_until(lambda: all(c["ports"] for c in comps(app).values()), 20), comps(app)
    for path, c in comps(app).items():
        line = app.logs(path, "stderr")["lines"] + app.logs(path)["lines"]
        port = int([w for w in " ".join(line).split() if w.isdigit()][0])   # "... port N (http..."
        assert c["ports"] == [port] and app.resolve("%s/port" % path) == str(port), (c, line)
        # listening there indeed: at the node's address, in its namespace
        address = slurm.host(c["host"]).address
        with urllib.request.urlopen("http://%s:%d/" % (address, port), timeout=10) as got:
            assert got.status == 200
        pid = c["pid"]
        assert app.resolve("%s/pid" % path) == str(pid)
        assert b"http.server" in Path("/proc/%d/cmdline" % pid).read_bytes()
        assert pid != job_of(jobs(slurm), app, path)["job_id"]
    assert {h["path"]: h["pid"] for h in app.ping()["health"]} == {
        p: c["pid"] for p, c in comps(app).items()}         # ping says the same
    watchers = watchers_of(app.id)
    assert len(watchers) == 3, watchers
    programs = {c["pid"] for c in comps(app).values()}
    for w in watchers:      # its output goes nowhere near the component's logs
        assert [os.readlink("/proc/%d/fd/%d" % (w, fd)) for fd in (0, 1, 2)] == ["/dev/null"] * 3
        parent = int(Path("/proc/%d/stat" % w).read_text().rsplit(")", 1)[1].split()[1])
        assert parent not in programs       # not a child the program would see (or reap)

    # junk in the marker (the node's, or the program's, writing): ignored, nothing breaks
    marker = Path(SlurmRunner(Slurm(), str(Path(app.resolve("solo/workdir")).parents[2]), Settings())
                  ._marker(Target(app.id, "solo", "process", {}, "n3")))
    job = job_of(jobs(slurm), app, "solo")["job_id"]
    real = marker.read_bytes()
    assert real.split()[:2] == [str(job).encode(), str(comps(app)["solo"]["pid"]).encode()]
    junk = [b"", b"garbage\n", b"%d 1 1F90\n" % (job + 1000), b"%d 99999999 1F90\n" % job,
            b"%d 12 1F90 zz\n" % job, b"%d 12 " % job + b"1F90 " * 20000, b"\xff\x00" * 50]
    for bad in junk:
        marker.write_bytes(bad)
        c = comps(app)["solo"]
        assert (c["pid"], c["ports"]) == (None, []), (bad[:40], c)
        with pytest.raises(Exception, match="no value yet"):
            app.resolve("solo/pid")
    marker.unlink()
    os.mkfifo(marker)           # a reader would block on it: refused, not opened
    assert comps(app)["solo"]["pid"] is None
    marker.unlink()
    marker.write_bytes(real)
    c = comps(app)["solo"]
    assert c["pid"] and c["ports"] == [int(app.resolve("solo/port"))]

    started = time.monotonic()
    finish(app)
    assert time.monotonic() - started < 10
    assert wait_until(lambda: not processes_of(app.id), 10), [
        Path("/proc/%d/cmdline" % p).read_bytes() for p in processes_of(app.id)]
    # a job whose program ends at once ends at once: its watcher holds nothing
    once = deploy(front, application(process("once", "sh", "-c", "echo done", run_to_completion="true",
                                             host="n1")), state="terminated")
    job = job_of(jobs(slurm), once, "once")
    # (Slurm counts whole seconds, and a loaded machine runs the job script late: 2 s was seen)
    assert job["job_state"] == "COMPLETED" and job["end_time"] - job["start_time"] <= 4, job
    assert once.logs("once")["lines"] == ["done"]
    assert not processes_of(once.id)


def test_slurm_job_logs_are_capped_without_holes(slurm, tmp_path):
    """A job's logs (written on its node, appending: ``--open-mode=append`` for a job of its
    own, ``>>`` for an array's task) are rotated by the portal's capper as a local
    component's: the log stays near its cap, the rest kept as ``.1``, and no hole (zeros)
    opens where the node would have written at its old offset."""
    cap = 64 * 1024
    settings = Settings(limits=Limits(max_log_bytes=cap))
    runner = SlurmRunner(Slurm(), str(tmp_path / "slurm"), settings).add(Host("n2", "slurm:n2"))
    app_id = "urn:uuid:%s" % uuid.uuid4()
    writer = ["python3", "-c", "import sys, time\nfor i in range(10 ** 9):\n"
              "    print('line %08d ' % i + 'x' * 90, flush=True); time.sleep(0.0005)"]
    targets = [Target(app_id, "w%d" % i, "process", {"argv": writer}, "n2", generation=1)
               for i in range(3)]
    for t in targets:
        assert runner.deploy(t).event == "deployed"
    got = start_all(runner, targets[:2])            # an array of two
    got.update(start_all(runner, targets[2:]))      # and a job of its own
    assert {o.event for o in got.values()} == {"running"}, got
    assert jobs(slurm)[got["w2"].pid]["array_job_id"] in (0, None)
    try:
        for t in targets:
            log = Path(runner.component_dir(app_id, t.path)) / "stdout.log"
            assert wait_until(lambda: (log.parent / "stdout.log.1").exists(), 20), t.path
        time.sleep(3)       # writing on: rotated again and again
        for t in targets:
            log = Path(runner.component_dir(app_id, t.path)) / "stdout.log"
            data, kept = log.read_bytes(), (log.parent / "stdout.log.1").read_bytes()
            assert len(data) < 20 * cap, (t.path, len(data))      # uncapped: megabytes by now
            assert len(kept) <= cap and kept.startswith(b"line ")
            assert b"\0" not in data and data.startswith(b"line "), (t.path, data[:40])
            assert os.stat(log).st_blocks * 512 >= len(data) - 4096     # not sparse
    finally:
        stopped: list = []
        runner.stop_many([(t.path, t, got[t.path].pid, got[t.path].pid_start) for t in targets], None,
                         stopped.extend)
        runner.remove_app(app_id)
    assert {o.event for _, o in stopped} == {"stopped"}
    assert not [d for d in logs.CAPPER.watched() if app_id.rsplit(":", 1)[-1] in d]


def test_run_to_completion_exit_status_and_restart_policy(slurm, front):
    done = deploy(front, application(process("once", "sh", "-c", "echo finished",
                                             run_to_completion="true")), state="terminated")
    assert done.ping()["stateInfo"] == "every component ran to completion"
    assert (comps(done)["once"]["state"], comps(done)["once"]["exitCode"]) == ("completed", 0)
    assert done.logs("once")["lines"] == ["finished"]
    bad = deploy(front, application(process("bad", "sh", "-c", "sleep 1; echo oops >&2; exit 3")),
                 state="failed")
    c = comps(bad)["bad"]
    assert c["exitCode"] == 3 and "exited with status 3" in c["info"] and c["host"] in c["info"]
    assert "oops" in (bad.logs("bad", "stderr")["lines"])
    finish(bad)
    flaky = deploy(front, application(process(
        "flaky", "sh", "-c", "echo run >> runs.txt; sleep 1; exit 1",
        restart="on-failure", restart_limit="2")), state="failed")
    c = comps(flaky)["flaky"]
    assert c["restarts"] == 2
    workdir = flaky.resolve("flaky/workdir")
    assert Path(workdir, "runs.txt").read_text().split() == ["run"] * 3
    finish(flaky)


def test_a_sequence_keeps_its_order_across_nodes(slurm, front, tmp_path):
    os.chmod(tmp_path, 0o755)
    mark = tmp_path / "step1"
    text = ('<application xmlns="%s"><component name="seq" type="sequence">%s%s</component>'
            '</application>') % (ns.NATIVE,
        process("step1", "sh", "-c", "sleep 1; echo done > %s" % mark, run_to_completion="true",
                host="n1"),
        process("step2", "sh", "-c", "cat %s > saw; exec sleep 600" % mark, host="n3"))
    app = deploy(front, text)
    c = comps(app)
    assert (c["seq/step1"]["host"], c["seq/step2"]["host"]) == ("n1", "n3")
    assert c["seq/step1"]["state"] == "completed"
    saw = Path(app.resolve("seq/step2/workdir"), "saw")
    assert wait_until(lambda: saw.exists() and saw.read_text() == "done\n", 5)
    finish(app)


# -- stop ---------------------------------------------------------------------------------------------
def test_terminate_stops_each_job_with_its_signal_and_grace(slurm, front):
    loop = "while :; do sleep 0.2; done"
    text = application(
        process("polite", "sh", "-c", "trap 'echo got TERM; exit 0' TERM; echo up; %s" % loop,
                readiness='<item name="log">up</item>'),
        process("usr", "sh", "-c", "trap 'echo got USR1; exit 0' USR1; echo up; %s" % loop,
                stop_signal="USR1", readiness='<item name="log">up</item>'),
        process("stubborn", "sh", "-c", "trap 'echo ignored TERM' TERM; echo up; %s" % loop,
                grace="1", readiness='<item name="log">up</item>'))
    app = deploy(front, text)
    ids = {p: job_of(jobs(slurm), app, p)["job_id"] for p in comps(app)}
    started = time.monotonic()
    finish(app)
    took = time.monotonic() - started
    assert "got TERM" in app.logs("polite")["lines"]
    assert "got USR1" in app.logs("usr")["lines"]
    assert "ignored TERM" in app.logs("stubborn")["lines"]      # then cancelled after 1 s
    assert took < 1 + 2 + 6, took                               # grace + KillWait + the looks
    now = jobs(slurm)
    assert [now[ids[p]]["job_state"] for p in ("polite", "usr")] == ["COMPLETED", "COMPLETED"]
    assert now[ids["stubborn"]]["job_state"] in ("CANCELLED", "COMPLETING")
    assert wait_until(lambda: not processes_of(app.id), 10)


# -- the portal killed --------------------------------------------------------------------------------
def test_a_portal_killed_and_restarted_adopts_every_job_and_submits_none_twice(slurm, front):
    text = application(*[process("w%d" % i, "sleep", "600") for i in range(4)])
    app = front.portal.create()
    app.initialize(ns.NATIVE, text=text)
    before = front.calls("sbatch")
    app.run()
    assert wait_until(lambda: front.calls("sbatch") > before, 20)
    front.lp.stop(signal.SIGKILL)           # in the middle of its starts
    front.lp = start_portal(front.folder)
    app = front.portal.lookup(app.id)
    assert app.wait_for("running", "failed", timeout=60) == "running", app.components()
    live = [j for j in of_app(slurm, app.id) if j["job_state"] in LIVE]
    assert sorted(j["job_id"] for j in live) == sorted(job_of(jobs(slurm), app, p)["job_id"]
                                                       for p in comps(app))
    assert len(made(slurm, app)) == 4         # one each, never two (a sbatch cut short made none)
    front.lp.stop(signal.SIGKILL)           # and once more while they run
    front.lp = start_portal(front.folder)
    app = front.portal.lookup(app.id)
    assert app.state() == "running"
    victim = job_of(jobs(slurm), app, "w2")["job_id"]
    # ended outside the portal: the new portal sees it (an array's task is cancelled as
    # ARRAY_TASK, the value "job": Slurm 22.05 says a task's own id is invalid to scancel)
    slurm.run("scancel", app.resolve("w2/job"))
    assert app.wait_for("failed", timeout=20) == "failed"
    assert "job %d" % victim in comps(app)["w2"]["info"]
    assert len(made(slurm, app)) == 4
    finish(app)
    assert wait_until(lambda: not processes_of(app.id), 10)


# -- nodes failing -------------------------------------------------------------------------------------
def test_a_node_set_down_fails_its_components_with_the_nodes_reason(slurm, front):
    app = deploy(front, application(process("x", "sleep", "600", host="n3"),
                                    process("y", "sleep", "600", host="n1")))
    slurm.scontrol("update", "nodename=n3", "state=down", "reason=disk on fire")
    try:
        assert app.wait_for("failed", timeout=20) == "failed"
        reason = app.ping()["terminationInfo"]["reason"]
        assert "n3" in reason and "disk on fire" in reason, reason
        assert {h["name"]: h["down"] for h in front.portal.hosts()}["n3"] is True
    finally:
        slurm.scontrol("update", "nodename=n3", "state=resume")
    assert wait_until(lambda: not {h["name"]: h["down"] for h in front.portal.hosts()}["n3"], 20)
    finish(app)
    assert wait_until(lambda: not processes_of(app.id), 10)


def test_a_partitioned_node_fails_its_components_and_a_terminate_completes_after_it_heals(slurm, front):
    app = deploy(front, application(process("cut", "sleep", "600", host="n2")))
    job = job_of(jobs(slurm), app, "cut")["job_id"]
    slurm.host("n2").partition()
    healed = False
    try:
        # slurmd silent: NOT_RESPONDING after SlurmdTimeout (6 s), and the host is down
        assert app.wait_for("failed", timeout=40) == "failed"
        reason = app.ping()["terminationInfo"]["reason"]
        assert "n2" in reason and "NOT_RESPONDING" in reason, reason
        app.terminate()
        assert app.wait_for("terminated", timeout=40) == "terminated"
        assert processes_of(app.id), "the node's process runs on until Slurm reaches it"
        slurm.host("n2").heal()
        healed = True
    finally:
        if not healed:
            slurm.host("n2").heal()
    # healed: Slurm ends the job on the node; the host is up again
    assert wait_until(lambda: not processes_of(app.id), 60), processes_of(app.id)
    assert wait_until(lambda: jobs(slurm).get(job, {}).get("job_state") not in ("RUNNING",), 30)
    assert wait_until(lambda: not {h["name"]: h["down"] for h in front.portal.hosts()}["n2"], 60)
    slurm.wait_idle(["n2"], 60)
