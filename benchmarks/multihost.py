"""Multi-host enactment: a front portal delegating to host portals, against one local portal.

    .venv/bin/python benchmarks/multihost.py [--hosts 10] [--components 1000] [--lease 10]

Starts ``--hosts`` host portals (``cddlm portal serve --agent``), each in a network namespace of
its own when it can make them (root and iproute2; else on loopback addresses 127.0.0.N), and a
front portal whose datacenter (two racks) names them as agents. One application of
``--components`` ``sleep`` components, each demanding one slot (a host has room for 1.5x its
share, so placement must spread them), with a hard anti-collocation group of one component per
host and a rack collocation group of 90 components, is deployed: create -> running and
terminate -> terminated are timed. Then the same application on a single portal whose
datacenter has the same hosts as local directories (the floor: no delegation at all). Last, one
host portal is killed (SIGKILL) with an application running on it, and the time until the front
portal reports the host down is measured against the lease.

Printed: each phase's seconds, with the target beside it (running in under 10 s; host loss
reported within 2x the lease).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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
from tests.multihost.cluster import MultiHost  # noqa: E402

N = ns.NATIVE


def descriptor(n: int, hosts: int) -> etree._Element:
    root = etree.Element("{%s}application" % N, nsmap={None: N})
    for i in range(n):
        c = etree.SubElement(root, "{%s}component" % N, name="c%d" % i, type="process")
        argv = etree.SubElement(c, "{%s}attribute" % N, name="argv")
        for word in ("sleep", "3600"):
            etree.SubElement(argv, "{%s}item" % N).text = word
        demand = etree.SubElement(c, "{%s}attribute" % N, name="demand")
        etree.SubElement(demand, "{%s}item" % N, name="slots").text = "1"
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


def timed(url: str, body: etree._Element, label: str) -> dict:
    front = Portal(url, failover=False, timeout=120)
    t0 = time.monotonic()
    app = front.create(name=label)
    app.initialize(ns.NATIVE, body=body)
    app.run()
    state = app.wait_for("running", timeout=600, interval=0.1)
    running = time.monotonic() - t0
    if state != "running":
        raise SystemExit("%s: the application is %s: %s" % (label, state, app.ping()["stateInfo"]))
    hosts = {}
    for c in app.components():
        hosts[c["host"]] = hosts.get(c["host"], 0) + 1
    t1 = time.monotonic()
    app.terminate("benchmark")
    app.wait_for("terminated", timeout=600, interval=0.1)
    terminated = time.monotonic() - t1
    app.destroy()
    return {"running": running, "terminated": terminated, "hosts": hosts}


def local_datacenter(folder: Path, hosts: int, slots: int) -> Path:
    per_rack = -(-hosts // 2)
    racks = [{"name": "rack%d" % (r + 1), "level": "rack", "children": [
        {"name": "h%d" % (i + 1), "level": "host", "agent": "local", "capacity": {"slots": slots}}
        for i in range(r * per_rack, min(hosts, (r + 1) * per_rack))]} for r in range(2)]
    path = folder / "local-datacenter.json"
    path.write_text(json.dumps({"resources": ["slots"], "levels": ["site", "rack", "host"],
                                "location": [{"name": "site", "level": "site", "children": racks}]}))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", type=int, default=10)
    ap.add_argument("--components", type=int, default=1000)
    ap.add_argument("--lease", type=float, default=10.0)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="cddlm-multihost-"))
    slots = int(1.5 * args.components / args.hosts) + 1
    body = descriptor(args.components, args.hosts)
    results = {}
    try:
        with MultiHost(folder / "cluster", n=args.hosts, lease=args.lease, racks=2,
                       slots=slots, front_args=["--workers", str(args.workers)]) as mh:
            where = "network namespaces" if mh.netns else "loopback addresses"
            print("%d host portals on %s; %d components" % (args.hosts, where, args.components))
            results["multi"] = timed(mh.front.url, body, "multihost")
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
        state = folder / "single"
        state.mkdir()
        single = LivePortal(state, extra=["--datacenter", str(local_datacenter(folder, args.hosts, slots)),
                                          "--workers", str(args.workers)]).start()
        try:
            results["single"] = timed(single.url, body, "single")
        finally:
            single.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    m, s = results["multi"], results["single"]
    print("spread over hosts: %s" % ", ".join("%s=%d" % kv for kv in sorted(m["hosts"].items())))
    print("%-44s %8s %8s   %s" % ("phase", "multi", "single", "target"))
    print("%-44s %7.1fs %7.1fs   multi < 10 s" % ("create -> running", m["running"], s["running"]))
    print("%-44s %7.1fs %7.1fs" % ("terminate -> terminated", m["terminated"], s["terminated"]))
    print("%-44s %7.1fs %8s   <= %.0f s (2x lease %.0f s)" % (
        "host portal killed -> host reported down", results["loss"], "-", 2 * args.lease, args.lease))
    print("%-44s %7.1fs" % ("host portal killed -> application failed", results["failed_after"]))


if __name__ == "__main__":
    main()
