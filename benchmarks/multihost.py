"""Multi-host enactment: a front portal delegating to host portals, against one local portal.

    .venv/bin/python benchmarks/multihost.py [--hosts 10] [--components 1000,10000] [--lease 10]

Starts ``--hosts`` host portals (``cddlm portal serve --agent``), each in a network namespace of
its own when it can make them (root and iproute2; else on loopback addresses 127.0.0.N), and a
front portal whose datacenter (two racks) names them as agents. For each size in
``--components``, one application of that many ``sleep`` components, each demanding one slot
(a host has room for 1.5x its share of the largest, so placement must spread them; a smaller
application's components demand as many slots as it is smaller, to spread the same way), with a hard
anti-collocation group of one component per host and a rack collocation group of 90
components, is deployed: create -> running and terminate -> terminated are timed, and the
front portal's CPU time (user + system, from /proc) over both is divided by the components.
Then the same applications on a single portal whose datacenter has the same hosts as local
directories (the floor: no delegation at all). Last, one host portal is killed (SIGKILL) with
an application running on it, and the time until the front portal reports the host down is
measured against the lease.

Printed: each phase's seconds and the CPU per component, for the front and the single
portal, with the targets beside them (issues 28 and 32: 1,000 running within 10 s, 10,000
within 60 s and terminated within 30 s, the front's CPU per component within 2x the single
portal's, host loss reported within 2x the lease), and the machine's load average (the
figures of a loaded machine are slower than its floor).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from lxml import etree  # noqa: E402

from cddlm import ns  # noqa: E402
from cddlm.client import Portal  # noqa: E402
from tests.conftest import LivePortal  # noqa: E402
from tests.multihost.cluster import MultiHost, kill_components  # noqa: E402

N = ns.NATIVE


def descriptor(n: int, hosts: int, slots: int = 1) -> etree._Element:
    """``n`` sleep components of ``slots`` slots each (a smaller application demands more per
    component, so that it spreads over hosts sized for the largest as that one does)."""
    root = etree.Element("{%s}application" % N, nsmap={None: N})
    for i in range(n):
        c = etree.SubElement(root, "{%s}component" % N, name="c%d" % i, type="process")
        argv = etree.SubElement(c, "{%s}attribute" % N, name="argv")
        for word in ("sleep", "3600"):
            etree.SubElement(argv, "{%s}item" % N).text = word
        demand = etree.SubElement(c, "{%s}attribute" % N, name="demand")
        etree.SubElement(demand, "{%s}item" % N, name="slots").text = str(slots)
    spread = etree.SubElement(root, "{%s}group" % N, name="spread")
    for i in range(min(hosts, n)):
        etree.SubElement(spread, "{%s}member" % N).text = "c%d" % i
    etree.SubElement(root, "{%s}policy" % N, type="anti-collocation", level="host", group="spread",
                     hard="true")
    if n > hosts + 1:
        rack = etree.SubElement(root, "{%s}group" % N, name="together")
        for i in range(hosts, min(hosts + 90, n)):
            etree.SubElement(rack, "{%s}member" % N).text = "c%d" % i
        etree.SubElement(root, "{%s}policy" % N, type="collocation", level="rack", group="together",
                         hard="true")
    return root


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path("/proc/%d/stat" % pid).read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(url: str, body: etree._Element, label: str, pid: int | None = None) -> dict:
    """create -> running and terminate -> terminated of ``body`` on the portal at ``url``, and
    the CPU seconds process ``pid`` (the portal) spent over both, when given."""
    front = Portal(url, failover=False, timeout=120)
    cpu0 = cpu_seconds(pid) if pid else 0.0
    t0 = time.monotonic()
    app = front.create(name=label)
    app.initialize(ns.NATIVE, body=body)
    initialized = time.monotonic() - t0      # placement and records, before any host is asked
    app.run()
    state = app.wait_for("running", timeout=600, interval=0.1)
    running = time.monotonic() - t0
    if state != "running":
        raise SystemExit("%s: the application is %s: %s" % (label, state, app.ping()["stateInfo"]))
    hosts: dict[str, int] = {}
    if len(body) <= 1100:   # (ext:components of 10,000 took over 120 s on the single portal)
        for c in app.components():
            hosts[c["host"]] = hosts.get(c["host"], 0) + 1
    t1 = time.monotonic()
    app.terminate("benchmark")
    app.wait_for("terminated", timeout=600, interval=0.1)
    terminated = time.monotonic() - t1
    cpu = cpu_seconds(pid) - cpu0 if pid else float("nan")
    app.destroy()
    return {"running": running, "terminated": terminated, "hosts": hosts, "cpu": cpu,
            "initialize": initialized}


def local_datacenter(folder: Path, hosts: int, slots: int) -> Path:
    per_rack = -(-hosts // 2)
    racks = [{"name": "rack%d" % (r + 1), "level": "rack", "children": [
        {"name": "h%d" % (i + 1), "level": "host", "agent": "local", "capacity": {"slots": slots}}
        for i in range(r * per_rack, min(hosts, (r + 1) * per_rack))]} for r in range(2)]
    path = folder / "local-datacenter.json"
    path.write_text(json.dumps({"resources": ["slots"], "levels": ["site", "rack", "host"],
                                "location": [{"name": "site", "level": "site", "children": racks}]}))
    return path


def profile(prefix: str, name: str, pid: int) -> subprocess.Popen:
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
                             "--output", "%s-%s.txt" % (prefix, name)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


TARGETS = {1000: (10.0, None), 10000: (60.0, 30.0)}    # components: (running, terminated) s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--components", default="1000,10000",
                    help="application sizes, comma-separated (default 1000,10000)")
    ap.add_argument("--lease", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--profile", metavar="PREFIX",
                    help="record the front portal and host portal h1 with py-spy (pip install "
                         "py-spy) during the front's runs: PREFIX-front.txt, PREFIX-h1.txt "
                         "(collapsed stacks)")
    ap.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (the portals' logs)")
    ap.add_argument("--no-single", action="store_true", help="skip the single portal's runs")
    args = ap.parse_args()
    sizes = [int(n) for n in args.components.split(",")]
    folder = Path(args.keep or tempfile.mkdtemp(prefix="cddlm-multihost-"))
    folder.mkdir(parents=True, exist_ok=True)
    slots = int(1.5 * max(sizes) / args.hosts) + 1
    results: dict = {"multi": {}, "single": {}}
    load = [os.getloadavg()[0]]
    # the front signs in to its host portals as a user: its quotas must hold a host's share
    share = ["--quota", "components=%d" % (2 * slots), "--quota", "descriptor_bytes=%d" % (1000 * slots)]
    try:
        with MultiHost(folder / "cluster", n=args.hosts, lease=args.lease, racks=2, slots=slots,
                       front_args=["--workers", str(args.workers)], host_args=share) as mh:
            where = "network namespaces" if mh.netns else "loopback addresses"
            print("%d host portals on %s; applications of %s components" % (
                args.hosts, where, ", ".join(str(n) for n in sizes)), flush=True)
            spies = [profile(args.profile, "front", mh.front.proc.pid),
                     profile(args.profile, "h1", mh.hosts[0].proc.pid)] if args.profile else []
            for n in sizes:
                results["multi"][n] = timed(mh.front.url, descriptor(n, args.hosts, max(sizes) // n), "multihost",
                                            mh.front.proc.pid)
                print("  front, %d: %.1f s running, %.1f s terminated" % (
                    n, results["multi"][n]["running"], results["multi"][n]["terminated"]), flush=True)
            for spy in spies:
                spy.send_signal(signal.SIGINT)      # py-spy writes its file and exits
                spy.wait(60)
            load.append(os.getloadavg()[0])
            # host loss: an application running on every host, then one host portal killed
            front = Portal(mh.front.url, failover=False)
            app = front.create(name="loss")
            app.initialize(ns.NATIVE, body=descriptor(args.hosts, args.hosts))
            app.run()
            app.wait_for("running", timeout=120)
            victim = mh.hosts[-1]
            t0 = time.monotonic()
            victim.kill()
            while not {h["name"]: h for h in front.hosts()}[victim.name]["down"]:
                time.sleep(0.1)
            results["loss"] = time.monotonic() - t0
            t0 = time.monotonic()
            app.wait_for("failed", timeout=120, interval=0.1)
            results["failed_after"] = results["loss"] + time.monotonic() - t0
            app.terminate()
            victim.start()
            app.wait_for("terminated", timeout=120)
        if not args.no_single:
            state = folder / "single"
            state.mkdir()
            single = LivePortal(state, extra=["--datacenter", str(local_datacenter(folder, args.hosts, slots)),
                                              "--workers", str(args.workers)]).start()
            try:
                for n in sizes:
                    results["single"][n] = timed(single.url, descriptor(n, args.hosts, max(sizes) // n), "single",
                                                 single.proc.pid)
                    print("  single portal, %d: %.1f s running, %.1f s terminated" % (
                        n, results["single"][n]["running"], results["single"][n]["terminated"]), flush=True)
            finally:
                single.stop()
                kill_components(state)      # (a portal's components outlive it, by design)
        load.append(os.getloadavg()[0])
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print("load average (1 min) before, between and after: %s on %d cores (others' work shares "
          "this machine)" % (", ".join("%.1f" % x for x in load), os.cpu_count() or 0))
    print("spread over hosts (smallest application): %s" % ", ".join(
        "%s=%d" % kv for kv in sorted(results["multi"][min(sizes)]["hosts"].items())))
    print("%-48s %9s %9s   %s" % ("phase", "front", "single", "target"))
    nothing = {"running": float("nan"), "terminated": float("nan"), "initialize": float("nan"),
               "cpu": float("nan")}
    for n in sizes:
        m, s = results["multi"][n], results["single"].get(n, nothing)
        run_target, end_target = TARGETS.get(n, (None, None))
        print("%-48s %8.1fs %8.1fs" % ("%d components: create -> initialize answered" % n,
                                        m["initialize"], s["initialize"]))
        print("%-48s %8.1fs %8.1fs   %s" % ("%d components: create -> running" % n, m["running"],
                                            s["running"], "front < %.0f s" % run_target if run_target else ""))
        print("%-48s %8.1fs %8.1fs   %s" % ("%d components: terminate -> terminated" % n, m["terminated"],
                                            s["terminated"], "front < %.0f s" % end_target if end_target else ""))
        print("%-48s %7.2fms %7.2fms   front <= 2x single (%.2fx)" % (
            "%d components: CPU per component (all phases)" % n, 1000 * m["cpu"] / n,
            1000 * s["cpu"] / n, m["cpu"] / s["cpu"] if s["cpu"] else float("nan")))
    print("%-48s %8.1fs %9s   <= %.0f s (2x lease %.0f s)" % (
        "host portal killed -> host reported down", results["loss"], "-", 2 * args.lease, args.lease))
    print("%-48s %8.1fs" % ("host portal killed -> application failed", results["failed_after"]))


if __name__ == "__main__":
    main()
