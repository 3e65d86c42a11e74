"""The groups section (Proposal A): policies on groups, resources and relationships expand to
primitive applications exactly as the Heat policy extension defines them, and the model hands
the solver the same applications."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from cddlm.errors import DescriptorError
from cddlm.lang import hot, library, policies
from tests.lang.helpers import resolve_hot

FIXTURES = Path(__file__).parent / "fixtures"


def vm(name: str) -> str:
    return "%s: {type: OS::Nova::Server, properties: {flavor: m1.tiny}}\n" % name


def template(resources: str, groups: str = "") -> str:
    text = "heat_template_version: 2015-04-30\nresources:\n" + textwrap.indent(resources, "  ")
    if groups:
        text += "groups:\n" + textwrap.indent(textwrap.dedent(groups), "  ")
    return text


def pairs(applications, type_name=None):
    return {a.members for a in applications if type_name is None or a.type == type_name}


def consistent(text: str) -> list[policies.Application]:
    """Resolve; check the model's policies stand for the template's enforced applications."""
    result = resolve_hot(text)
    spec = [a for a in hot.expand_pairs(text) if policies.CATALOG[a.type].enforced == "solver"]
    assert sorted(hot.expand_pairs(result.deployment)) == sorted(spec)
    return spec


FOUR = "".join(vm(n) for n in ("R1", "R2", "R3", "R4"))
GP = """
    id: GP
    members:
      - {id: GL, members: [{get_resource: R1}, {get_resource: R2}]}
      - {id: GR, members: [{get_resource: R3}, {get_resource: R4}]}
    policies: [{type: anti-collocation, properties: {level: rack}}]
"""


def test_symmetric_policy_on_a_group_of_groups_pairs_across_subgroups_only():
    # the extension's example: applying it to GP means the pair {GL, GR}
    applications = consistent(template(FOUR, GP))
    assert pairs(applications) == {("R1", "R3"), ("R1", "R4"), ("R2", "R3"), ("R2", "R4")}
    dep = resolve_hot(template(FOUR, GP)).deployment
    assert [p.params for p in dep.policies] == [{"level": "rack", "between": ["GL", "GR"]}]
    assert {g.name: g.members for g in dep.groups} == \
        {"GP": ["GL", "GR"], "GL": ["R1", "R2"], "GR": ["R3", "R4"]}


def test_symmetric_policy_on_a_group_of_resources_is_every_unordered_pair():
    groups = """
        id: G
        members: [{get_resource: R1}, {get_resource: R2}, {get_resource: R3}]
        policies: [{type: OS::AntiCoLocation, properties: {level: host, hardConstraint: false, weight: 3}}]
    """
    applications = consistent(template(FOUR, groups))
    assert pairs(applications) == {("R1", "R2"), ("R1", "R3"), ("R2", "R3")}
    assert all(a.hard is False for a in applications)
    (policy,) = resolve_hot(template(FOUR, groups)).deployment.policies
    assert (policy.params["group"], policy.hard, policy.weight) == ("G", False, 3.0)


def test_a_container_member_stands_for_its_components():
    resources = FOUR + "box: {type: CDDLM::Compound, properties: {children: [{get_resource: R1}, {get_resource: R2}]}}\n"
    groups = """
        id: G
        members: [{get_resource: box}, {get_resource: R3}]
        policies: [{type: collocation, properties: {level: rack}}]
    """
    assert pairs(consistent(template(resources, groups))) == {("R3", "box/R1"), ("R3", "box/R2")}


def test_monadic_policy_applies_only_to_relevant_resources():
    resources = vm("server") + "disk: {type: OS::Cinder::Volume, properties: {size: 1}}\n"
    groups = """
        id: G
        members: [{get_resource: server}, {get_resource: disk}]
        policies: [{type: OS::LicensedProduct, properties: {catalog: ibm, product: db2}}]
    """
    applications = consistent(template(resources, groups))
    assert pairs(applications) == {("server",)}
    dep = resolve_hot(template(resources, groups)).deployment
    (policy,) = dep.policies
    derived = next(g for g in dep.groups if g.name == policy.params["group"])
    assert derived.members == ["server"] and derived.name != "G"
    library.check(dep)


def test_group_wide_policies_name_every_member_once():
    groups = """
        id: G
        members: [{get_resource: R1}, {get_resource: R2}, {get_resource: R3}, {get_resource: R4}]
        policies: [{type: llmn, properties: {L1: rack, L2: host, N: 2}}]
    """
    (application,) = consistent(template(FOUR, groups))
    assert application.members == ("R1", "R2", "R3", "R4")
    assert dict(application.params) == {"l1": "rack", "l2": "host", "n": 2}


def test_relationships_relate_ordered_pairs():
    groups = """
        id: G
        members:
          - {id: A, members: [{get_resource: R1}, {get_resource: R2}]}
          - {id: B, members: [{get_resource: R3}, {get_resource: R4}]}
        relationships: []
    """
    resources = FOUR.replace(
        "R1: {type: OS::Nova::Server, properties: {flavor: m1.tiny}}",
        "R1:\n  type: OS::Nova::Server\n  properties: {flavor: m1.tiny}\n  relationships:\n"
        "    - related: {get_group: B}\n"
        "      policies: [{type: OS::NetEndpointAccess, properties: {protocols: [tcp]}},\n"
        "                 {type: hop-limit, properties: {hops: 2}}]")
    applications = hot.expand_pairs(template(resources, groups))
    assert pairs(applications, "endpoint-access") == {("R1", "R3"), ("R1", "R4")}   # ordered
    assert pairs(applications, "hop-limit") == {("R1", "R3"), ("R1", "R4")}
    # the portal sets no network access rules: resolving refuses endpoint-access, precisely
    with pytest.raises(DescriptorError, match="endpoint-access on R1 -> B is not enforced") as info:
        resolve_hot(template(resources, groups))
    assert info.value.kind == "unsupported-policy" and info.value.line == 8
    without = resources.replace("{type: OS::NetEndpointAccess, properties: {protocols: [tcp]}},\n"
                                "                 ", "")
    dep = resolve_hot(template(without, groups)).deployment
    assert [p.type for p in dep.policies] == ["hop-limit"]
    assert dep.policies[0].params["between"] == ["R1", "B"]


def test_asymmetric_order_is_kept():
    resources = FOUR.replace(
        "R4: {type: OS::Nova::Server, properties: {flavor: m1.tiny}}",
        "R4:\n  type: OS::Nova::Server\n  properties: {flavor: m1.tiny}\n  relationships:\n"
        "    - related: {get_resource: R1}\n"
        "      policies: [{type: endpoint-access}]")
    assert pairs(hot.expand_pairs(template(resources))) == {("R4", "R1")}


@pytest.mark.parametrize("groups,resources,message", [
    ("id: G\nmembers: [{get_resource: R1}]\npolicies: [{type: endpoint-access}]\n", "",
     "asymmetric"),
    ("id: G\nmembers: [{get_resource: nope}]\n", "", "unknown resource"),
    ("id: G\nmembers: [{get_resource: R1}, {id: H, members: [{get_resource: R1}]}]\n", "",
     "already"),
    ("id: G\nmembers: [{id: G, members: []}]\n", "", "used twice"),
    ("id: R1\nmembers: []\n", "", "names a component"),
    ("id: G\nmembers: [R1]\n", "", "a member is"),
    ("id: G\nmembers: []\npolicies: [{type: teleport}]\n", "", "unknown policy type"),
    ("id: G\nmembers: []\npolicies: [{type: anti-collocation}]\n", "", "exactly one of"),
    ("id: G\nmembers: []\npolicies: [{type: hop-limit, properties: {hops: -1}}]\n", "", "hops"),
    ("id: G\nmembers: []\nrelationships: [{related: some-nova-uuid, policies: []}]\n", "",
     "outside"),
    ("id: G\nmembers: []\nrelationships: [{related: {get_group: H}, policies: []}]\n", "",
     "related must be"),
    ("id: G\nmembers: []\nrelationships: [{related: {get_resource: R1}, policies: "
     "[{type: license, properties: {catalog: a, product: b}}]}]\n", "", "not a pairwise"),
    ("", "X:\n  type: OS::Nova::Server\n  properties: {flavor: m1.tiny}\n"
         "  policies: [{type: hop-limit, properties: {hops: 1}}]\n", "needs two things"),
    ("", "X:\n  type: OS::Nova::Server\n  properties: {flavor: m1.tiny}\n"
         "  policies: [{type: llmn, properties: {l1: a, l2: b, n: 2}}]\n", "applies to a group"),
])
def test_bad_groups_and_policies(groups, resources, message):
    with pytest.raises(DescriptorError, match=message) as info:
        resolve_hot(template(FOUR + resources, groups))
    assert info.value.path and info.value.line


def test_the_hadoop_example_of_the_extension_loads_and_yields_its_policies():
    text = (FIXTURES / "hadoop_5vm.json").read_text()
    applications = hot.expand_pairs(text)
    datanodes = ["WCA4-hadoop-datanode-%d" % i for i in range(1, 5)]
    anti = [a for a in applications if a.type == "anti-collocation"]
    assert {a.members for a in anti} == {(a, b) for a in datanodes for b in datanodes if a < b}
    assert all(not a.hard and dict(a.params) == {"level": "compute_node"} for a in anti)
    hops = {a.members for a in applications if a.type == "hop-limit"}
    assert hops == {tuple(sorted(p)) for p in [
        ("WCA4-hadoop-datanode-4", "Storage_volume_used_by_datanode_server_0"),
        ("WCA4-hadoop-datanode-1", "Storage_volume_used_by_datanode_server_3"),
        ("WCA4-hadoop-datanode-3", "Storage_volume_used_by_datanode_server_1"),
        ("WCA4-hadoop-datanode-2", "Storage_volume_used_by_datanode_server_2")]}
    volumes = [a for a in applications if a.type.startswith("volume-")]
    assert len(volumes) == 8 and all(a.members[0].startswith("Storage_volume") for a in volumes)
    assert len(applications) == 6 + 4 + 8
    result = resolve_hot(text)
    assert sorted(hot.expand_pairs(result.deployment)) == sorted(anti + [
        a for a in applications if a.type == "hop-limit"])
    assert len(result.deployment.components) == 9


VOLUME = """
vol: {type: OS::Cinder::Volume, properties: {size: 1}, policies: [{type: OS::VolExclusive}, {type: OS::VolNotMoved}]}
a1: {type: OS::Cinder::VolumeAttachment, properties: {instance_uuid: {get_resource: R1}, volume_id: {get_resource: vol}}}
"""
SECOND = "a2: {type: OS::Cinder::VolumeAttachment, properties: {instance_uuid: {get_resource: R2}, volume_id: {get_resource: vol}}}\n"


def test_volume_policies_are_checked_or_hold_never_ignored():
    """volume-exclusive is checked on the template (one attachment at most); volume-not-moved
    holds because the portal never moves a placed component; neither reaches the solver."""
    dep = resolve_hot(template(FOUR + VOLUME)).deployment
    assert dep.policies == []
    assert {a.type for a in hot.expand_pairs(template(FOUR + VOLUME))} == \
        {"volume-exclusive", "volume-not-moved"}
    with pytest.raises(DescriptorError, match="volume vol is attached to 2 servers \\(R1, R2\\)") as info:
        resolve_hot(template(FOUR + VOLUME + SECOND))
    assert info.value.kind == "policy-violated" and info.value.line
    soft = VOLUME.replace("{type: OS::VolExclusive}",
                          "{type: OS::VolExclusive, properties: {hardConstraint: false}}")
    with pytest.raises(DescriptorError, match="policy-violated|attached to 2 servers"):
        resolve_hot(template(FOUR + soft + SECOND))     # soft changes nothing: no choice to make


def test_reachability_is_handed_to_the_solver():
    groups = """
        id: G
        members: [{get_resource: R1}, {get_resource: R2}]
        policies: [{type: OS::NetReachability}]
    """
    (application,) = consistent(template(FOUR, groups))
    assert application.type == "reachability" and application.members == ("R1", "R2")
