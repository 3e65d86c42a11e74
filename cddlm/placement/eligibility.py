"""Which providers each component may use, before any search: the static filters of the solver
side (greedy pass and CP-SAT model), in the spirit of Nova's filters and Placement's queries.

1. Base: the provider alone has room for the demand (capacity minus what other applications
   use), has the component's required traits and none of its forbidden ones; an existing
   placement pins the component to its host (or provider).
2. Hard monadic policies: license and root-traits (host traits), affinity with an identifier
   (the target aggregate). Which policy emptied a component's set is recorded for ``conflicts``.
3. Arc consistency on hard relations: members that must share a vertex (collocation, affinity,
   same-subtree) keep only vertices all of them can use; a hop-limit member keeps only hosts
   with a partner host in reach. Repeated to a fixpoint.

All amounts are turned into integers per dimension (scaled by a power of ten; demands rounded
up, capacities down), as CP-SAT needs. Work is shared by components with equal demand and traits,
so a thousand components of a dozen flavours cost a dozen scans of the providers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cddlm.placement.costs import free_capacity, packing
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.request import Request

RELATION_TYPES = ("collocation", "affinity", "same-subtree")


@dataclass
class Instance:
    dc: Datacenter
    req: Request
    used: dict[int, dict[str, float]]
    dims: list[str]
    demand: list[list[int]]  # component -> scaled demand per dimension
    free: dict[int, list[int]]  # provider -> scaled free capacity per dimension
    cost: list[dict[int, int]]  # component -> {eligible provider: packing cost}
    eligible: list[list[int]]  # component -> providers, cheapest first
    used_bandwidth: dict[int, float] = field(default_factory=dict)  # network node -> Mbit/s
    emptied_by: dict[int, list[int]] = field(default_factory=dict)  # component -> policy indices
    host_of: dict[int, int] = field(default_factory=dict)  # provider -> host node
    base_eligible: list[list[int]] = field(default_factory=list)  # step 1 only: no policies

    def hard(self, kinds: tuple[str, ...] | None = None):
        return [p for p in self.req.policies if p.hard and (kinds is None or p.type in kinds)]


def _scale(values: list[float]) -> int:
    for k in range(0, 5):
        f = 10 ** k
        if all(abs(v * f - round(v * f)) < 1e-7 for v in values):
            return f
    return 10 ** 4


def build(dc: Datacenter, req: Request, used: dict[int, dict[str, float]],
          used_bandwidth: dict[int, float] | None = None, *, monadic: bool = True,
          arcs: bool = True) -> Instance:
    dims = [d for d in dc.resources
            if any(c.demand.get(d, 0) > 0 for c in req.components)]
    scale = {}
    for d in dims:
        vals = [c.demand.get(d, 0.0) for c in req.components]
        vals += [free_capacity(dc, used, p, d) for p in dc.providers]
        scale[d] = _scale(vals)
    demand = [[math.ceil(c.demand.get(d, 0.0) * scale[d] - 1e-7) for d in dims]
              for c in req.components]
    free = {p: [math.floor(free_capacity(dc, used, p, d) * scale[d] + 1e-7) for d in dims]
            for p in dc.providers}
    host_of = {p: dc.nodes[p].host for p in dc.providers}
    by_signature: dict[tuple, tuple[list[int], dict[int, int]]] = {}
    eligible, cost = [], []
    for c in req.components:
        sig = (tuple(demand[c.index]), c.traits, c.forbidden,
               tuple(sorted(c.demand.items())))
        if sig not in by_signature:
            fits = [p for p in dc.providers
                    if all(a <= b for a, b in zip(demand[c.index], free[p]))
                    and c.traits <= dc.nodes[p].traits and not c.forbidden & dc.nodes[p].traits]
            costs = {p: packing(dc, used, c.demand, p) for p in fits}
            fits.sort(key=lambda p: (costs[p], p))
            by_signature[sig] = (fits, costs)
        fits, costs = by_signature[sig]
        if c.index in req.existing:
            pin = req.existing[c.index]
            fits = [p for p in fits if p == pin or host_of[p] == pin]
        eligible.append(fits)
        cost.append(costs)
    inst = Instance(dc, req, used, dims, demand, free, cost, eligible,
                    used_bandwidth=dict(used_bandwidth or {}), host_of=host_of,
                    base_eligible=list(eligible))
    if monadic:
        _apply_monadic(inst)
    if arcs:
        _arc_consistency(inst)
    return inst


def host_ok(dc: Datacenter, policy, provider: int) -> bool:
    """Does the provider satisfy a monadic policy (license, root-traits, affinity target)?"""
    if policy.type in ("license", "root-traits"):
        traits = dc.nodes[dc.nodes[provider].host].traits
        return policy.params["required"] <= traits and not policy.params["forbidden"] & traits
    return dc.vertex_name(policy.partition, provider) == policy.params["target"]


def monadic_policies(req: Request, hard: bool = True):
    return [p for p in req.policies if p.hard == hard and (
        p.type in ("license", "root-traits") or (p.type == "affinity" and "target" in p.params))]


def _apply_monadic(inst: Instance) -> None:
    cache: dict[tuple[int, int], bool] = {}

    def ok(pol, p):
        if (pol.index, p) not in cache:
            cache[(pol.index, p)] = host_ok(inst.dc, pol, p)
        return cache[(pol.index, p)]

    base = inst.base_eligible
    touching: dict[int, list] = {}
    for pol in monadic_policies(inst.req):
        for c in pol.members:
            after = [p for p in inst.eligible[c] if ok(pol, p)]
            if len(after) != len(inst.eligible[c]):
                touching.setdefault(c, []).append(pol)
            inst.eligible[c] = after
    for c, pols in touching.items():
        if inst.eligible[c] or not base[c]:
            continue
        needed = list(pols)  # deletion filtering: keep only policies the emptiness needs
        for pol in list(needed):
            rest = [q for q in needed if q is not pol]
            if not any(all(ok(q, p) for q in rest) for p in base[c]):
                needed = rest
        inst.emptied_by[c] = sorted(q.index for q in needed)


def relation_sets(inst: Instance) -> list[tuple[object, list[int]]]:
    """Hard relations as (policy, members that must share one vertex): the connected parts of
    each collocation/affinity pair graph (sharing a vertex is transitive), and same-subtree."""
    out = []
    for pol in inst.hard(RELATION_TYPES):
        if pol.type == "affinity" and "target" in pol.params:
            continue
        if pol.type == "same-subtree":
            out.append((pol, list(pol.members)))
            continue
        parent = {c: c for c in pol.members}

        def find(c):
            while parent[c] != c:
                parent[c] = parent[parent[c]]
                c = parent[c]
            return c
        for a, b in pol.pairs:
            parent[find(a)] = find(b)
        comps: dict[int, list[int]] = {}
        for c in pol.members:
            comps.setdefault(find(c), []).append(c)
        out.extend((pol, sorted(m)) for m in comps.values() if len(m) > 1)
    return out


def _arc_consistency(inst: Instance) -> None:
    dc = inst.dc
    relations = relation_sets(inst)
    hops = [(pol, a, b) for pol in inst.hard(("hop-limit",)) for a, b in pol.pairs]
    reach: dict[tuple[int, int], set[str]] = {}
    for _ in range(20):
        changed = False
        for pol, members in relations:
            part = dc.partition(*pol.partition)
            common = None
            for c in members:
                vs = {part.of[p] for p in inst.eligible[c]}
                common = vs if common is None else common & vs
            for c in members:
                keep = [p for p in inst.eligible[c] if part.of[p] in common]
                if len(keep) != len(inst.eligible[c]):
                    inst.eligible[c], changed = keep, True
        for pol, a, b in hops:
            for x, y in ((a, b), (b, a)):
                y_hosts = {dc.nodes[inst.host_of[p]].name for p in inst.eligible[y]}
                keep = []
                for p in inst.eligible[x]:
                    h = inst.host_of[p]
                    key = (h, pol.params["hops"])
                    if key not in reach:
                        reach[key] = dc.network.within(dc.nodes[h].name, pol.params["hops"])
                    if reach[key] & y_hosts:
                        keep.append(p)
                if len(keep) != len(inst.eligible[x]):
                    inst.eligible[x], changed = keep, True
        if not changed:
            break
