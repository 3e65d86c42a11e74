"""A placement request (CONTRACT section 10): components with demand vectors and required and
forbidden traits (of the provider that holds them), groups, existing placements, policies, and an
optional tenant (for scopes with per-tenant identifiers).

``existing`` pins a component to a host (any provider of that host) or to one provider.
"""

from __future__ import annotations

from dataclasses import dataclass

from cddlm.errors import BadArgument
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.groups import Groups, load_groups
from cddlm.placement.policies import Policy, load_policy
from cddlm.placement.values import check_keys, check_name, number, string_list

REQUEST_KEYS = ("components", "groups", "existing", "policies", "tenant")
COMPONENT_KEYS = ("name", "demand", "traits", "forbidden_traits", "type")


@dataclass
class Component:
    index: int
    name: str
    demand: dict[str, float]
    traits: frozenset[str]
    forbidden: frozenset[str]
    type: str | None


@dataclass
class Request:
    components: list[Component]
    groups: Groups
    existing: dict[int, int]  # component index -> node index (a host or a provider)
    policies: list[Policy]
    tenant: str | None

    def index(self, name: str) -> int:
        return self.groups.component_index[name]


def load_request(data: dict, dc: Datacenter) -> Request:
    """A ``Request`` checked against the datacenter; ``BadArgument`` when invalid."""
    if not isinstance(data, dict):
        raise BadArgument("request: expected a mapping, got %s" % type(data).__name__)
    check_keys(data, REQUEST_KEYS, "request")
    raw_components = data.get("components")
    if not isinstance(raw_components, list) or not raw_components:
        raise BadArgument("request: components must be a non-empty list")
    components: list[Component] = []
    index: dict[str, int] = {}
    for i, raw in enumerate(raw_components):
        if not isinstance(raw, dict):
            raise BadArgument("request: component %d must be a mapping" % (i + 1))
        name = check_name(raw.get("name"), "request: component %d: name" % (i + 1))
        where = "request: component %s" % name
        check_keys(raw, COMPONENT_KEYS, where)
        if name in index:
            raise BadArgument("request: duplicate component name %r" % name)
        demand = raw.get("demand") or {}
        if not isinstance(demand, dict):
            raise BadArgument("%s: demand must be a mapping {dimension: amount}" % where)
        for dim, amount in demand.items():
            if dim not in dc.resources:
                raise BadArgument("%s: unknown dimension %r in demand (resources are %s)"
                                  % (where, dim, ", ".join(dc.resources)))
            number(amount, "%s: demand %s" % (where, dim))
        traits = frozenset(string_list(raw.get("traits", []), where + ": traits"))
        forbidden = frozenset(string_list(raw.get("forbidden_traits", []),
                                          where + ": forbidden_traits"))
        if traits & forbidden:
            raise BadArgument("%s: traits both required and forbidden: %s"
                              % (where, ", ".join(sorted(traits & forbidden))))
        ctype = raw.get("type")
        if ctype is not None and not isinstance(ctype, str):
            raise BadArgument("%s: type must be text" % where)
        index[name] = len(components)
        components.append(Component(len(components), name, dict(demand), traits, forbidden,
                                    ctype))
    groups = load_groups(data.get("groups") or [], index, [c.type for c in components])
    existing = {}
    raw_existing = data.get("existing") or {}
    if not isinstance(raw_existing, dict):
        raise BadArgument("request: existing must be a mapping {component: host}")
    for comp, where_to in raw_existing.items():
        if comp not in index:
            raise BadArgument("request: existing names %r, which is not a component" % (comp,))
        if not isinstance(where_to, str) or where_to not in dc.by_name:
            raise BadArgument("request: existing %s: %r is not a host or provider of the "
                              "datacenter" % (comp, where_to))
        node = dc.node(where_to)
        if node.index not in dc.hosts and not node.capacity:
            raise BadArgument("request: existing %s: %s is neither a host nor a provider"
                              % (comp, where_to))
        existing[index[comp]] = node.index
    tenant = data.get("tenant")
    if tenant is not None and not isinstance(tenant, (str, int)):
        raise BadArgument("request: tenant must be text")
    tenant = None if tenant is None else str(tenant)
    raw_policies = data.get("policies") or []
    if not isinstance(raw_policies, list):
        raise BadArgument("request: policies must be a list")
    policies = [load_policy(i, p, dc, groups, tenant) for i, p in enumerate(raw_policies)]
    return Request(components, groups, existing, policies, tenant)
