"""Placement benchmark: the engine (greedy + CP-SAT, verified) and a Nova-style greedy baseline
side by side on named scenarios. Not a test: it prints measured figures.

    .venv/bin/python benchmarks/placement_suite.py [--quick] [--seed N] [--only NAME]

Columns: status; hard = hard violations the independent verifier finds (must be 0); soft =
soft violations (weighted units); objective (costs.py: soft violations first, then packing);
hosts = distinct hosts used; first = seconds to the first verified answer; seconds = total;
bound = a lower bound on the objective over the whole problem (every eligible provider): the
packing relaxation's or CP-SAT's when it saw every candidate, as the notes say; gap =
(objective - bound) / objective. Notes: by = the method that produced the answer; "pruned" =
CP-SAT searched pruned candidates (its own bound is then not used). The last lines compare the
engine's objective with the baseline's on the same instance and the same objective.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cddlm.placement import api  # noqa: E402
from cddlm.placement.costs import load_used  # noqa: E402
from cddlm.placement.verifier import verify  # noqa: E402
import nova_baseline  # noqa: E402


# -- datacenters -------------------------------------------------------------------------------
def rack_dc(racks, hosts, cpu=16, ram=64, disk=None, network=False, zones=None, traits=None,
            uplink=10_000, downlink=1_000):
    traits = traits or {}
    rs = []
    for r in range(racks):
        hs = []
        for h in range(hosts):
            name = "pm%d_%d" % (r, h)
            cap = {"cpu": cpu, "ram": ram}
            if disk:
                cap["disk"] = disk
            hs.append({"name": name, "level": "host", "capacity": cap, "agent": "local",
                       "traits": traits.get(name, [])})
        rs.append({"name": "rack%d" % r, "level": "rack", "children": hs})
    dc = {"resources": ["cpu", "ram"] + (["disk"] if disk else []),
          "levels": ["room", "rack", "host"],
          "location": {"name": "room", "level": "room", "children": rs}}
    if network:
        dc["network"] = {"name": "spine", "children": [
            {"name": "tor%d" % r, "bandwidth": uplink, "children": [
                {"host": "pm%d_%d" % (r, h), "bandwidth": downlink} for h in range(hosts)]}
            for r in range(racks)]}
    if zones:
        dc["scopes"] = {"zone": zones}
    return dc


def comp(name, cpu, ram, **extra):
    return dict({"name": name, "demand": {"cpu": cpu, "ram": ram}}, **extra)


# -- scenarios ---------------------------------------------------------------------------------
def ha_clusters(racks=4):
    """Heat use case: 3 HA clusters x 4 VMs, LLMN(L1=rack, L2=PM, N=2) each."""
    names = {c: ["M%d%d" % (c, i) for i in range(1, 5)] for c in (1, 2, 3)}
    req = {"components": [comp(m, 2, 4) for ms in names.values() for m in ms],
           "groups": [{"name": "G%d" % c, "members": ms} for c, ms in names.items()]
           + [{"name": "GRoot", "members": ["G1", "G2", "G3"]}],
           "policies": [{"type": "llmn", "group": "G%d" % c, "l1": "rack", "l2": "host", "n": 2}
                        for c in names]}
    return rack_dc(racks, 5 if racks > 1 else 8), req, {}, 10


def hadoop():
    """Heat example: namenode + 4 datanodes (soft anti-collocation per compute node), a 300 GB
    volume per datanode at hop count 0 (direct-attached), volumes exclusive per host disk,
    100 Mbit/s between the namenode and each datanode over 1 Gbit/s host links."""
    datanodes = ["datanode-%d" % i for i in range(1, 5)]
    volumes = ["volume-%d" % i for i in range(1, 5)]
    comps = [dict(comp("namenode", 2, 4), demand={"cpu": 2, "ram": 4, "disk": 20})]
    comps += [dict(comp(d, 2, 4), demand={"cpu": 2, "ram": 4, "disk": 20}) for d in datanodes]
    comps += [{"name": v, "demand": {"disk": 300}, "type": "volume"} for v in volumes]
    req = {"components": comps,
           "groups": [{"name": "hadoop-datanodes", "members": datanodes},
                      {"name": "volumes", "members": volumes}],
           "policies": [{"type": "anti-collocation", "level": "host", "group": "hadoop-datanodes",
                         "hard": False},
                        {"type": "anti-collocation", "level": "host", "group": "volumes"}]
           + [{"type": "hop-limit", "between": [d, v], "hops": 0}
              for d, v in zip(datanodes, volumes)]
           + [{"type": "bandwidth", "between": ["namenode", "hadoop-datanodes"], "mbps": 100}]}
    return rack_dc(2, 3, cpu=8, ram=32, disk=1000, network=True), req, {}, 10


def scoped_soft_anti_affinity():
    """Nova scoped spec: soft-anti-affinity:zone for 12 members over 3 zones of unequal room."""
    dc = rack_dc(3, 4, cpu=16, zones={"zone-a": ["pm0_%d" % h for h in range(4)],
                                      "zone-b": ["pm1_%d" % h for h in range(2)],
                                      "zone-c": ["pm2_0"]})
    names = ["web%d" % i for i in range(12)]
    req = {"components": [comp(n, 2, 4) for n in names],
           "groups": [{"name": "web", "members": names}],
           "policies": [{"type": "soft-anti-affinity:zone", "group": "web"}]}
    used = {"pm0_%d" % h: {"cpu": 12} for h in range(4)}  # zone-a nearly full
    return dc, req, used, 10


def trap_affinity():
    """Affinity group of 4: the most loaded host (first by the weighers) fits only 2."""
    names = ["a%d" % i for i in range(4)]
    req = {"components": [comp(n, 4, 8) for n in names],
           "groups": [{"name": "g", "members": names}],
           "policies": [{"type": "affinity", "group": "g"}]}
    return rack_dc(1, 3), req, {"pm0_0": {"cpu": 8}}, 10


def trap_collocation_rack():
    """Collocation per rack of 6: the fullest rack (picked first) holds only 4 of them."""
    names = ["c%d" % i for i in range(6)]
    req = {"components": [comp(n, 6, 8) for n in names],
           "groups": [{"name": "g", "members": names}],
           "policies": [{"type": "collocation", "level": "rack", "group": "g"}]}
    used = {"pm0_%d" % h: {"cpu": 8} for h in range(4)}
    return rack_dc(2, 4), req, used, 10


def trap_volume_locality():
    """VMs come first in the request and go to the fullest host; their volumes (hop count 0)
    then have no room there."""
    vms, vols = ["vm1", "vm2"], ["vol1", "vol2"]
    comps = [dict(comp(v, 2, 4), demand={"cpu": 2, "ram": 4}) for v in vms]
    comps += [{"name": v, "demand": {"disk": 400}} for v in vols]
    req = {"components": comps,
           "policies": [{"type": "hop-limit", "between": [a, b], "hops": 0}
                        for a, b in zip(vms, vols)]}
    dc = rack_dc(1, 3, cpu=8, ram=32, disk=1000, network=True)
    used = {"pm0_0": {"cpu": 4, "ram": 16, "disk": 900}}
    return dc, req, used, 10


def infeasible_llmn():
    dc, req, used, limit = ha_clusters(racks=1)
    return dc, req, used, limit


def infeasible_license():
    """Anti-affinity of 3 with a licence only two hosts carry, among irrelevant policies."""
    names = ["db%d" % i for i in range(3)]
    traits = {"pm0_0": ["LICENSE:acme:db"], "pm1_0": ["LICENSE:acme:db"]}
    req = {"components": [comp(n, 2, 4) for n in names] + [comp("app", 1, 1)],
           "groups": [{"name": "dbs", "members": names}],
           "policies": [{"type": "anti-collocation", "level": "rack", "group": "dbs",
                         "hard": False},
                        {"type": "license", "group": "dbs", "catalog": "acme", "product": "db"},
                        {"type": "root-traits", "group": "app", "forbidden": ["CUSTOM_OLD"]},
                        {"type": "anti-affinity", "group": "dbs"}]}
    return rack_dc(2, 3, traits=traits), req, {}, 10


def random_instance(hosts, components=1000, load=(0.5, 0.85), seed=0):
    """Groups of 4 with LLMN(rack, host, 2): at most 2 per rack, never 2 on a host. Hosts of
    32c/128G and 64c/256G, 20 per rack, already loaded uniformly in ``load``."""
    rnd = random.Random(seed)
    racks = []
    used = {}
    for r in range(hosts // 20):
        hs = []
        for h in range(20):
            big = rnd.random() < 0.5
            cpu, ram = (64, 256) if big else (32, 128)
            name = "h%d_%d" % (r, h)
            hs.append({"name": name, "level": "host", "capacity": {"cpu": cpu, "ram": ram}})
            used[name] = {"cpu": round(cpu * rnd.uniform(*load)),
                          "ram": round(ram * rnd.uniform(*load))}
        racks.append({"name": "r%d" % r, "level": "rack", "children": hs})
    dc = {"resources": ["cpu", "ram"], "levels": ["room", "rack", "host"],
          "location": {"name": "room", "level": "room", "children": racks}}
    comps = []
    for i in range(components):
        v = rnd.choice([1, 2, 4, 8])
        comps.append(comp("c%d" % i, v, v * rnd.choice([2, 4])))
    groups = [{"name": "g%d" % k, "members": ["c%d" % i for i in range(k * 4, k * 4 + 4)]}
              for k in range(components // 4)]
    policies = [{"type": "llmn", "group": g["name"], "l1": "rack", "l2": "host", "n": 2}
                for g in groups]
    return dc, {"components": comps, "groups": groups, "policies": policies}, used, 30


SCENARIOS = [
    ("heat-ha-clusters-llmn", ha_clusters),
    ("heat-hadoop-5vm", hadoop),
    ("nova-scoped-soft-anti-affinity", scoped_soft_anti_affinity),
    ("trap-affinity-host", trap_affinity),
    ("trap-collocation-rack", trap_collocation_rack),
    ("trap-volume-locality", trap_volume_locality),
    ("infeasible-llmn-one-rack", infeasible_llmn),
    ("infeasible-license", infeasible_license),
    ("random-1000x1000-light", lambda: random_instance(1000, load=(0.0, 0.6))),
    ("random-1000x1000-tight", lambda: random_instance(1000, load=(0.5, 0.85))),
    ("random-1000x10000-tight", lambda: random_instance(10000, load=(0.5, 0.85))),
]


def run(name, build, seed, quick):
    dc_data, req_data, used_data, limit = build()
    if quick:
        limit = min(limit, 5)
    t0 = time.perf_counter()
    dc = api.load_datacenter(dc_data)
    req = api.load_request(req_data, dc)
    load_s = time.perf_counter() - t0
    used = load_used(used_data, dc)
    rows = []
    t0 = time.perf_counter()
    result = api.solve(dc, req, time_limit=limit, seed=seed, used=used_data)
    seconds = time.perf_counter() - t0
    report = verify(dc, req, result.placement, used) if result.placement else None
    gap = None
    if result.bound is not None and result.objective:
        gap = (result.objective - result.bound) / max(1, abs(result.objective))
    extra = ""
    if result.status == "infeasible":
        extra = "conflicts=%s %s" % (result.conflicts, "(proven)" if result.proven else "")
    else:
        extra = "by %s" % result.solver
        if result.bound_by:
            extra += ", bound by %s" % result.bound_by
        if result.pruned:
            extra += ", pruned"
    hosts = len({dc.nodes[p].host for p in result.placement.values()}) or None
    rows.append((name, "engine", result.status, report, hosts, seconds, result.first_solution,
                 result.bound, gap, extra))
    t0 = time.perf_counter()
    nova = nova_baseline.schedule(dc, req, used)
    seconds = time.perf_counter() - t0
    n_report = verify(dc, req, nova, used) if nova else None
    hosts = len({dc.nodes[p].host for p in nova.values()}) if nova else None
    rows.append((name, "nova-greedy", "feasible" if nova else "no-valid-host", n_report, hosts,
                 seconds, seconds if nova else None, None, None, ""))
    return rows, load_s


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="time limits of at most 5 s")
    ap.add_argument("--only", help="run the scenarios whose name contains this")
    args = ap.parse_args(argv)
    head = ("%-31s %-11s %-13s %4s %5s %14s %5s %7s %8s %14s %7s  %s"
            % ("scenario", "method", "status", "hard", "soft", "objective", "hosts", "first",
               "seconds", "bound", "gap", "notes"))
    print(head)
    print("-" * len(head))
    versus = []
    for name, build in SCENARIOS:
        if args.only and args.only not in name:
            continue
        rows, load_s = run(name, build, args.seed, args.quick)
        objectives = {}
        for (n, method, status, report, hosts, secs, first, bound, gap, extra) in rows:
            hard = len(report.errors) if report else None
            soft = sum(e.violations for e in report.soft_violations()) if report else None
            objective = report.objective if report and report.ok else None
            objectives[method] = objective
            print("%-31s %-11s %-13s %4s %5s %14s %5s %7s %8s %14s %7s  %s" % (
                n, method, status, fmt(hard, "d"), fmt(soft, "d"), fmt(objective, "d"),
                fmt(hosts, "d"), fmt(first, ".3f"), fmt(secs, ".3f"), fmt(bound, "d"),
                fmt(gap, ".4%"), extra))
        sys.stdout.flush()
        mine, theirs = objectives.get("engine"), objectives.get("nova-greedy")
        if mine is not None and theirs:
            versus.append((name, (theirs - mine) / theirs))
    if versus:
        print()
    for name, better in versus:
        print("%-31s engine objective %.1f %% lower than nova-greedy" % (name, 100 * better))
    return 0


if __name__ == "__main__":
    sys.exit(main())
