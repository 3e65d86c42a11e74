import pytest

from cddlm.errors import BadArgument
from cddlm.placement import api

from placement_builders import components, datacenter


def test_datacenter_hosts_providers_and_partitions():
    dc = api.load_datacenter(datacenter(racks=2, hosts=2, numa=True))
    names = lambda idx: sorted(dc.nodes[i].name for i in idx)  # noqa: E731
    assert names(dc.hosts) == ["h0_0", "h0_1", "h1_0", "h1_1"]
    assert names(dc.providers) == ["h%d_%d_n%d" % (r, h, k) for r in range(2)
                                   for h in range(2) for k in range(2)]
    assert dc.host_name(dc.by_name["h1_0_n1"]) == "h1_0"
    rack = dc.partition("level", "rack")
    assert rack.names[rack.of[dc.by_name["h1_1_n0"]]] == "r1"
    numa = dc.partition("level", "numa")
    assert numa.names[numa.of[dc.by_name["h1_1_n0"]]] == "h1_1_n0"


def test_network_hops_and_reach():
    dc = api.load_datacenter(datacenter(racks=2, hosts=2))
    assert dc.network.hops("h0_0", "h0_0") == 0
    assert dc.network.hops("h0_0", "h0_1") == 2
    assert dc.network.hops("h0_0", "h1_0") == 4
    assert dc.network.within("h0_0", 2) == {"h0_0", "h0_1"}
    assert len(dc.network.path_edges("h0_0", "h1_1")) == 4


def test_unmarked_provider_is_its_own_host():
    dc = api.load_datacenter({"resources": ["cpu"], "levels": ["rack", "PM"], "location": {
        "name": "k", "level": "rack", "children": [{"name": "pm1", "level": "PM",
                                                    "capacity": {"cpu": 2}}]}})
    assert [dc.nodes[h].name for h in dc.hosts] == ["pm1"]


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["location"]["children"][0]["children"][0]["capacity"].update(gpu=1),
     "unknown dimension 'gpu'"),
    (lambda d: d["location"]["children"][0].update(level="shelf"), "unknown level 'shelf'"),
    (lambda d: d["location"]["children"][1].update(name="r0"), "duplicate location node name"),
    (lambda d: d["location"]["children"][0].update(level="room"), "is not finer"),
    (lambda d: d["network"]["children"][0]["children"].append({"host": "nope"}),
     "'nope' is not a host"),
    (lambda d: d.update(scopes={"zone": {"a": ["h0_0"], "b": ["h0_0"]}}), "two aggregates"),
    (lambda d: d.update(scopes={"zone": {"a": ["ghost"]}}), "'ghost', which is not a host"),
    (lambda d: d["location"]["children"][0]["children"][0].update(capcity={}),
     "unknown key 'capcity'"),
    (lambda d: d["location"]["children"][0]["children"][0]["children"].append(
        {"name": "inner", "level": "numa", "agent": "local"}), "hosts cannot nest"),
])
def test_bad_datacenter(mutate, message):
    data = datacenter(numa=False)
    data["location"]["children"][0]["children"][0]["children"] = []
    mutate(data)
    with pytest.raises(BadArgument, match=message):
        api.load_datacenter(data)


@pytest.mark.parametrize("request_data, message", [
    ({"components": [{"name": "a", "demand": {"gpu": 1}}]}, "unknown dimension 'gpu'"),
    ({"components": components(["a", "a"])}, "duplicate component name 'a'"),
    ({"components": components(["a"]), "groups": [{"name": "g", "members": ["a", "b"]}]},
     "unknown member 'b'"),
    ({"components": components(["a"]), "groups": [{"name": "a", "members": ["a"]}]},
     "duplicate name 'a'"),
    ({"components": components(["a"]), "groups": [{"name": "g", "members": ["h"]},
                                                  {"name": "h", "members": ["g", "a"]}]},
     "contains itself"),
    ({"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
      "policies": [{"type": "llmn", "group": "g", "l1": "rack", "l2": "host"}]},
     r"policy 0 \(llmn\): n: expected a whole number"),
    ({"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
      "policies": [{"type": "anti-collocation", "group": "g"}]}, "exactly one of level and scope"),
    ({"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
      "policies": [{"type": "anti-collocation", "group": "g", "level": "pod"}]},
     "unknown level 'pod'"),
    ({"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
      "policies": [{"type": "collocation", "group": "g", "level": "rack", "weight": 2}]},
     "weight applies only to soft policies"),
    ({"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
      "policies": [{"type": "anti-affinity:zone", "group": "g"}]}, "unknown scope 'zone'"),
    ({"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
      "policies": [{"type": "teleport", "group": "g"}]}, "unknown policy type 'teleport'"),
    ({"components": components(["a", "b"]), "groups": [{"name": "g", "members": ["a", "b"]}],
      "policies": [{"type": "anti-affinity:host:h0_0", "group": "g"}]},
     "only affinity and soft-affinity take one"),
    ({"components": components(["a", "b"]),
      "policies": [{"type": "anti-collocation", "group": "a", "level": "host"}]},
     "'a' is a component; this policy needs a group"),
    ({"components": components(["a", "b"]),
      "policies": [{"type": "hop-limit", "between": ["a", "b"], "hops": -1}]},
     "hops: expected a whole number"),
    ({"components": components(["a"]), "existing": {"a": "nowhere"}},
     "'nowhere' is not a host or provider"),
    ({"components": components(["a"]), "policies": [{"type": "root-traits", "group": "a"}]},
     "give required or forbidden traits"),
])
def test_bad_request(request_data, message):
    dc = api.load_datacenter(datacenter())
    with pytest.raises(BadArgument, match=message):
        api.load_request(request_data, dc)


def test_policy_string_sets_scope_and_identifier():
    dc = api.load_datacenter(datacenter(zones={"za": ["h0_0"], "zb": ["h1_0"]}))
    req = api.load_request({"components": components(["a", "b"]),
                            "groups": [{"name": "g", "members": ["a", "b"]}],
                            "policies": [{"type": "soft-affinity:zone:za", "group": "g"}]}, dc)
    pol = req.policies[0]
    assert (pol.type, pol.hard, pol.partition, pol.params["target"]) == (
        "affinity", False, ("scope", "zone"), "za")


def test_a_capacity_that_is_not_a_mapping_is_a_clear_error():
    import pytest
    from cddlm.errors import BadArgument
    from cddlm.placement import api
    with pytest.raises(BadArgument) as e:
        api.load_datacenter({"resources": ["cpu"], "levels": ["host"],
                             "location": [{"name": "h", "level": "host", "capacity": [4]}]})
    assert "capacity must be a mapping" in str(e.value)
