"""Each policy type, hard and soft, solved end to end; assertions read the assignment directly."""

from collections import Counter

import pytest

from cddlm.errors import BadArgument
from cddlm.placement import api
from placement_builders import components, datacenter, solve


def rack_of(host):
    return host.split("_")[0].replace("h", "r")


def group(name, members):
    return {"name": name, "members": members}


def test_hard_anti_collocation_per_host():
    names = ["a", "b", "c", "d"]
    *_, out = solve(datacenter(racks=2, hosts=2), {
        "components": components(names, cpu=1),
        "groups": [group("g", names)],
        "policies": [{"type": "anti-collocation", "level": "host", "group": "g"}]})
    assert out["status"] == "optimal"
    assert len(set(out["assignment"].values())) == 4


def test_hard_collocation_per_rack_on_nested_groups_pairs_only_across_subgroups():
    # GP = {GL, GR}: the pairs are across GL and GR, so all four share a rack; a second policy
    # on GL alone keeps l1 and l2 apart per host, showing members of one subgroup are free.
    req = {"components": components(["l1", "l2", "r1", "r2"], cpu=3),
           "groups": [group("GL", ["l1", "l2"]), group("GR", ["r1", "r2"]),
                      group("GP", ["GL", "GR"])],
           "policies": [{"type": "collocation", "level": "rack", "group": "GP"},
                        {"type": "anti-collocation", "level": "host", "group": "GL"}]}
    *_, out = solve(datacenter(racks=2, hosts=3), req)
    a = out["assignment"]
    assert len({rack_of(h) for h in a.values()}) == 1
    assert a["l1"] != a["l2"]


def test_soft_anti_collocation_counts_minimal_shared_pairs():
    names = ["m%d" % i for i in range(5)]
    _, _, result, out = solve(datacenter(racks=1, hosts=3, cpu=8), {
        "components": components(names, cpu=1),
        "groups": [group("g", names)],
        "policies": [{"type": "anti-collocation", "level": "host", "group": "g", "hard": False,
                      "weight": 2}]})
    per_host = Counter(out["assignment"].values())
    shared_pairs = sum(k * (k - 1) // 2 for k in per_host.values())
    assert shared_pairs == 2  # 5 over 3 hosts: 2+2+1 is the best spread
    assert out["violations"] == [{"index": 0, "type": "anti-collocation", "count": 2,
                                  "members": sorted(out["violations"][0]["members"])}]
    assert out["status"] == "optimal"


def test_llmn_three_ha_clusters():
    clusters = {c: ["M%d%d" % (c, i) for i in range(1, 5)] for c in (1, 2, 3)}
    req = {"components": components([m for ms in clusters.values() for m in ms], cpu=2),
           "groups": [group("G%d" % c, ms) for c, ms in clusters.items()]
           + [group("GRoot", ["G1", "G2", "G3"])],
           "policies": [{"type": "llmn", "group": "G%d" % c, "l1": "rack", "l2": "host", "n": 2}
                        for c in clusters]}
    *_, out = solve(datacenter(racks=4, hosts=5), req)
    assert out["status"] == "optimal"
    for ms in clusters.values():
        hosts = [out["assignment"][m] for m in ms]
        racks = Counter(rack_of(h) for h in hosts)
        assert len(set(hosts)) == 4 and len(racks) >= 2 and max(racks.values()) <= 2


def test_soft_llmn_reports_excess_when_one_rack():
    names = ["a", "b", "c"]
    *_, out = solve(datacenter(racks=1, hosts=3), {
        "components": components(names), "groups": [group("g", names)],
        "policies": [{"type": "llmn", "group": "g", "l1": "rack", "l2": "host", "n": 2,
                      "hard": False}]})
    # one rack: 1 missing l1 vertex + 1 member over ceil(3/2) = 2 per rack; hosts distinct
    assert out["violations"][0]["count"] == 2
    assert len(set(out["assignment"].values())) == 3


def test_scoped_anti_affinity_and_affinity_with_identifier():
    zones = {"za": ["h0_0", "h0_1"], "zb": ["h1_0"], "zc": ["h1_1"]}
    dc = datacenter(racks=2, hosts=2, zones=zones)
    zone_of = {h: z for z, hs in zones.items() for h in hs}
    *_, out = solve(dc, {
        "components": components(["a", "b", "c", "x", "y"]),
        "groups": [group("spread", ["a", "b", "c"]), group("pinned", ["x", "y"])],
        "policies": [{"type": "anti-affinity", "scope": "zone", "group": "spread"},
                     {"type": "affinity:zone:za", "group": "pinned"}]})
    a = out["assignment"]
    assert len({zone_of[a[m]] for m in "abc"}) == 3
    assert zone_of[a["x"]] == zone_of[a["y"]] == "za"


def test_soft_anti_affinity_spreads_evenly_over_unequal_zones():
    zones = {"big": ["h0_0", "h0_1", "h0_2"], "mid": ["h1_0", "h1_1"], "small": ["h1_2"]}
    names = ["w%d" % i for i in range(6)]
    *_, out = solve(datacenter(racks=2, hosts=3, cpu=16, zones=zones), {
        "components": components(names, cpu=1),
        "groups": [group("g", names)],
        "policies": [{"type": "soft-anti-affinity:zone", "group": "g"}]})
    zone_of = {h: z for z, hs in zones.items() for h in hs}
    assert sorted(Counter(zone_of[h] for h in out["assignment"].values()).values()) == [2, 2, 2]
    assert out["violations"][0]["count"] == 3  # one shared pair per zone


def test_same_subtree_hard_and_soft():
    req = {"components": components(["a", "b", "c"], cpu=3),
           "groups": [group("g1", ["a"]), group("g2", ["b", "c"])],
           "policies": [{"type": "same-subtree", "groups": ["g1", "g2"], "level": "rack"}]}
    *_, out = solve(datacenter(racks=2, hosts=2), req)
    assert len({rack_of(h) for h in out["assignment"].values()}) == 1
    req["components"] = components(["a", "b", "c"], cpu=8)  # a rack holds only two
    req["policies"][0]["hard"] = False
    *_, out = solve(datacenter(racks=2, hosts=2), req)
    assert out["violations"][0]["count"] == 1
    assert sorted(Counter(rack_of(h) for h in out["assignment"].values()).values()) == [1, 2]


def test_hop_limit_zero_means_same_host_and_two_means_same_switch():
    req = {"components": components(["vm", "vol"], cpu=4) + components(["peer"], cpu=4),
           "policies": [{"type": "hop-limit", "between": ["vm", "vol"], "hops": 0},
                        {"type": "hop-limit", "between": ["vm", "peer"], "hops": 2},
                        {"type": "anti-collocation", "level": "host",
                         "between": ["vm", "peer"]}]}
    *_, out = solve(datacenter(racks=2, hosts=2), req)
    a = out["assignment"]
    assert a["vm"] == a["vol"] and a["vm"] != a["peer"] and rack_of(a["vm"]) == rack_of(a["peer"])


def test_hop_limit_zero_is_the_same_host_without_a_network_tree():
    req = {"components": components(["vm", "vol", "other"], cpu=4),
           "policies": [{"type": "hop-limit", "between": ["vm", "vol"], "hops": 0},
                        {"type": "anti-collocation", "level": "host", "between": ["vm", "other"]}]}
    dc, r, _, out = solve(datacenter(racks=2, hosts=2, network=False), req)
    a = out["assignment"]
    assert out["status"] == "optimal" and a["vm"] == a["vol"] != a["other"]
    policy = api.audit(dc, r, out["providers"])["policies"][0]
    assert policy["type"] == "hop-limit" and policy["met"] and policy["scope"] == "host"
    req["components"] = components(["vm", "vol", "other"], cpu=6)   # a host holds one of them
    *_, out = solve(datacenter(racks=2, hosts=2, network=False), req)
    assert out["status"] == "infeasible" and out["conflicts"] == [0]
    req["policies"][0]["hops"] = 1                                  # more than 0 needs the tree
    with pytest.raises(BadArgument, match="1 hops need the datacenter's network tree"):
        solve(datacenter(racks=2, hosts=2, network=False), req)


def test_reachability_needs_a_path_in_the_network_tree():
    dc = datacenter(racks=2, hosts=1)
    dc["network"] = [dict(t, name="island%d" % i) for i, t in enumerate(dc["network"]["children"])]
    req = {"components": components(["web", "db"], cpu=6),          # one per host
           "policies": [{"type": "reachability", "between": ["web", "db"]}]}
    *_, out = solve(dc, req)
    assert out["status"] == "infeasible"                            # two islands, no path
    *_, out = solve(datacenter(racks=2, hosts=1), req)              # one tree: reachable
    assert out["status"] == "optimal" and len(set(out["assignment"].values())) == 2
    with pytest.raises(BadArgument, match="reachability needs the datacenter's network tree"):
        solve(datacenter(racks=2, hosts=1, network=False), req)


def test_bandwidth_respects_edge_capacity():
    # Each host's link carries 100 Mbit/s; three 60 Mbit/s pairs from one hub cannot all leave
    # the hub's host, so two partners must sit on the hub's own host (zero edges).
    req = {"components": components(["hub"], cpu=1) + components(["s1", "s2", "s3"], cpu=2),
           "groups": [group("spokes", ["s1", "s2", "s3"])],
           "policies": [{"type": "bandwidth", "between": ["hub", "spokes"], "mbps": 60}]}
    *_, out = solve(datacenter(racks=1, hosts=3, cpu=6, downlink=100), req)
    a = out["assignment"]
    assert sum(a[s] != a["hub"] for s in ("s1", "s2", "s3")) <= 1
    assert out["status"] == "optimal"


def test_soft_bandwidth_counts_pairs_over_an_edge():
    req = {"components": components(["a", "b"], cpu=6),
           "policies": [{"type": "bandwidth", "between": ["a", "b"], "mbps": 500,
                         "hard": False}]}
    *_, out = solve(datacenter(racks=1, hosts=2, cpu=8, downlink=100), req)
    assert out["violations"] == [{"index": 0, "type": "bandwidth", "members": ["a", "b"],
                                  "count": 1}]


def test_license_and_root_traits_on_the_host_above_a_numa_provider():
    traits = {"h0_1": ["LICENSE:oracle:db"], "h1_0": ["LICENSE:oracle:db", "CUSTOM_SLOW"]}
    req = {"components": components(["db1", "db2"], cpu=2),
           "groups": [group("dbs", ["db1", "db2"])],
           "policies": [{"type": "license", "group": "dbs", "catalog": "oracle",
                         "product": "db"},
                        {"type": "root-traits", "group": "dbs", "forbidden": ["CUSTOM_SLOW"]}]}
    *_, out = solve(datacenter(racks=2, hosts=2, numa=True, traits=traits), req)
    assert set(out["assignment"].values()) == {"h0_1"}
    assert all(p.startswith("h0_1_n") for p in out["providers"].values())


def test_soft_license_is_counted_not_enforced():
    req = {"components": components(["app"], cpu=2),
           "policies": [{"type": "license", "group": "app", "catalog": "c", "product": "p",
                         "hard": False, "weight": 3}]}
    *_, out = solve(datacenter(racks=1, hosts=1), req)
    assert out["status"] == "optimal" and out["violations"][0]["count"] == 1
    assert out["objective"] >= 3000 * 10_000


def test_existing_placements_and_used_capacity_are_honoured():
    req = {"components": components(["old"], cpu=4) + components(["new1", "new2"], cpu=4),
           "existing": {"old": "h0_0"}}
    used = {"h0_1": {"cpu": 8}}
    *_, out = solve(datacenter(racks=1, hosts=3), req, used=used)
    a = out["assignment"]
    assert a["old"] == "h0_0" and "h0_1" not in a.values()
    assert Counter(a.values())["h0_0"] <= 2


@pytest.mark.parametrize("soft", [False, True])
def test_relevance_by_component_type(soft):
    req = {"components": components(["vm1", "vm2"], type="server")
           + components(["v1"], type="volume"),
           "groups": [group("all", ["vm1", "vm2", "v1"])],
           "policies": [{"type": "anti-collocation", "level": "host", "group": "all",
                         "types": ["server"], "hard": not soft}]}
    dc, req_model, result, out = solve(datacenter(racks=1, hosts=2), req)
    assert req_model.policies[0].members == [0, 1]
    assert out["assignment"]["vm1"] != out["assignment"]["vm2"]
