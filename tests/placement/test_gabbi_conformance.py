"""Placement's allocation-candidate gabbi cases (../shared/conformance/placement-gabbi), read at
test time: every case gives its expected HTTP status (400 = BadArgument) and, for 200, its
expected number of candidates. The corpus is never copied into this repository."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cddlm.errors import BadArgument
from cddlm.placement.candidates import allocation_candidates, load_providers
from cddlm.placement.candidates_query import parse_query

CANDIDATES = [Path(__file__).resolve().parents[2] / ".." / "shared", Path("/work/shared")]
CORPUS = next((p / "conformance" / "placement-gabbi" for p in CANDIDATES
               if (p / "conformance" / "placement-gabbi" / "cases-index.tsv").is_file()), None)
pytestmark = pytest.mark.skipif(CORPUS is None, reason="the shared conformance corpus "
                                "(../shared/conformance/placement-gabbi) is not present")


def _neutron_qos_multisegment() -> list[dict]:
    """NeutronQoSMultiSegmentFixture, built from the corpus README's description (fixtures.json
    describes it in words only)."""
    out = []
    root_inv = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}, "DISK_GB": {"total": 500}}
    vnic = ["CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_VNIC_TYPE_DIRECT_PHYSICAL",
            "CUSTOM_VNIC_TYPE_MACVTAP"]

    def bw(total):
        return {"NET_BW_EGR_KILOBIT_PER_SEC": {"total": total},
                "NET_BW_IGR_KILOBIT_PER_SEC": {"total": total}}
    for i, physnet in enumerate(["CUSTOM_PHYSNET_OTHER", "CUSTOM_PHYSNET_MSN_S1",
                                 "CUSTOM_PHYSNET_MSN_S2"]):
        cn = "compute%d" % i
        out += [
            {"name": cn, "parent": None, "inventory": root_inv},
            {"name": cn + "_ovs", "parent": cn, "traits": ["CUSTOM_VNIC_TYPE_NORMAL"],
             "inventory": {"NET_PACKET_RATE_KILOPACKET_PER_SEC": {"total": 1000}}},
            {"name": cn + "_br-ex", "parent": cn + "_ovs", "inventory": bw(5000),
             "traits": ["CUSTOM_VNIC_TYPE_NORMAL", physnet]},
            {"name": cn + "_sriov", "parent": cn, "traits": vnic, "inventory": {}},
            {"name": cn + "_pf", "parent": cn + "_sriov", "traits": vnic + [physnet],
             "inventory": bw(10000)},
        ]
    out += [
        {"name": "compute3", "parent": None, "inventory": root_inv},
        {"name": "compute3_ovs", "parent": "compute3", "traits": ["CUSTOM_VNIC_TYPE_NORMAL"],
         "inventory": {"NET_PACKET_RATE_KILOPACKET_PER_SEC": {"total": 1000}}},
        {"name": "compute3_br-ex", "parent": "compute3_ovs", "inventory": bw(1000),
         "traits": ["CUSTOM_VNIC_TYPE_NORMAL", "CUSTOM_PHYSNET_MSN_S1"]},
        {"name": "compute3_br-ex2", "parent": "compute3_ovs", "inventory": bw(1000),
         "traits": ["CUSTOM_VNIC_TYPE_NORMAL", "CUSTOM_PHYSNET_MSN_S2"]},
        {"name": "compute3_sriov", "parent": "compute3", "traits": vnic, "inventory": {}},
        {"name": "compute3_pf0", "parent": "compute3_sriov", "inventory": bw(1000),
         "traits": vnic + ["CUSTOM_PHYSNET_MSN_S1"]},
        {"name": "compute3_pf1", "parent": "compute3_sriov", "inventory": bw(1000),
         "traits": vnic + ["CUSTOM_PHYSNET_MSN_S2"]},
    ]
    return out


def _fixture(name: str) -> tuple[list[dict], dict[str, str]]:
    data = json.loads((CORPUS / "fixtures.json").read_text())
    if name == "NeutronQoSMultiSegmentFixture":
        return _neutron_qos_multisegment(), {}
    if name == "DeepNUMANetworkFixture":
        base = data["NUMANetworkFixture"]
        deep = data[name]
        providers = [dict(p) for p in deep["extra_providers"]] + [dict(p)
                                                                  for p in base["providers"]]
        for p in providers:
            p["parent"] = deep["reparent"].get(p["name"], p["parent"])
        return providers, base["env_names"]
    return data[name]["providers"], data[name]["env_names"]


def _cases():
    if CORPUS is None:
        return []
    with open(CORPUS / "cases-index.tsv", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return [pytest.param(r, id="%s: %s" % (r["file"], r["name"])) for r in rows]


@pytest.mark.parametrize("case", _cases())
def test_allocation_candidates_case(case):
    providers_raw, env = _fixture(case["fixture"])
    query = case["query"]
    for name, var in env.items():
        query = query.replace("$ENVIRON['%s']" % var, name)
    assert "$ENVIRON" not in query, query
    providers = load_providers(providers_raw)
    if case["status"] == "400":
        with pytest.raises(BadArgument):
            allocation_candidates(providers, parse_query(query, case["microversion"], providers))
        return
    request = parse_query(query, case["microversion"], providers)
    found = allocation_candidates(providers, request)
    assert len(found) == int(case["expected_candidates"]), [sorted(c.allocations) for c in found]
