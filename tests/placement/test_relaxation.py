"""The packing relaxation: a lower bound over the whole problem, its provider pruning, and the
placements disaggregated from it."""

import random

from cddlm.placement import api, eligibility, relaxation, solver

from placement_builders import datacenter, solve


def loaded(racks, hosts, seed, load=(0.3, 0.9)):
    """A datacenter of 16c/64G hosts with random load, and that load as ``used``."""
    rnd = random.Random(seed)
    dc = datacenter(racks=racks, hosts=hosts, cpu=16, ram=64)
    used = {"h%d_%d" % (r, h): {"cpu": round(16 * rnd.uniform(*load)),
                                "ram": round(64 * rnd.uniform(*load))}
            for r in range(racks) for h in range(hosts)}
    return dc, used


def grouped(n, seed, policies=("llmn",)):
    """n components of a few flavours in groups of 4, with the given policy per group."""
    rnd = random.Random(seed)
    comps = []
    for i in range(n):
        v = rnd.choice([1, 2, 4])
        comps.append({"name": "c%d" % i, "demand": {"cpu": v, "ram": v * rnd.choice([2, 4])}})
    groups = [{"name": "g%d" % k, "members": ["c%d" % i for i in range(4 * k, 4 * k + 4)]}
              for k in range(n // 4)]
    pols = []
    for g in groups:
        if "llmn" in policies:
            pols.append({"type": "llmn", "group": g["name"], "l1": "rack", "l2": "host", "n": 2})
        if "rack-collocation" in policies:
            pols.append({"type": "collocation", "level": "rack", "group": g["name"]})
    return {"components": comps, "groups": groups, "policies": pols}


def instance(dc_data, req_data, used):
    dc = api.load_datacenter(dc_data)
    req = api.load_request(req_data, dc)
    return eligibility.build(dc, req, api.load_used(used, dc))


def test_pruned_providers_keep_the_relaxation_optimum_and_bound_every_placement(monkeypatch):
    for seed in range(4):
        dc_data, used = loaded(3, 6, seed)
        req_data = grouped(12, seed)
        inst = instance(dc_data, req_data, used)
        ks = relaxation.classes(inst)
        kept = relaxation.useful(inst, ks)
        assert sum(map(len, kept)) < sum(len(inst.eligible[k[0]]) for k in ks)  # it prunes
        rel = relaxation.solve(inst, 5.0)
        with monkeypatch.context() as m:  # every eligible provider
            m.setattr(relaxation, "useful", lambda inst, ks: [inst.eligible[k[0]] for k in ks])
            full = relaxation.solve(inst, 5.0)
        assert rel.optimal and full.optimal and rel.value == full.value == full.bound
        *_, out = solve(dc_data, req_data, used=used)  # CP-SAT over every candidate
        assert out["status"] == "optimal" and out["objective"] >= rel.bound


def test_a_large_request_is_proven_optimal_by_the_relaxation(monkeypatch):
    monkeypatch.setattr(solver, "LARGE_MODEL", 10)
    dc_data, used = loaded(4, 8, 1)
    *_, result, out = solve(dc_data, grouped(24, 1), used=used)
    assert out["status"] == "optimal" and out["solver"] == "relaxation"
    assert out["bound_by"] == "relaxation" and out["bound"] == out["objective"]
    again = solve(dc_data, grouped(24, 1), used=used)[3]
    assert again["assignment"] == out["assignment"]  # one worker, fixed seed: repeatable


def test_with_pruned_candidates_the_bound_is_for_the_whole_problem(monkeypatch):
    dc_data, used = loaded(3, 5, 2, load=(0.5, 0.9))
    req_data = grouped(12, 2, policies=("rack-collocation",))
    *_, exact = solve(dc_data, req_data, used=used)  # small: CP-SAT over every candidate
    assert exact["status"] == "optimal"
    monkeypatch.setattr(solver, "LARGE_MODEL", 10)
    monkeypatch.setattr(solver, "FULL_LIMIT", 10)
    monkeypatch.setattr(solver, "PRUNED_BUDGET", 24)
    monkeypatch.setattr(solver, "MIN_K", 2)
    *_, result, out = solve(dc_data, req_data, used=used)
    assert result.pruned and out["bound_by"] == "relaxation"
    assert out["bound"] <= exact["objective"] <= out["objective"]
