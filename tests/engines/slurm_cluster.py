"""A real Slurm cluster on this machine for the engine tests, the benchmark and ``make
slurm-cluster``: one ``munged`` with a key of its own, a ``slurmctld`` in the root namespace
(on the bridge's address), and one ``slurmd`` per host network namespace (tests/netns.py),
all configured in one folder (``SLURM_CONF`` points at its ``slurm.conf``).

Daemons are started with ``nsenter --net`` rather than ``ip netns exec``, which remounts
``/sys`` and so hides the cgroup hierarchy slurmd needs (../shared/notes/engines.md). Every
daemon is stopped, and every namespace removed, on exit.

    with SlurmCluster(folder, nodes=3) as slurm:   # skips with a reason where it cannot run
        slurm.env        # the environment a portal or a Slurm command needs (SLURM_CONF)
        slurm.nodes      # ["n1", "n2", "n3"]
        slurm.kill_slurmd("n2"); slurm.start_slurmd("n2")
        slurm.scontrol("update", "nodename=n3", "state=down", "reason=maintenance")
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.debian import ensure_package
from tests.netns import Cluster, unavailable_reason, wait_until

SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")


def _present(*names: str) -> bool:
    return all(shutil.which(n) or os.path.exists("/usr/sbin/" + n) for n in names)


def unavailable() -> str | None:
    """Why a Slurm cluster cannot be started here (installing Debian's packages if missing)."""
    reason = unavailable_reason()
    if reason:
        return "the Slurm nodes need network namespaces: %s" % reason
    if shutil.which("nsenter") is None:
        return "util-linux's nsenter is missing"
    return (ensure_package("munge", lambda: _present("munged"), "munge (munged)")
            or ensure_package("slurm-wlm", lambda: _present(*SLURM_BINARIES),
                              "Slurm (slurmctld, slurmd and the client commands)"))


def _free_port() -> int:
    """A port free on every address (slurmctld listens on all of them)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, folder: Path, nodes: int = 3, cpus: int = 64, memory: int = 4000,
                 features: dict[str, list[str]] | None = None, switches: int = 1,
                 slurmd_timeout: int = 20, kill_wait: int = 5, extra: tuple[str, ...] = ()):
        self.folder = Path(folder)
        self.n = nodes
        self.cpus, self.memory = cpus, memory
        self.features = features or {}
        self.switches = switches
        self.slurmd_timeout, self.kill_wait = slurmd_timeout, kill_wait
        self.extra = list(extra)       # more slurm.conf lines
        self.nodes = ["n%d" % i for i in range(1, nodes + 1)]
        self.netns: Cluster | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.folder / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    # -- life ----------------------------------------------------------------------------------
    def __enter__(self) -> "SlurmCluster":
        reason = unavailable()
        if reason:
            pytest.skip("a Slurm test cluster cannot run here: %s" % reason)
        try:
            self.netns = Cluster(self.n, prefix="n").__enter__()
            for host in self.netns.hosts:
                # slurmd looks names up (its node's, the controller's) in DNS: through a
                # default route that goes nowhere (this machine forwards nothing) each lookup
                # waits for its timeouts and a job starts a minute late; with no route at all
                # it fails at once
                subprocess.run(["ip", "-n", host.name, "route", "del", "default"], check=False,
                               capture_output=True)
            self.folder.mkdir(parents=True, exist_ok=True)
            self._write_config()
            self._start_munged()
            self._start("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)], None)
            for node in self.nodes:
                self.start_slurmd(node)
            self.wait_idle(self.nodes, 30)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        # the jobs first, while the controller can still reach their nodes; then the daemons
        with contextlib.suppress(Exception):
            if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
                subprocess.run(["scancel", "--full", "--user", str(os.getuid())], env=self.env,
                               capture_output=True, timeout=10)
                wait_until(lambda: not self.squeue_ids(), 15, 0.2)
        for name in sorted(self.procs, key=lambda n: n == "munged"):
            self._stop(name)
        if self.netns is not None:
            self.netns.close()      # kills whatever is left in the namespaces
            self.netns = None

    def _start(self, name: str, argv: list[str], netns: str | None) -> subprocess.Popen:
        if netns is not None:
            argv = ["nsenter", "--net=/run/netns/%s" % netns] + argv
        log = open(self.folder / ("%s.out" % name), "ab")
        proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def _stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def _start_munged(self) -> None:
        munge = self.folder / "munge"
        munge.mkdir(mode=0o755, exist_ok=True)     # the socket's folder: searchable by all
        key = munge / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
            os.chmod(key, 0o400)
        self.munge_socket = munge / "munge.socket"
        self._start("munged", ["munged", "-F", "--force", "--socket", str(self.munge_socket),
                               "--key-file", str(key), "--pid-file", str(munge / "munged.pid"),
                               "--log-file", str(munge / "munged.log"),
                               "--seed-file", str(munge / "munged.seed")], None)
        if not wait_until(lambda: self.munge_socket.exists(), 10, 0.05):
            raise RuntimeError("munged did not start (see %s)" % (munge / "munged.log"))

    def start_slurmd(self, node: str) -> None:
        host = self.netns.hosts[self.nodes.index(node)]
        self._start("slurmd-" + node, ["slurmd", "-D", "-N", node, "-f", str(self.conf)], host.name)

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL a node's slurmd (its jobs' processes keep running, as on a real node)."""
        self._stop("slurmd-" + node, signal.SIGKILL)

    def host(self, node: str):
        return self.netns.hosts[self.nodes.index(node)]

    # -- commands ------------------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check)

    def scontrol(self, *args: str) -> str:
        done = self.run("scontrol", *args, check=False)
        if done.returncode:
            raise RuntimeError("scontrol %s: %s" % (" ".join(args), done.stderr.strip()))
        return done.stdout

    def squeue_ids(self) -> list[str]:
        out = self.run("squeue", "-h", "-o", "%i", check=False).stdout
        return out.split()

    def node_states(self) -> dict[str, str]:
        try:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False, timeout=5).stdout
        except subprocess.TimeoutExpired:
            return {}
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_idle(self, nodes: list[str], timeout: float) -> None:
        def idle() -> bool:
            ctld = self.procs.get("slurmctld")
            if ctld is not None and ctld.poll() is not None:
                raise RuntimeError("slurmctld stopped (see %s)" % (self.folder / "log"))
            states = self.node_states()
            return all(states.get(n, "").rstrip("*") in ("idle", "mixed", "allocated")
                       for n in nodes)
        if not wait_until(idle, timeout, 0.1):
            raise RuntimeError("Slurm nodes not idle after %gs: %s (see %s)"
                               % (timeout, self.node_states(), self.folder))

    # -- configuration ------------------------------------------------------------------------
    def _write_config(self) -> None:
        f = self.folder
        for sub in ("state", "spool", "log"):
            (f / sub).mkdir(exist_ok=True)
        for node in self.nodes:     # slurmd makes no spool folder of its own
            (f / "spool" / node).mkdir(exist_ok=True)
        gateway = self.netns.gateway
        port = _free_port()
        lines = [
            "ClusterName=cddlmtest",
            # the controller's name must be this machine's (slurmctld checks), its address the bridge's
            "SlurmctldHost=%s(%s)" % (socket.gethostname().split(".")[0], gateway),
            "SlurmctldPort=%d" % port,
            "SlurmdPort=6818",
            "AuthType=auth/munge", "CredType=cred/munge",
            "AuthInfo=socket=%s" % (f / "munge" / "munge.socket"),
            "SlurmUser=root", "SlurmdUser=root",
            "StateSaveLocation=%s" % (f / "state"),
            "SlurmdSpoolDir=%s" % (f / "spool" / "%n"),
            "SlurmctldPidFile=%s" % (f / "slurmctld.pid"),
            "SlurmdPidFile=%s" % (f / "slurmd.%n.pid"),
            "SlurmctldLogFile=%s" % (f / "log" / "slurmctld.log"),
            "SlurmdLogFile=%s" % (f / "log" / "slurmd.%n.log"),
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/cgroup", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill",
            # a scheduling pass on an event (a submit) looks at default_queue_depth jobs, an
            # array's tasks each one: 100 (the default) leaves the rest of a 100-task array
            # to the full pass, every sched_interval (60 s)
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=2000",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "KillWait=%d" % self.kill_wait,
            "SlurmdTimeout=%d" % self.slurmd_timeout,
            "ReturnToService=1",       # (2 returns an admin-downed node at once)
            "MinJobAge=300",
            "MpiDefault=none",
            "TopologyPlugin=topology/tree",
        ]
        for i, node in enumerate(self.nodes):
            feats = self.features.get(node) or []
            lines.append("NodeName=%s NodeAddr=%s CPUs=%d RealMemory=%d%s State=UNKNOWN" % (
                node, self.netns.hosts[i].address, self.cpus, self.memory,
                " Features=%s" % ",".join(feats) if feats else ""))
        lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        lines.extend(self.extra)
        self.conf.write_text("\n".join(lines) + "\n")
        (f / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n"
                                       "ConstrainCores=no\nConstrainRAMSpace=no\n")
        (f / "topology.conf").write_text(self.topology())

    def topology(self) -> str:
        """Leaf switches of about equal size under one root switch."""
        per = -(-self.n // self.switches)
        leaves = []
        lines = []
        for s in range(self.switches):
            members = self.nodes[s * per:(s + 1) * per]
            if members:
                leaves.append("s%d" % (s + 1))
                lines.append("SwitchName=s%d Nodes=%s" % (s + 1, ",".join(members)))
        lines.append("SwitchName=top Switches=%s" % ",".join(leaves))
        return "\n".join(lines) + "\n"


def main() -> int:
    """``make slurm-cluster``: a Slurm cluster in namespaces and a portal on it (``--datacenter
    slurm:``) until Ctrl-C; the portal's other options may follow."""
    import argparse
    import tempfile
    parser = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--switches", type=int, default=2, help="leaf switches (topology.conf)")
    parser.add_argument("--cpus", type=int, default=64, help="CPUs each node declares")
    parser.add_argument("--port", type=int, default=int(os.environ.get("FRONT_PORT", "8080")))
    parser.add_argument("--dir", help="folder of the cluster's files (default: a new one in /tmp)")
    args, rest = parser.parse_known_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="cddlm-slurm-"))
    try:
        cluster = SlurmCluster(folder, nodes=args.nodes, switches=args.switches, cpus=args.cpus,
                               features={"n1": ["db"]}).__enter__()
    except pytest.skip.Exception as e:
        print("cannot start a Slurm cluster: %s" % e, file=sys.stderr)
        return 1
    print("Slurm nodes: %s (slurmctld on %s)\nSLURM_CONF=%s\nfolder: %s" % (
        ", ".join(cluster.nodes), cluster.netns.gateway, cluster.conf, folder), file=sys.stderr)
    from tests.engines.tour import serve
    return serve(["--port", str(args.port), "--state-dir", str(folder / "portal"),
                  "--datacenter", "slurm:", *rest], cluster.close, env=cluster.env)

if __name__ == "__main__":
    sys.exit(main())
