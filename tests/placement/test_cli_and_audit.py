"""``cddlm placement solve`` end to end (a real subprocess), and the audit."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

from cddlm.placement import api

from placement_builders import components, datacenter

CDDLM = Path(sys.executable).parent / "cddlm"


def run(tmp_path, dc, req, *extra):
    (tmp_path / "dc.yaml").write_text(yaml.safe_dump(dc))
    (tmp_path / "req.json").write_text(json.dumps(req))
    return subprocess.run([str(CDDLM), "placement", "solve", "--datacenter",
                           str(tmp_path / "dc.yaml"), "--request", str(tmp_path / "req.json"),
                           "--time-limit", "5", *extra],
                          capture_output=True, text=True, timeout=120)


def test_cli_solves_and_prints_the_contract_result(tmp_path):
    names = ["a", "b", "c"]
    proc = run(tmp_path, datacenter(racks=2, hosts=2), {
        "components": components(names), "groups": [{"name": "g", "members": names}],
        "policies": [{"type": "anti-collocation", "level": "host", "group": "g"}]},
        "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"status", "assignment", "violations", "conflicts", "objective", "seconds",
            "solver"} <= set(out)
    assert out["status"] == "optimal" and len(set(out["assignment"].values())) == 3


def test_cli_rejects_invalid_input_with_a_message(tmp_path):
    proc = run(tmp_path, datacenter(), {"components": [{"name": "a", "demand": {"gpu": 1}}]})
    assert proc.returncode == 1 and proc.stdout == ""
    assert "BadArgument" in proc.stderr and "unknown dimension 'gpu'" in proc.stderr


def test_cli_reports_infeasible_with_conflicts(tmp_path):
    names = ["a", "b", "c"]
    proc = run(tmp_path, datacenter(racks=1, hosts=2), {
        "components": components(names), "groups": [{"name": "g", "members": names}],
        "policies": [{"type": "anti-collocation", "level": "host", "group": "g"}]})
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["status"] == "infeasible" and out["conflicts"] == [0]
    assert proc.stderr.count("\n") == 1 and "infeasible: " in proc.stderr
    assert "policy 0 (anti-collocation on g)" in proc.stderr


def test_audit_shows_vertices_and_soft_violations():
    zones = {"za": ["h0_0", "h0_1"], "zb": ["h1_0", "h1_1"]}
    dc_data = datacenter(racks=2, hosts=2, zones=zones)
    req = {"components": components(["a", "b", "c"]),
           "groups": [{"name": "g", "members": ["a", "b", "c"]}],
           "policies": [{"type": "soft-anti-affinity:zone", "group": "g"},
                        {"type": "anti-collocation", "level": "host", "group": "g"}]}
    out = api.audit_json(dc_data, req, {"a": "h0_0", "b": "h0_1", "c": "h1_0"})
    first, second = out["policies"]
    assert first["scope"] == "zone" and first["members"] == {"a": "za", "b": "za", "c": "zb"}
    assert first["met"] is False and first["violations"] == 1
    assert second["met"] is True and second["members"]["c"] == "h1_0"
    assert out["ok"] is True and out["violations"][0]["members"] == ["a", "b"]
    bad = api.audit_json(dc_data, req, {"a": "h0_0", "b": "h0_0", "c": "h1_0"})
    assert bad["ok"] is False and "policy 1 (anti-collocation on g) is violated" in \
        bad["hard_violations"][0]


def test_audit_hides_identifiers_of_scopes_that_allow_none():
    dc_data = datacenter(racks=2, hosts=1)
    dc_data["scopes"] = {"secret": {"aggregates": {"s1": ["h0_0"], "s2": ["h1_0"]},
                                    "allow_identifiers": False}}
    req = {"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
           "policies": [{"type": "anti-affinity:secret", "group": "g"}]}
    assignment = {"a": "h0_0", "b": "h1_0"}
    one = api.audit_json(dc_data, req, assignment, salt="x")["policies"][0]["members"]
    two = api.audit_json(dc_data, req, assignment, salt="y")["policies"][0]["members"]
    assert set(one.values()).isdisjoint({"s1", "s2"}) and one["a"] != one["b"]
    assert one != two  # a fresh salt gives fresh surrogates
