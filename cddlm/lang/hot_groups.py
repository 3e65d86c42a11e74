"""The ``groups`` section of a HOT template (Heat policy extension, Proposal A), and the
``policies`` and ``relationships`` of groups and resources, turned into model groups and
policies.

    groups:
      id: hadoop
      members:
        - id: datanodes
          members: [{get_resource: dn1}, {get_resource: dn2}]
          policies: [{type: OS::AntiCoLocation, properties: {level: host, hardConstraint: false}}]
        - {get_resource: namenode}
      relationships:
        - related: {get_resource: client}
          policies: [{type: hop-limit, properties: {hops: 2}}]

Expansion, exactly as the extension's "Groups, Policies, and Relationships" defines it:
a monadic policy on a group applies to every relevant resource it covers; a symmetric one to
every unordered pair of the group's *direct* members (a member group standing for all its
resources), so the members of one subgroup are not paired with each other; a relationship
(and a volume attachment's policies) to the pair it relates, ordered for asymmetric policies;
an asymmetric policy on a group is an error. A policy is relevant only to some kinds of
resource (``policies.relevant``): a license only to servers and processes, a volume policy
only to volumes; an attachment is no component and covers nothing.

``applications`` lists every primitive application; the model gets the same, compactly: a
group-level policy when the group's pairs are all its members' pairs, ``between`` per pair
of direct members otherwise, and a derived group (``NAME~compute``) holding only the relevant
members when a group covers irrelevant ones. Policies the solver does not place by are
expanded too and then: volume-exclusive is checked here (a covered volume has at most one
attachment), volume-not-moved holds by construction (placed components never move), and
endpoint-access is listed in ``refused``: resolving the template fails on it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from cddlm.lang import library, policies
from cddlm.lang.hot_yaml import error, line_of
from cddlm.lang.model import Group, Policy, walk_from

if TYPE_CHECKING:  # pragma: no cover
    from cddlm.lang.hot import Resource

ALIASES = {
    "OS::CoLocation": "collocation", "OS::Collocation": "collocation",
    "OS::AntiCoLocation": "anti-collocation", "OS::AntiCollocation": "anti-collocation",
    "OS::LLMN": "llmn", "OS::LLMNAntiCoLocation": "llmn",
    "OS::NetMaxHops": "hop-limit", "OS::NetBandwidth": "bandwidth",
    "OS::LicensedProduct": "license", "OS::NetReachability": "reachability",
    "OS::NetEndpointAccess": "endpoint-access",
    "OS::VolExclusive": "volume-exclusive", "OS::VolNotMoved": "volume-not-moved",
}
PARAM_ALIASES = {"L1": "l1", "L2": "l2", "N": "n"}
Member = tuple[str, str]   # ("group", id) or ("resource", name)


@dataclass
class _Group:
    id: str
    members: list[Member]
    raw: dict
    line: int | None


@dataclass
class _Spec:
    type: policies.PolicyType
    hard: bool
    weight: float
    params: dict[str, Any]
    name: str | None
    line: int | None
    where: str
    extra_groups: list[str] = field(default_factory=list)


class Grouping:
    def __init__(self, resources: dict[str, "Resource"], evaluate: Callable):
        self.resources = resources
        self.evaluate = evaluate
        self.tree: dict[str, _Group] = {}
        self.owner: dict[str, str] = {}
        self.groups: list[Group] = []
        self.derived: dict[str, Group] = {}
        self.policies: list[Policy] = []
        self.applications: list[policies.Application] = []
        self.refused: list[tuple[str, _Spec]] = []   # (what, spec) of policies no one enforces
        self.leaf_cache: dict[Member, list[tuple[str, str]]] = {}
        self.kinds = {r.path: r.kind for r in resources.values() if r.path}

    # -- reading -------------------------------------------------------------------------------
    def read(self, section: Any) -> None:
        roots = section if isinstance(section, list) else [] if section is None else [section]
        for root in roots:
            self.read_group(root, "groups")
        for r in self.resources.values():
            self.apply(("resource", r.name), r.raw, "resources/%s" % r.name, r.line,
                       lambda spec, r=r: self.on_resource(spec, r))
        for g in self.tree.values():
            self.apply(("group", g.id), g.raw, "groups/%s" % g.id, g.line,
                       lambda spec, g=g: self.on_group(spec, g))
        self.groups.extend(self.derived.values())

    def apply(self, member: Member, raw: dict, where: str, line: int | None,
              on_policy: Callable[["_Spec"], None]) -> None:
        """The policies and relationships of a resource or group."""
        for spec in self.specs(raw.get("policies"), where, line):
            on_policy(spec)
        for related, spec in self.relationships(raw.get("relationships"), where, line):
            self.relation(spec, member, related)

    def read_group(self, raw: Any, where: str) -> str:
        line = line_of(raw)
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or "members" not in raw:
            raise error("a group is a mapping with id and members", where, line, "invalid-group")
        gid = raw["id"]
        where = "groups/%s" % gid
        unknown = sorted(set(raw) - {"id", "members", "metadata", "policies", "relationships"})
        if unknown:
            raise error("unknown group key %s" % ", ".join(unknown), where, line, "invalid-group")
        if gid in self.tree or "~" in gid or gid in self.kinds or not gid:
            raise error("group id %r is used twice, names a component, or contains ~" % gid,
                        where, line, "duplicate-name")
        group = _Group(gid, [], raw, line)
        self.tree[gid] = group
        model = Group(gid, [], "line %s" % line)
        self.groups.append(model)
        if not isinstance(raw["members"], list):
            raise error("members is a list", where, line, "invalid-group")
        for member in raw["members"]:
            if isinstance(member, dict) and set(member) == {"get_resource"}:
                name = member["get_resource"]
                if not isinstance(name, str) or name not in self.resources:
                    raise error("unknown resource %r" % name, where, line_of(member) or line,
                                "invalid-group")
                if name in self.owner:
                    raise error("resource %s is in group %s already" % (name, self.owner[name]),
                                where, line, "invalid-group")
                self.owner[name] = gid
                group.members.append(("resource", name))
                if self.resources[name].path:
                    model.members.append(self.resources[name].path)
            elif isinstance(member, dict) and "id" in member:
                sub = self.read_group(member, where)
                group.members.append(("group", sub))
                model.members.append(sub)
            else:
                raise error("a member is a group or {get_resource: NAME}", where,
                            line_of(member) or line, "invalid-group")
        return gid

    def specs(self, raw: Any, where: str, line: int | None) -> list[_Spec]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise error("policies is a list", where, line, "invalid-policy")
        return [self.spec(p, "%s/policies[%d]" % (where, i), line) for i, p in enumerate(raw)]

    def spec(self, raw: Any, where: str, line: int | None) -> _Spec:
        line = line_of(raw) or line
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str) \
                or set(raw) - {"type", "properties", "metadata"}:
            raise error("a policy is {type, properties?, metadata?}", where, line, "invalid-policy")
        ptype = policies.lookup(ALIASES.get(raw["type"], raw["type"]), line=line, path=where)
        props = self.evaluate(raw.get("properties") or {}, where + "/properties", line)
        if not isinstance(props, dict):
            raise error("policy properties are a mapping", where, line, "invalid-policy")
        props = {PARAM_ALIASES.get(k, k): v for k, v in props.items()}
        hard = props.pop("hardConstraint", props.pop("hard", True))
        weight = props.pop("weight", 1.0)
        if not isinstance(hard, bool) or isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise error("hard is a boolean and weight a number", where, line, "invalid-policy")
        if "bytes_per_second" in props and ptype.name == "bandwidth":
            props["mbps"] = props.pop("bytes_per_second") * 8 / 1e6
        extra = props.pop("groups", []) if ptype.name == "same-subtree" else []
        for gid in extra:
            if gid not in self.tree:
                raise error("same-subtree names unknown group %r" % gid, where, line, "invalid-policy")
        params = policies.coerce_params(ptype, props, line=line, path=where)
        metadata = raw.get("metadata") or {}
        name = metadata.get("name") if isinstance(metadata, dict) else None
        return _Spec(ptype, hard, float(weight), params, name, line, where, list(extra))

    def relationships(self, raw: Any, where: str, line: int | None) -> list[tuple[Member, _Spec]]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise error("relationships is a list", where, line, "invalid-group")
        out = []
        for i, rel in enumerate(raw):
            here = "%s/relationships[%d]" % (where, i)
            rline = line_of(rel) or line
            if not isinstance(rel, dict) or set(rel) != {"related", "policies"}:
                raise error("a relationship is {related, policies}", here, rline, "invalid-group")
            related = rel["related"]
            kind, name = next(iter(related.items())) if isinstance(related, dict) \
                and len(related) == 1 else (None, None)
            if kind == "get_resource" and isinstance(name, str) and name in self.resources:
                member: Member = ("resource", name)
            elif kind == "get_group" and isinstance(name, str) and name in self.tree:
                member = ("group", name)
            else:
                raise error("related must be {get_resource: NAME} or {get_group: ID} of this "
                            "template (resources outside it are not supported)", here, rline,
                            "invalid-group")
            out.extend((member, spec) for spec in self.specs(rel["policies"], here, rline))
        return out

    # -- members -------------------------------------------------------------------------------
    def leaves(self, member: Member) -> list[tuple[str, str]]:
        """(component path, kind) of every placed component a member covers."""
        if member not in self.leaf_cache:
            kind, name = member
            if kind == "group":
                found = [leaf for m in self.tree[name].members for leaf in self.leaves(m)]
            else:
                comp = self.resources[name].component
                tree = walk_from(self.resources[name].path, comp) if comp is not None else ()
                found = [(path, self.kinds.get(path, policies.kind_of(c.type)))
                         for path, c in tree if library.TYPES[c.type].placed]
            self.leaf_cache[member] = found
        return self.leaf_cache[member]

    def relevant(self, member: Member, ptype: policies.PolicyType) -> list[str]:
        return [p for p, kind in self.leaves(member) if policies.relevant(ptype, kind)]

    def single(self, member: Member) -> bool:
        return member[0] == "resource" and len(self.leaves(member)) == 1 and \
            not self.resources[member[1]].component.children

    def ref(self, member: Member, ptype: policies.PolicyType, *, as_group: bool) -> str | None:
        """How the model names a member's relevant placed components: the group or component
        itself when it covers only relevant ones, a derived group otherwise; None when none."""
        relevant = self.relevant(member, ptype)
        if not relevant:
            return None
        kind, name = member
        exact = len(relevant) == len(self.leaves(member))
        if exact and kind == "group":
            return name
        if exact and not as_group:
            return self.resources[name].path
        derived = "%s~%s" % (name if kind == "group" else self.resources[name].path, ptype.relevant)
        self.derived.setdefault(derived, Group(derived, relevant, "derived"))
        return derived

    # -- applying ------------------------------------------------------------------------------
    def record(self, spec: _Spec, what: str, sides=(), group_wide=None,
               members: Callable[[], dict] = dict) -> None:
        """Add the applications; hand an enforced policy to the solver with ``members()``, the
        model's names for what it applies to."""
        applied = policies.applications(spec.type, spec.hard, spec.params, list(sides), group_wide)
        self.applications += applied
        if spec.type.enforced == "refused":
            self.refused.append((what, spec))
            return
        if spec.type.enforced == "template":
            self.check_exclusive(spec, [a.members[0] for a in applied])
            return
        if spec.type.enforced == "construction":
            return
        members = members()
        if any(v is None or (isinstance(v, list) and None in v) for v in members.values()):
            return   # nothing relevant on one side
        self.policies.append(Policy(spec.type.name, spec.hard, spec.weight,
                                    {**spec.params, **members}, spec.name, "line %s" % spec.line))

    def check_exclusive(self, spec: _Spec, volumes: list[str]) -> None:
        """volume-exclusive: each volume it covers is attached to one server at most. The
        template alone decides it, so soft or hard, a template that breaks it is refused."""
        by_path = {r.path: r.name for r in self.resources.values() if r.path}
        for path in volumes:
            servers = [r.attached[0] for r in self.resources.values()
                       if r.attached is not None and r.attached[1] == by_path.get(path)]
            if len(servers) > 1:
                raise error("volume-exclusive: volume %s is attached to %d servers (%s)"
                            % (by_path[path], len(servers), ", ".join(sorted(servers))),
                            spec.where, spec.line, "policy-violated")

    def check_refused(self) -> None:
        """Resolving (not merely expanding) a template that uses a policy no one enforces fails."""
        if self.refused:
            what, spec = self.refused[0]
            raise error("policy %s on %s is %s" % (spec.type.name, what,
                                                   policies.UNSUPPORTED["refused"]),
                        spec.where, spec.line, "unsupported-policy")

    def on_group(self, spec: _Spec, group: _Group) -> None:
        ptype, member = spec.type, ("group", group.id)
        if ptype.shape == "asymmetric":
            raise error("the asymmetric policy %s cannot apply to a group: use a relationship"
                        % ptype.name, spec.where, spec.line, "invalid-policy")
        if ptype.name == "same-subtree":
            union = [p for m in [member] + [("group", g) for g in spec.extra_groups]
                     for p in self.relevant(m, ptype)]
            def refs():
                return [self.ref(m, ptype, as_group=True)
                        for m in [member] + [("group", g) for g in spec.extra_groups]]
            self.record(spec, group.id, group_wide=list(dict.fromkeys(union)),
                        members=lambda: {"groups": [r for r in refs() if r]})
        elif ptype.shape in ("monadic", "group") or all(self.single(m) for m in group.members):
            self.record(spec, group.id, group_wide=self.relevant(member, ptype),
                        members=lambda: {"group": self.ref(member, ptype, as_group=True)})
        else:
            for a, b in itertools.combinations(group.members, 2):
                self.relation(spec, a, b, what=group.id)

    def on_resource(self, spec: _Spec, r: "Resource") -> None:
        ptype = spec.type
        if ptype.shape == "monadic":
            member = ("resource", r.name)
            self.record(spec, r.name, group_wide=self.relevant(member, ptype),
                        members=lambda: {"group": self.ref(member, ptype, as_group=True)})
        elif ptype.shape == "group":
            raise error("%s applies to a group, not to resource %s" % (ptype.name, r.name),
                        spec.where, spec.line, "invalid-policy")
        elif r.attached is not None:   # a volume attachment relates its server and volume
            self.relation(spec, ("resource", r.attached[0]), ("resource", r.attached[1]))
        else:
            raise error("the pairwise policy %s needs two things: use a relationship" % ptype.name,
                        spec.where, spec.line, "invalid-policy")

    def relation(self, spec: _Spec, a: Member, b: Member, what: str | None = None) -> None:
        """A pairwise policy on the ordered pair (a, b): a relationship, a volume attachment,
        or two direct members of a group."""
        if spec.type.shape not in ("symmetric", "asymmetric"):
            raise error("%s is not a pairwise policy; it cannot apply to a relationship"
                        % spec.type.name, spec.where, spec.line, "invalid-policy")
        self.record(spec, what or "%s -> %s" % (a[1], b[1]),
                    [[self.relevant(a, spec.type), self.relevant(b, spec.type)]],
                    members=lambda: {"between": [self.ref(a, spec.type, as_group=False),
                                                 self.ref(b, spec.type, as_group=False)]})
