"""Solver behaviour: greedy traps, infeasibility with conflicts, determinism, the verifier gate."""

import uuid

import pytest

from cddlm.placement import api, eligibility, greedy, solver
from cddlm.placement.identifiers import obfuscate, parse_policy_string, PolicyString
from cddlm.placement.verifier import verify

from placement_builders import components, datacenter, solve


def uneven_dc():
    """Host h0_0 is the cheapest to pack (most loaded) but fits two; h0_1 is empty and fits 4."""
    return datacenter(racks=1, hosts=2, cpu=8)


def test_affinity_greedy_trap_is_solved():
    names = ["a", "b", "c", "d"]
    dc_data, req_data = uneven_dc(), {
        "components": components(names, cpu=2),
        "groups": [{"name": "g", "members": names}],
        "policies": [{"type": "affinity", "group": "g"}]}
    used = {"h0_0": {"cpu": 4}}
    dc = api.load_datacenter(dc_data)
    req = api.load_request(req_data, dc)
    inst = eligibility.build(dc, req, api.load_used(used, dc))
    # one at a time in request order, packing first: the trap
    assert greedy.solve(inst, sequence=[0, 1, 2, 3], lookahead=False) is None
    *_, out = solve(dc_data, req_data, used=used)
    assert out["status"] == "optimal" and set(out["assignment"].values()) == {"h0_1"}


def test_infeasible_names_the_two_conflicting_policies():
    names = ["a", "b"]
    req = {"components": components(names), "groups": [{"name": "g", "members": names}],
           "policies": [{"type": "anti-collocation", "level": "host", "group": "g",
                         "hard": False},
                        {"type": "collocation", "level": "rack", "group": "g"},
                        {"type": "anti-collocation", "level": "rack", "group": "g"},
                        {"type": "llmn", "group": "g", "l1": "rack", "l2": "host", "n": 1}]}
    *_, out = solve(datacenter(racks=2, hosts=2), req)
    assert out["status"] == "infeasible" and out["proven"] is True
    assert out["conflicts"] == [1, 2]
    assert "policy 1 (collocation on g)" in out["reason"]


def test_infeasible_from_a_monadic_policy_and_from_capacity():
    req = {"components": components(["a"]),
           "policies": [{"type": "license", "group": "a", "catalog": "x", "product": "y"}]}
    *_, out = solve(datacenter(racks=1, hosts=2), req)
    assert out["status"] == "infeasible" and out["conflicts"] == [0]
    req = {"components": components(["a", "b", "c"], cpu=6)}
    *_, out = solve(datacenter(racks=1, hosts=2), req)
    assert out["status"] == "infeasible" and out["conflicts"] == []
    assert "capacities cannot hold" in out["reason"]


def test_same_seed_same_answer_and_cp_objective_matches_verifier():
    names = ["c%d" % i for i in range(12)]
    req = {"components": [{"name": n, "demand": {"cpu": 1 + i % 3, "ram": 2}}
                          for i, n in enumerate(names)],
           "groups": [{"name": "g%d" % k, "members": names[k::3]} for k in range(3)],
           "policies": [{"type": "anti-collocation", "level": "host", "group": "g%d" % k}
                        for k in range(3)]
           + [{"type": "soft-anti-affinity:rack", "group": "g0", "weight": 0.5}]}
    dc_data = datacenter(racks=3, hosts=3)
    runs = [solve(dc_data, req, seed=7) for _ in range(2)]
    assert runs[0][3]["assignment"] == runs[1][3]["assignment"]
    assert runs[0][3]["objective"] == runs[1][3]["objective"]
    _, _, result, out = runs[0]
    assert out["status"] == "optimal" and out["bound"] == out["objective"]


def test_greedy_answer_always_verified_and_never_worse_than_returned():
    names = ["c%d" % i for i in range(10)]
    dc_data = datacenter(racks=2, hosts=4)
    dc_data["location"]["children"][0]["children"][0]["capacity"]["cpu"] = 3
    req = {"components": [{"name": n, "demand": {"cpu": 1 + i % 4, "ram": 1}}
                          for i, n in enumerate(names)]}
    dc, req_model, result, out = solve(dc_data, req)
    inst = eligibility.build(dc, req_model, {})
    g = greedy.solve(inst)
    assert verify(dc, req_model, g).ok
    assert out["objective"] <= verify(dc, req_model, g).objective


def test_api_never_returns_a_placement_the_verifier_rejects(monkeypatch):
    dc = api.load_datacenter(datacenter(racks=1, hosts=2))
    req = api.load_request({"components": components(["a", "b"], cpu=6)}, dc)
    bad = solver.Result("feasible", {0: dc.by_name["h0_0"], 1: dc.by_name["h0_0"]}, None,
                        "cp-sat")
    monkeypatch.setattr(solver, "solve", lambda *a, **k: bad)
    result = api.solve(dc, req, time_limit=1)
    assert result.status == "infeasible" and result.placement == {}
    assert "verifier rejected" in result.reason


def test_verifier_finds_capacity_trait_and_policy_problems():
    dc = api.load_datacenter(datacenter(racks=1, hosts=2, traits={"h0_1": ["SSD"]}))
    req = api.load_request({
        "components": components(["a", "b"], cpu=5) + [{"name": "s", "traits": ["SSD"]}],
        "groups": [{"name": "g", "members": ["a", "b"]}],
        "policies": [{"type": "anti-collocation", "level": "host", "group": "g"}]}, dc)
    h0, h1 = dc.by_name["h0_0"], dc.by_name["h0_1"]
    report = verify(dc, req, {0: h0, 1: h0, 2: h0})
    text = " | ".join(report.errors)
    assert "cpu 10 exceeds capacity 8" in text
    assert "component s: provider h0_0 lacks required" in text
    assert "policy 0 (anti-collocation on g) is violated" in text
    assert verify(dc, req, {0: h0, 1: h1, 2: h1}).ok
    assert not verify(dc, req, {0: h0, 1: h1}).ok  # s not placed


def test_pruned_candidates_keep_the_greedy_choice(monkeypatch):
    monkeypatch.setattr(solver, "FULL_LIMIT", 10)
    monkeypatch.setattr(solver, "PRUNED_BUDGET", 12)
    monkeypatch.setattr(solver, "MIN_K", 3)
    names = ["c%d" % i for i in range(4)]
    dc_data, req = datacenter(racks=2, hosts=5), {"components": components(names, cpu=3)}
    *_, out = solve(dc_data, req)
    # pruned: never claimed optimal, but verified feasible
    assert out["status"] == "feasible" and len(out["assignment"]) == 4


def test_policy_strings_and_obfuscation():
    assert parse_policy_string("affinity") == PolicyString("affinity", "host", None)
    assert str(parse_policy_string("soft-anti-affinity:zone:z1")) == "soft-anti-affinity:zone:z1"
    with pytest.raises(Exception):
        parse_policy_string("near:zone")
    ns = uuid.UUID("6f72348f-df5d-4e0f-a043-4be92996dbfe")
    expected = str(uuid.uuid5(uuid.uuid5(ns, "12345"), "67890"))
    assert obfuscate(ns, "12345", "67890") == expected
    assert obfuscate(ns, "12346", "67890") != expected


def test_obfuscated_identifier_targets_the_tenants_aggregate():
    ns = "6f72348f-df5d-4e0f-a043-4be92996dbfe"
    dc_data = datacenter(racks=2, hosts=2)
    dc_data["scopes"] = {"mz": {"aggregates": {"m1": ["h0_0", "h0_1"], "m2": ["h1_0", "h1_1"]},
                                "obfuscate_identifiers": True, "namespace": ns}}
    target = obfuscate(uuid.UUID(ns), "tenant-a", "m2")
    req = {"components": components(["a", "b"]), "tenant": "tenant-a",
           "groups": [{"name": "g", "members": ["a", "b"]}],
           "policies": [{"type": "affinity:mz:" + target, "group": "g"}]}
    *_, out = solve(dc_data, req)
    assert set(out["assignment"].values()) <= {"h1_0", "h1_1"}
    req["tenant"] = "tenant-b"
    with pytest.raises(Exception, match="not an identifier of scope mz for tenant tenant-b"):
        solve(dc_data, req)
