"""The policy catalog (CONTRACT section 10): each policy type, its parameters, and its expansion to
the components (monadic and synthetic policies) or pairs of components (dyadic policies) it
constrains. Every policy is hard (default) or soft with a positive ``weight``.

| type | parameters | constrains |
|---|---|---|
| collocation, anti-collocation | ``level`` or ``scope``; ``group`` or ``between`` | pairs: same / different vertex |
| llmn | ``group``, ``l1``, ``l2``, ``n`` | members: >= n l1 vertices, <= ceil(M/n) each, <= 1 per l2 vertex |
| affinity, anti-affinity, soft-affinity, soft-anti-affinity | ``group``, ``scope`` (host), ``identifier`` | all member pairs; an identifier confines affinity to one aggregate |
| same-subtree | ``groups``, ``level`` | members of all the groups under one vertex |
| hop-limit | ``between`` (or ``group``), ``hops`` | pairs: network path <= hops edges (0: one host, no tree needed) |
| reachability | ``between`` (or ``group``) | pairs: connected by the network tree |
| bandwidth | ``between`` (or ``group``), ``mbps`` | pairs: reserve mbps on every edge of the path |
| license | ``group``, ``catalog``, ``product`` | members: host has trait LICENSE:catalog:product |
| root-traits | ``group``, ``required``, ``forbidden`` | members: traits of the host above the provider |

Every policy also accepts ``name`` and ``types`` (the component types it is relevant to). Nova
types may carry scope and identifier in the type string (``soft-anti-affinity:zone``). Nova
policies apply to all pairs of the flattened group (Nova groups are flat); the Heat types follow
the Heat pair expansion (``groups.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from cddlm.errors import BadArgument
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.groups import Groups, pairs_of_parts
from cddlm.placement.identifiers import NOVA_TYPES, obfuscate, parse_policy_string
from cddlm.placement.values import check_keys, check_name, integer, number, string_list

COMMON = ("type", "hard", "weight", "name", "types")
PARAMS = {
    "collocation": ("level", "scope", "group", "between"),
    "anti-collocation": ("level", "scope", "group", "between"),
    "llmn": ("group", "l1", "l2", "n"),
    "affinity": ("group", "scope", "identifier"),
    "anti-affinity": ("group", "scope", "identifier"),
    "same-subtree": ("groups", "level"),
    "hop-limit": ("group", "between", "hops"),
    "reachability": ("group", "between"),
    "bandwidth": ("group", "between", "mbps"),
    "license": ("group", "catalog", "product"),
    "root-traits": ("group", "required", "forbidden"),
}
PAIRWISE = ("collocation", "anti-collocation", "hop-limit", "reachability", "bandwidth")


@dataclass
class Policy:
    index: int  # position in the request's policy list (what ``conflicts`` names)
    type: str  # canonical: soft-affinity is type affinity with hard False
    written: str  # the type as the request wrote it
    hard: bool
    weight: float
    name: str | None
    partition: tuple[str, str] | None = None  # ("level"|"scope", name) where vertices matter
    members: list[int] = field(default_factory=list)  # every component constrained
    parts: list[list[int]] = field(default_factory=list)  # pair structure (dyadic)
    pairs: list[tuple[int, int]] = field(default_factory=list)  # expanded pairs (a < b)
    params: dict[str, Any] = field(default_factory=dict)
    target: str = ""  # the group(s) or components it was written on, as the request names them

    @property
    def label(self) -> str:
        return "policy %d (%s%s%s)" % (self.index, self.written,
                                       " on %s" % self.target if self.target else "",
                                       ", %s" % self.name if self.name else "")


def load_policy(index: int, raw, dc: Datacenter, groups: Groups, tenant: str | None) -> Policy:
    where = "request: policy %d" % index
    if not isinstance(raw, dict):
        raise BadArgument("%s: expected a mapping with a type, got %r" % (where, raw))
    written = raw.get("type")
    if not isinstance(written, str):
        raise BadArgument("%s: type is missing (one of %s)" % (where, ", ".join(
            sorted(set(PARAMS) | set(NOVA_TYPES)))))
    raw = dict(raw)
    base = written.split(":", 1)[0]
    if ":" in written or base in NOVA_TYPES:
        ps = parse_policy_string(written)
        for key, value in (("scope", ps.scope if ":" in written else None),
                           ("identifier", ps.identifier)):
            if value is not None:
                if raw.get(key, value) != value:
                    raise BadArgument("%s (%s): %s %r contradicts the type string"
                                      % (where, written, key, raw[key]))
                raw[key] = value
    kind = base[5:] if base.startswith("soft-") else base
    if kind not in PARAMS:
        raise BadArgument("%s: unknown policy type %r (known: %s)" % (where, written, ", ".join(
            sorted(set(PARAMS) | set(NOVA_TYPES)))))
    where = "%s (%s)" % (where, written)
    check_keys(raw, COMMON + PARAMS[kind], where)
    hard = raw.get("hard", not base.startswith("soft-"))
    if not isinstance(hard, bool):
        raise BadArgument("%s: hard must be true or false, got %r" % (where, hard))
    if base.startswith("soft-") and hard:
        raise BadArgument("%s: a soft-* policy cannot be hard" % where)
    if "weight" in raw and hard:
        raise BadArgument("%s: weight applies only to soft policies (hard: false)" % where)
    weight = number(raw.get("weight", 1.0), where + ": weight", positive=True)
    name = check_name(raw["name"], where + ": name") if raw.get("name") is not None else None
    types = raw.get("types")
    types = frozenset(string_list(types, where + ": types")) if types is not None else None
    policy = Policy(index, kind, written, hard, weight, name, target=_target(raw))
    _LOADERS[kind](policy, raw, where, dc, groups, types, tenant)
    if kind in PAIRWISE and not policy.pairs:
        raise BadArgument("%s: expands to no pair of components (see the pair rules for "
                          "groups)" % where)
    if not policy.members:
        raise BadArgument("%s: applies to no component (no relevant member)" % where)
    return policy


def _target(raw) -> str:
    """What a policy is on, for its label: ``all``, ``web and db``, ``a, b``."""
    for key, sep in (("group", ""), ("between", " and "), ("groups", ", ")):
        value = raw.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and sep and all(isinstance(v, str) for v in value):
            return sep.join(value)
    return ""


def _names(raw, key: str, where: str, groups: Groups, *, group_only: bool) -> str:
    value = raw.get(key)
    if value is None:
        raise BadArgument("%s: %s is missing" % (where, key))
    if not isinstance(value, str) or not (groups.is_group(value) or
                                          value in groups.component_index):
        raise BadArgument("%s: %s %r is not a group or a component" % (where, key, value))
    if group_only and not groups.is_group(value):
        raise BadArgument("%s: %s %r is a component; this policy needs a group (or use between)"
                          % (where, key, value))
    return value


def _partition(policy: Policy, raw, where: str, dc: Datacenter, *, default_scope=None) -> None:
    level, scope = raw.get("level"), raw.get("scope", default_scope)
    if (level is None) == (scope is None):
        raise BadArgument("%s: give exactly one of level and scope" % where)
    if level is not None:
        if level not in dc.levels:
            raise BadArgument("%s: unknown level %r (levels are %s)" % (where, level,
                                                                       ", ".join(dc.levels)))
        policy.partition = ("level", level)
    elif scope in dc.levels:
        policy.partition = ("level", scope)
    elif scope == "host" or scope in dc.scopes:
        policy.partition = ("scope", scope)
    else:
        raise BadArgument("%s: unknown scope %r (scopes are host, %s; levels %s)" % (
            where, scope, ", ".join(sorted(dc.scopes)) or "none defined", list(dc.levels)))


def _dyadic(policy: Policy, raw, where: str, groups: Groups, types) -> None:
    if ("group" in raw) == ("between" in raw):
        raise BadArgument("%s: give exactly one of group and between" % where)
    if "group" in raw:
        group = _names(raw, "group", where, groups, group_only=True)
        policy.parts = groups.group_parts(group, types)
    else:
        between = raw["between"]
        if not isinstance(between, list) or len(between) != 2:
            raise BadArgument("%s: between must be a list of two groups or components" % where)
        for name in between:
            _names({"between": name}, "between", where, groups, group_only=False)
        policy.parts = [groups.covers(between[0], types), groups.covers(between[1], types)]
    policy.pairs = pairs_of_parts(policy.parts)
    policy.members = sorted({c for pair in policy.pairs for c in pair})


def _load_collocation(policy, raw, where, dc, groups, types, tenant):
    _partition(policy, raw, where, dc)
    _dyadic(policy, raw, where, groups, types)


def _load_llmn(policy, raw, where, dc, groups, types, tenant):
    policy.members = groups.covers(_names(raw, "group", where, groups, group_only=False), types)
    for key in ("l1", "l2"):
        if raw.get(key) not in dc.levels:
            raise BadArgument("%s: %s must be a level (one of %s), got %r"
                              % (where, key, ", ".join(dc.levels), raw.get(key)))
    n = integer(raw.get("n"), where + ": n", minimum=1)
    m = len(policy.members)
    policy.params = {"l1": raw["l1"], "l2": raw["l2"], "n": n,
                     "per_l1": math.ceil(m / n) if m else 0}


def _load_nova(policy, raw, where, dc, groups, types, tenant):
    _partition(policy, raw, where, dc, default_scope="host")
    policy.members = groups.covers(_names(raw, "group", where, groups, group_only=False), types)
    policy.parts = [[c] for c in policy.members]
    policy.pairs = pairs_of_parts(policy.parts)
    identifier = raw.get("identifier")
    if identifier is None:
        return
    if policy.type != "affinity":
        raise BadArgument("%s: an identifier targets one aggregate, so only affinity and "
                          "soft-affinity take one" % where)
    kind, name = policy.partition
    if kind == "level":
        if identifier not in dc.by_name or dc.node(identifier).level != name:
            raise BadArgument("%s: identifier %r is not a %s" % (where, identifier, name))
        policy.params["target"] = identifier
        return
    if name == "host":
        if identifier not in {dc.nodes[h].name for h in dc.hosts}:
            raise BadArgument("%s: identifier %r is not a host" % (where, identifier))
        policy.params["target"] = identifier
        return
    scope = dc.scopes[name]
    if not scope.allow_identifiers:
        raise BadArgument("%s: scope %s does not allow identifiers" % (where, name))
    if scope.obfuscate_identifiers:
        if tenant is None:
            raise BadArgument("%s: scope %s uses per-tenant identifiers; the request needs a "
                              "tenant" % (where, name))
        real = {obfuscate(scope.namespace, tenant, agg): agg for agg in scope.aggregates}
        if identifier not in real:
            raise BadArgument("%s: %r is not an identifier of scope %s for tenant %s"
                              % (where, identifier, name, tenant))
        policy.params["target"] = real[identifier]
    elif identifier in scope.aggregates:
        policy.params["target"] = identifier
    else:
        raise BadArgument("%s: %r is not an aggregate of scope %s" % (where, identifier, name))


def _load_same_subtree(policy, raw, where, dc, groups, types, tenant):
    names = raw.get("groups")
    if not isinstance(names, list) or not names:
        raise BadArgument("%s: groups must be a non-empty list of groups" % where)
    members: set[int] = set()
    for name in names:
        members.update(groups.covers(_names({"groups": name}, "groups", where, groups,
                                            group_only=False), types))
    if raw.get("level") is None:
        raise BadArgument("%s: level is missing" % where)
    _partition(policy, {"level": raw.get("level")}, where, dc)
    policy.members = sorted(members)


def _load_hops(policy, raw, where, dc, groups, types, tenant):
    hops = integer(raw.get("hops"), where + ": hops")
    _dyadic(policy, raw, where, groups, types)
    if hops == 0:
        # 0 hops is the same host, with or without a network tree: a collocation in the host
        # scope (written, audited and named in conflicts as the hop-limit it is)
        policy.type, policy.partition = "collocation", ("scope", "host")
        return
    if dc.network is None:
        raise BadArgument("%s: %d hops need the datacenter's network tree (0 hops, the same "
                          "host, need none)" % (where, hops))
    policy.params["hops"] = hops


def _load_reachability(policy, raw, where, dc, groups, types, tenant):
    """Reachability (Heat's OS::NetReachability): the pair's hosts are connected by the
    network tree (one host reaches itself): a hop limit no path can exceed."""
    _dyadic(policy, raw, where, groups, types)
    if dc.network is None:
        raise BadArgument("%s: reachability needs the datacenter's network tree" % where)
    policy.type = "hop-limit"
    policy.params["hops"] = len(dc.network.nodes)


def _load_bandwidth(policy, raw, where, dc, groups, types, tenant):
    if dc.network is None:
        raise BadArgument("%s: the datacenter has no network tree" % where)
    _dyadic(policy, raw, where, groups, types)
    policy.params["mbps"] = number(raw.get("mbps"), where + ": mbps", positive=True)


def _load_license(policy, raw, where, dc, groups, types, tenant):
    policy.members = groups.covers(_names(raw, "group", where, groups, group_only=False), types)
    for key in ("catalog", "product"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise BadArgument("%s: %s must be a non-empty text" % (where, key))
    policy.params["required"] = frozenset(["LICENSE:%s:%s" % (raw["catalog"], raw["product"])])
    policy.params["forbidden"] = frozenset()


def _load_root_traits(policy, raw, where, dc, groups, types, tenant):
    policy.members = groups.covers(_names(raw, "group", where, groups, group_only=False), types)
    required = frozenset(string_list(raw.get("required", []), where + ": required"))
    forbidden = frozenset(string_list(raw.get("forbidden", []), where + ": forbidden"))
    if not required and not forbidden:
        raise BadArgument("%s: give required or forbidden traits" % where)
    if required & forbidden:
        raise BadArgument("%s: traits both required and forbidden: %s"
                          % (where, ", ".join(sorted(required & forbidden))))
    policy.params.update(required=required, forbidden=forbidden)


_LOADERS = {
    "collocation": _load_collocation, "anti-collocation": _load_collocation,
    "llmn": _load_llmn, "affinity": _load_nova, "anti-affinity": _load_nova,
    "same-subtree": _load_same_subtree, "hop-limit": _load_hops, "bandwidth": _load_bandwidth,
    "reachability": _load_reachability,
    "license": _load_license, "root-traits": _load_root_traits,
}
