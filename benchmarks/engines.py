"""Hosts that already have an engine: one application on SSH hosts (or a Slurm cluster), next to
the same application on host portals and on one portal.

    .venv/bin/python benchmarks/engines.py [--engine ssh] [--compare hostportal,local]
                                           [--hosts 10] [--components 1000] [--lease 10]

Each engine is a cluster made on this machine (``ENGINES``: a context manager that yields its
portal's URL and a way to kill one host's engine): ``ssh``, an sshd per network namespace and a
portal whose datacenter names them ``ssh://...`` (tests/engines/sshd.py); ``hostportal``, host
portals (tests/multihost/cluster.py); ``local``, one portal whose hosts are local directories
(the floor); ``slurm``, a Slurm cluster (slurmctld here, a slurmd per network namespace:
tests/engines/slurm_cluster.py) and a portal whose datacenter names its nodes ``slurm:NODE``.

On each: after a warm-up application of one component per host (the portal's first placement
and first connections behind it), ``--components`` ``sleep`` components, each demanding one
slot (a host has room for 1.5x its share), with a hard host anti-collocation of one component
per host and a rack collocation of 90 (``benchmarks/multihost.py``'s application); create ->
running and terminate -> terminated are timed. Then, where the engine has hosts to lose, an application with one
component per host runs, one host's engine is killed (``sshd``: the listener and its sessions),
and the time until the application fails naming that host is measured against the lease
(Slurm: the killed ``slurmd``'s node is ``NOT_RESPONDING`` after ``SlurmdTimeout``, here the
lease, and the limit is twice that).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.multihost import descriptor, local_datacenter, timed  # noqa: E402
from cddlm import ns  # noqa: E402
from cddlm.client import Portal  # noqa: E402
from tests.conftest import LivePortal  # noqa: E402

TARGETS = {"ssh": (10.0, 10.0), "slurm": (20.0, 15.0)}     # running, terminated (seconds)


@dataclass
class Cluster:
    label: str
    url: str
    kill: Callable[[], str] | None = None     # kills one host's engine; returns the host's name
    limit: float = 0.0                        # the failure should be reported within this


def _portal(folder: Path, datacenter: Path, args, extra: list[str] = ()) -> LivePortal:
    folder.mkdir(parents=True, exist_ok=True)
    return LivePortal(folder, extra=["--datacenter", str(datacenter), "--workers", str(args.workers),
                                     "--agent-lease", str(args.lease), *extra]).start(timeout=120)


@contextlib.contextmanager
def ssh_engine(folder: Path, args, slots: int) -> Iterator[Cluster]:
    from tests.engines.sshd import SshHosts
    folder.mkdir(parents=True, exist_ok=True)
    with SshHosts(args.hosts, racks=2) as hosts:
        datacenter = folder / "ssh-datacenter.yaml"
        datacenter.write_text(hosts.datacenter_text(slots))
        lp = _portal(folder / "ssh", datacenter, args, ["--agent-credentials", str(hosts.credentials)])

        def kill() -> str:
            hosts.kill_sshd(args.hosts - 1)
            return hosts.name(args.hosts - 1)
        try:
            yield Cluster("%d SSH hosts in network namespaces" % args.hosts, lp.url, kill,
                          2 * args.lease)
        finally:
            lp.stop()


@contextlib.contextmanager
def hostportal_engine(folder: Path, args, slots: int) -> Iterator[Cluster]:
    from tests.multihost.cluster import MultiHost
    with MultiHost(folder / "hostportal", n=args.hosts, lease=args.lease, racks=2, slots=slots,
                   front_args=["--workers", str(args.workers)]) as mh:
        def kill() -> str:
            mh.hosts[-1].kill()
            return mh.hosts[-1].name
        yield Cluster("%d host portals" % args.hosts, mh.front.url, kill, 2 * args.lease)


@contextlib.contextmanager
def local_engine(folder: Path, args, slots: int) -> Iterator[Cluster]:
    folder.mkdir(parents=True, exist_ok=True)
    lp = _portal(folder / "local", local_datacenter(folder, args.hosts, slots), args)
    try:
        yield Cluster("one portal, %d local hosts" % args.hosts, lp.url)
    finally:
        lp.stop()


@contextlib.contextmanager
def slurm_engine(folder: Path, args, slots: int) -> Iterator[Cluster]:
    from tests.engines.slurm_cluster import SlurmCluster
    folder.mkdir(parents=True, exist_ok=True)
    # each job takes one CPU: a node declares room for every component the solver may give it
    with SlurmCluster(folder / "cluster", nodes=args.hosts, switches=2, cpus=slots + 8,
                      slurmd_timeout=max(5, int(args.lease))) as cluster:
        # the same datacenter as the other engines' (slots, two racks), its hosts Slurm nodes
        datacenter = local_datacenter(folder, args.hosts, slots)
        data = json.loads(datacenter.read_text())
        for rack in data["location"][0]["children"]:
            for host in rack["children"]:
                host["agent"] = "slurm:%s" % cluster.nodes[int(host["name"][1:]) - 1]
        datacenter.write_text(json.dumps(data))
        os.environ["SLURM_CONF"] = str(cluster.conf)       # the portal's, as a submit host's
        lp = _portal(folder / "slurm", datacenter, args)

        def kill() -> str:
            cluster.kill_slurmd(cluster.nodes[-1])
            return "h%d" % args.hosts
        try:
            yield Cluster("a %d-node Slurm cluster in network namespaces" % args.hosts, lp.url,
                          kill, 2 * cluster.slurmd_timeout)
        finally:
            lp.stop()
            os.environ.pop("SLURM_CONF", None)


ENGINES = {"ssh": ssh_engine, "slurm": slurm_engine, "hostportal": hostportal_engine,
           "local": local_engine}


def host_loss(cluster: Cluster, hosts: int) -> float:
    """Seconds from one host's engine killed to the application failed naming that host."""
    front = Portal(cluster.url, failover=False)
    app = front.create(name="loss")
    app.initialize(ns.NATIVE, body=descriptor(hosts, hosts))
    app.run()
    app.wait_for("running", timeout=120)
    t0 = time.monotonic()
    victim = cluster.kill()
    app.wait_for("failed", timeout=10 * cluster.limit + 60, interval=0.1)
    took = time.monotonic() - t0
    reason = app.ping()["terminationInfo"]["reason"] or ""
    if victim not in reason:
        raise SystemExit("the failure does not name host %s: %s" % (victim, reason))
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=sorted(ENGINES), default="ssh")
    ap.add_argument("--compare", default="hostportal,local",
                    help="engines to run the same application on, comma-separated ('' for none)")
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--components", type=int, default=1000)
    ap.add_argument("--lease", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    names = [args.engine] + [e for e in args.compare.split(",") if e and e != args.engine]
    folder = Path(tempfile.mkdtemp(prefix="cddlm-engines-"))
    slots = int(1.5 * args.components / args.hosts) + 1
    body = descriptor(args.components, args.hosts)
    results: dict[str, dict] = {}
    try:
        for name in names:
            with ENGINES[name](folder / name, args, slots) as cluster:
                print("%s: %s, %d components" % (name, cluster.label, args.components), flush=True)
                try:
                    # a first, small application (one component per host, not timed): the
                    # portal's first placement and its first connections are behind it
                    timed(cluster.url, descriptor(args.hosts, args.hosts), name + "-warm-up")
                    results[name] = timed(cluster.url, body, name)
                except SystemExit as e:
                    if name == args.engine:
                        raise
                    print("  (%s)" % e, flush=True)     # a comparison that failed: said, not fatal
                    results[name] = {"running": float("nan"), "terminated": float("nan")}
                    continue
                if name == args.engine and cluster.kill is not None:
                    results[name]["loss"] = host_loss(cluster, args.hosts)
                    results[name]["limit"] = cluster.limit
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    running, terminated = TARGETS.get(args.engine, (None, None))
    print("%-40s %s" % ("phase", " ".join("%11s" % n for n in names)) + "   target")
    for phase, target in (("running", running), ("terminated", terminated)):
        print("%-40s %s" % ("create -> running" if phase == "running" else "terminate -> terminated",
                            " ".join("%10.1fs" % results[n][phase] for n in names))
              + ("   %s < %.0f s" % (args.engine, target) if target else ""))
    mine = results[args.engine]
    if "loss" in mine:
        print("%-40s %10.1fs   <= %.0f s (2x lease)" % ("engine killed -> application failed",
                                                      mine["loss"], mine["limit"]))
    print(json.dumps({n: {k: v for k, v in r.items() if k != "hosts"} for n, r in results.items()}))


if __name__ == "__main__":
    main()
