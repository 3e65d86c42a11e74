"""Allocation candidates over nested resource provider trees, with OpenStack Placement's semantics
(GET /allocation_candidates, up to microversion 1.39): where could one consumer's request groups
be satisfied?

Providers form trees (a compute host and its NUMA nodes, devices, NICs); a provider with the trait
MISC_SHARES_VIA_AGGREGATE is a *sharing provider*: it may give resources to any tree one of whose
providers shares an aggregate with it. Its "anchors" are the roots of those trees (itself too).

Request groups:
* the unsuffixed group may take each resource class from a different provider of one tree or
  from a sharing provider anchored to it; its required traits must be found among the providers
  it uses, none of which may have a forbidden trait; ``member_of`` holds for a provider when the
  provider or its root is in the aggregate ("an aggregate on the root spans the tree"), and a
  forbidden aggregate excludes a provider when the provider or its root is in it;
* a suffixed (granular) group is satisfied by exactly one provider, which itself has the traits
  and aggregates; a suffixed group may be resourceless (it then only names a provider);
* request-wide: ``group_policy=isolate`` puts the suffixed groups on pairwise distinct providers
  (the unsuffixed group is exempt); each ``same_subtree`` set needs one of its chosen providers to
  be an ancestor-or-self of all the others; ``root_required`` filters the anchor root's traits.

Per group the candidates are found independently, bucketed by anchor root, and combined one per
group (a depth-first product that drops a prefix as soon as it breaks capacity or isolation, the
pruning Placement added for wide trees); amounts on one provider are summed and checked against
capacity and max_unit. Equal results (same resources and mappings) count once.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from cddlm.errors import BadArgument

SHARING = "MISC_SHARES_VIA_AGGREGATE"
INVENTORY_DEFAULTS = {"reserved": 0, "min_unit": 1, "step_size": 1, "allocation_ratio": 1.0}


@dataclass
class Inventory:
    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = 0
    step_size: int = 1
    allocation_ratio: float = 1.0

    @property
    def capacity(self) -> int:
        return int((self.total - self.reserved) * self.allocation_ratio)


@dataclass
class Provider:
    name: str
    parent: str | None
    traits: frozenset[str]
    aggregates: frozenset[str]
    inventory: dict[str, Inventory]
    used: dict[str, int]
    root: str = ""


@dataclass
class Providers:
    by_name: dict[str, Provider]

    def ancestors(self, name: str) -> set[str]:
        out = set()
        n: str | None = name
        while n is not None:
            out.add(n)
            n = self.by_name[n].parent
        return out

    def known_trait(self, trait: str) -> bool:
        """Standard traits always exist; a CUSTOM_ trait exists once some provider has it."""
        return not trait.startswith("CUSTOM_") or any(trait in p.traits
                                                      for p in self.by_name.values())


def load_providers(raw: list[dict]) -> Providers:
    """Providers from plain data: name, parent, traits, aggregates, inventory, used."""
    by_name: dict[str, Provider] = {}
    for item in raw:
        name = item.get("name")
        if not isinstance(name, str) or name in by_name:
            raise BadArgument("providers: missing or duplicate provider name %r" % (name,))
        inventory = {}
        for rc, spec in (item.get("inventory") or {}).items():
            fields = dict(INVENTORY_DEFAULTS, **spec)
            fields.setdefault("max_unit", fields["total"])
            inventory[rc] = Inventory(**fields)
        by_name[name] = Provider(name, item.get("parent"), frozenset(item.get("traits") or ()),
                                 frozenset(item.get("aggregates") or ()), inventory,
                                 dict(item.get("used") or {}))
    for p in by_name.values():
        if p.parent is not None and p.parent not in by_name:
            raise BadArgument("providers: %s has unknown parent %s" % (p.name, p.parent))
        root = p.name
        while by_name[root].parent is not None:
            root = by_name[root].parent
        p.root = root
    return Providers(by_name)


@dataclass
class Group:
    resources: dict[str, int] = field(default_factory=dict)
    required: list[frozenset[str]] = field(default_factory=list)  # each: any one of these
    forbidden: set[str] = field(default_factory=set)
    member_of: list[frozenset[str]] = field(default_factory=list)  # each: any one of these
    forbidden_aggs: set[str] = field(default_factory=set)


@dataclass
class CandidateRequest:
    groups: dict[str, Group]  # "" is the unsuffixed group
    group_policy: str | None = None
    same_subtrees: list[list[str]] = field(default_factory=list)
    root_required: set[str] = field(default_factory=set)
    root_forbidden: set[str] = field(default_factory=set)
    nested_aware: bool = True


@dataclass(frozen=True)
class Candidate:
    """One allocation request: {(provider, class): amount} and suffix -> providers."""
    allocations: frozenset[tuple[str, str, int]]
    mappings: frozenset[tuple[str, frozenset[str]]]

    def providers(self) -> set[str]:
        return {p for p, _, _ in self.allocations}


@dataclass
class _Part:  # one group's candidate, before merging
    anchor: str
    allocations: tuple[tuple[str, str, int], ...]
    chosen: frozenset[str]


def allocation_candidates(providers: Providers, request: CandidateRequest) -> list[Candidate]:
    search = _Search(providers, request)
    per_group: dict[str, list[_Part]] = {}
    for suffix, group in request.groups.items():
        parts = search.group_candidates(suffix, group)
        if not parts:
            return []
        per_group[suffix] = parts
    return search.merge(per_group)


class _Search:
    def __init__(self, providers: Providers, request: CandidateRequest):
        self.p, self.req = providers, request
        self.sharing = {n for n, p in providers.by_name.items() if SHARING in p.traits}
        self.has_trees = any(p.parent is not None for p in providers.by_name.values())
        self.anchor_roots = None
        if request.root_required or request.root_forbidden:
            self.anchor_roots = {n for n, p in providers.by_name.items() if p.parent is None
                                 and request.root_required <= p.traits
                                 and not request.root_forbidden & p.traits}
        self._anchors: dict[str, set[str]] = {}

    def anchors(self, sharing: str) -> set[str]:
        if sharing not in self._anchors:
            aggs = self.p.by_name[sharing].aggregates
            self._anchors[sharing] = {q.root for q in self.p.by_name.values()
                                      if q.aggregates & aggs}
        return self._anchors[sharing]

    def in_anchors(self, root: str) -> bool:
        return self.anchor_roots is None or root in self.anchor_roots

    def usable(self, name: str, rc: str, amount: int) -> bool:
        inv = self.p.by_name[name].inventory.get(rc)
        return (inv is not None and self.p.by_name[name].used.get(rc, 0) + amount <= inv.capacity
                and inv.min_unit <= amount <= inv.max_unit and amount % inv.step_size == 0)

    def in_aggs(self, name: str, member_of) -> bool:
        return all(self.p.by_name[name].aggregates & any_of for any_of in member_of)

    # -- one group -----------------------------------------------------------------------------
    def group_candidates(self, suffix: str, g: Group) -> list[_Part]:
        if suffix == "" and (self.sharing or self.has_trees):
            return self._spread(g)
        out = []
        for name, prov in self.p.by_name.items():
            if not all(self.usable(name, rc, amt) for rc, amt in g.resources.items()):
                continue
            if not all(prov.traits & any_of for any_of in g.required) or prov.traits & g.forbidden:
                continue
            if not self.in_aggs(name, g.member_of) or prov.aggregates & g.forbidden_aggs:
                continue
            allocs = tuple(sorted((name, rc, amt) for rc, amt in g.resources.items()))
            anchors = {prov.root} | (self.anchors(name) if name in self.sharing else set())
            out.extend(_Part(a, allocs, frozenset([name])) for a in sorted(anchors)
                       if self.in_anchors(a))
        return out

    def _spread(self, g: Group) -> list[_Part]:
        """The unsuffixed group over trees and sharing providers (get_trees_matching_all)."""
        in_aggs = {n for n in self.p.by_name if g.member_of and self.in_aggs(n, g.member_of)}
        bad_aggs = {n for n, p in self.p.by_name.items() if p.aggregates & g.forbidden_aggs}
        trees: dict[str, dict[str, set[str]]] | None = None
        for rc, amt in g.resources.items():
            entries = {(n, p.root) for n, p in self.p.by_name.items() if self.usable(n, rc, amt)}
            shared = {n for n, _ in entries if n in self.sharing}
            if g.member_of:
                shared &= in_aggs
            entries |= {(s, a) for s in shared for a in self.anchors(s)}
            entries = {(n, r) for n, r in entries if self.in_anchors(r)}
            if g.member_of:
                entries = {(n, r) for n, r in entries if n in in_aggs or r in in_aggs}
            if g.forbidden_aggs:
                entries = {(n, r) for n, r in entries if n not in bad_aggs and r not in bad_aggs}
            by_root: dict[str, set[str]] = defaultdict(set)
            for n, r in entries:
                by_root[r].add(n)
            if trees is None:
                trees = {r: {rc: ns} for r, ns in by_root.items()}
            else:
                trees = {r: dict(t, **{rc: by_root[r]}) for r, t in trees.items() if r in by_root}
            if not trees:
                return []
        out = []
        rcs = sorted(g.resources)
        for root in sorted(trees or {}):
            self._products(root, rcs, 0, trees[root], [], g, out)
        return out

    def _products(self, root, rcs, i, choices, chosen, g: Group, out: list[_Part]) -> None:
        if i == len(rcs):
            names = {n for n, _ in chosen}
            traits = set().union(*(self.p.by_name[n].traits for n in names))
            if traits & g.forbidden or not all(traits & any_of for any_of in g.required):
                return
            allocs = tuple(sorted((n, rc, g.resources[rc]) for n, rc in chosen))
            out.append(_Part(root, allocs, frozenset(names)))
            return
        for n in sorted(choices[rcs[i]]):
            if self.p.by_name[n].traits & g.forbidden:
                continue
            self._products(root, rcs, i + 1, choices, chosen + [(n, rcs[i])], g, out)

    # -- merging -------------------------------------------------------------------------------
    def merge(self, per_group: dict[str, list[_Part]]) -> list[Candidate]:
        suffixes = sorted(per_group)
        by_anchor: dict[str, dict[str, list[_Part]]] = defaultdict(lambda: defaultdict(list))
        for s in suffixes:
            for part in per_group[s]:
                by_anchor[part.anchor][s].append(part)
        seen: set[Candidate] = set()
        out: list[Candidate] = []
        for anchor in sorted(by_anchor):
            lists = by_anchor[anchor]
            if set(lists) == set(suffixes):
                self._combine(suffixes, lists, 0, [], defaultdict(int), seen, out)
        if not self.req.nested_aware and self.has_trees:
            out = [c for c in out
                   if len({self.p.by_name[n].root for n in c.providers()}) == len(c.providers())]
        return out

    def _combine(self, suffixes, lists, i, picked, amounts, seen, out) -> None:
        if i == len(suffixes):
            if not self._same_subtree(dict(zip(suffixes, picked))):
                return
            mappings = defaultdict(set)
            for s, part in zip(suffixes, picked):
                mappings[s] |= part.chosen
            cand = Candidate(frozenset((p, rc, a) for (p, rc), a in amounts.items()),
                             frozenset((s, frozenset(ps)) for s, ps in mappings.items()))
            if cand not in seen:
                seen.add(cand)
                out.append(cand)
            return
        for part in lists[suffixes[i]]:
            if suffixes[i] and self.req.group_policy == "isolate" and any(
                    s and part.chosen == q.chosen for s, q in zip(suffixes, picked)):
                continue
            added = []
            ok = True
            for p, rc, a in part.allocations:
                amounts[(p, rc)] += a
                added.append((p, rc, a))
                inv = self.p.by_name[p].inventory[rc]
                total = amounts[(p, rc)]
                if self.p.by_name[p].used.get(rc, 0) + total > inv.capacity or total > inv.max_unit:
                    ok = False
            if ok:
                self._combine(suffixes, lists, i + 1, picked + [part], amounts, seen, out)
            for p, rc, a in added:
                amounts[(p, rc)] -= a
                if not amounts[(p, rc)]:
                    del amounts[(p, rc)]

    def _same_subtree(self, picked: dict[str, _Part]) -> bool:
        for suffixes in self.req.same_subtrees:
            chosen = set().union(*(picked[s].chosen for s in suffixes if s in picked))
            if len(chosen) <= 1:
                continue
            common = set.intersection(*(self.p.ancestors(n) for n in chosen))
            if not common & chosen:
                return False
        return True
