"""The independent verifier: re-checks an answer from the models alone, sharing no code with the
greedy pass or the CP-SAT model. It checks that every component sits on one provider, existing
placements, capacities (with what other applications use), the provider's required and forbidden
traits, every hard policy, and counts the violations of every soft policy; it computes the
objective by the definition in ``costs.py``.

How violations are counted (the same numbers the solver minimises):
collocation / anti-collocation / affinity / anti-affinity: member pairs apart / together;
affinity with an identifier: members outside the target; llmn: missing l1 vertices + members
over ceil(M/n) per l1 vertex + members beyond one per l2 vertex; same-subtree: members outside
the best vertex; hop-limit: pairs too far apart; bandwidth: pairs with an edge on their path whose
load exceeds its capacity (soft pairs' load counts; hard pairs must fit on their own); license
and root-traits: members on a host without (with) the traits.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from cddlm.placement.costs import SOFT_UNIT, packing, weight_units
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.policies import Policy
from cddlm.placement.request import Request

EPSILON = 1e-9


@dataclass
class Evaluation:
    policy: Policy
    violations: int  # 0 = met
    bad: list[int] = field(default_factory=list)  # components involved in violations


@dataclass
class Report:
    errors: list[str]  # hard problems: a non-empty list means the answer must not be used
    evaluations: list[Evaluation]
    objective: int

    @property
    def ok(self) -> bool:
        return not self.errors

    def soft_violations(self) -> list[Evaluation]:
        return [e for e in self.evaluations if not e.policy.hard and e.violations]


def verify(dc: Datacenter, req: Request, placement: dict[int, int],
           used: dict[int, dict[str, float]] | None = None,
           used_bandwidth: dict[int, float] | None = None) -> Report:
    """Check ``placement`` {component index: provider node index}."""
    used = used or {}
    errors: list[str] = []
    names = [c.name for c in req.components]
    for c in req.components:
        p = placement.get(c.index)
        if p is None:
            errors.append("component %s is not placed" % c.name)
        elif p not in dc.providers:
            errors.append("component %s is on %s, which is not a provider"
                          % (c.name, dc.nodes[p].name))
    if errors:
        return Report(errors, [], 0)
    for c, node in req.existing.items():
        p = placement[c]
        if p != node and dc.nodes[p].host != node:
            errors.append("existing component %s moved from %s to %s"
                          % (names[c], dc.nodes[node].name, dc.nodes[p].name))
    load: dict[int, Counter] = defaultdict(Counter)
    for c in req.components:
        load[placement[c.index]].update(c.demand)
        traits = dc.nodes[placement[c.index]].traits
        if not c.traits <= traits or c.forbidden & traits:
            errors.append("component %s: provider %s lacks required or has forbidden traits"
                          % (c.name, dc.nodes[placement[c.index]].name))
    for p, amounts in load.items():
        for dim, amount in amounts.items():
            total = amount + used.get(p, {}).get(dim, 0.0)
            cap = dc.nodes[p].capacity.get(dim, 0.0)
            if total > cap + EPSILON * max(1.0, cap):
                errors.append("provider %s: %s %g exceeds capacity %g"
                              % (dc.nodes[p].name, dim, total, cap))
    loads = _bandwidth_loads(dc, req, placement, used_bandwidth or {})
    evaluations = [evaluate(dc, pol, placement, loads) for pol in req.policies]
    objective = 0
    for e in evaluations:
        if e.policy.hard and e.violations:
            errors.append("%s is violated (%s)" % (e.policy.label,
                                                  ", ".join(names[c] for c in e.bad)))
        elif not e.policy.hard:
            objective += e.violations * weight_units(e.policy.weight) * SOFT_UNIT
    objective += sum(packing(dc, used, c.demand, placement[c.index]) for c in req.components)
    return Report(errors, evaluations, objective)


def evaluate(dc: Datacenter, pol: Policy, placement: dict[int, int],
             loads: BandwidthLoads) -> Evaluation:
    host = {c: dc.host_name(placement[c]) for c in pol.members}
    if pol.type in ("collocation", "anti-collocation", "affinity", "anti-affinity") \
            and "target" not in pol.params:
        where = {c: dc.vertex_name(pol.partition, placement[c]) for c in pol.members}
        together = pol.type in ("collocation", "affinity")
        bad = [(a, b) for a, b in pol.pairs if (where[a] == where[b]) != together]
        return Evaluation(pol, len(bad), sorted({c for pair in bad for c in pair}))
    if pol.type == "affinity":
        bad = [c for c in pol.members
               if dc.vertex_name(pol.partition, placement[c]) != pol.params["target"]]
        return Evaluation(pol, len(bad), bad)
    if pol.type == "llmn":
        return _llmn(dc, pol, placement)
    if pol.type == "same-subtree":
        where = {c: dc.vertex_name(pol.partition, placement[c]) for c in pol.members}
        best, _ = Counter(where.values()).most_common(1)[0]
        bad = [c for c in pol.members if where[c] != best]
        return Evaluation(pol, len(bad), bad)
    if pol.type == "hop-limit":
        bad = []
        for a, b in pol.pairs:
            hops = dc.network.hops(host[a], host[b])
            if hops is None or hops > pol.params["hops"]:
                bad.append((a, b))
        return Evaluation(pol, len(bad), sorted({c for pair in bad for c in pair}))
    if pol.type == "bandwidth":
        return _bandwidth(dc, pol, loads)
    # license, root-traits: traits of the host above each member's provider
    bad = [c for c in pol.members
           if not pol.params["required"] <= dc.node(host[c]).traits
           or pol.params["forbidden"] & dc.node(host[c]).traits]
    return Evaluation(pol, len(bad), bad)


def _llmn(dc: Datacenter, pol: Policy, placement: dict[int, int]) -> Evaluation:
    l1 = {c: dc.vertex_name(("level", pol.params["l1"]), placement[c]) for c in pol.members}
    l2 = {c: dc.vertex_name(("level", pol.params["l2"]), placement[c]) for c in pol.members}
    per_l1, per_l2 = Counter(l1.values()), Counter(l2.values())
    violations = max(0, pol.params["n"] - len(per_l1))
    violations += sum(max(0, k - pol.params["per_l1"]) for k in per_l1.values())
    violations += sum(max(0, k - 1) for k in per_l2.values())
    bad = [c for c in pol.members if per_l1[l1[c]] > pol.params["per_l1"] or per_l2[l2[c]] > 1]
    if len(per_l1) < pol.params["n"]:
        bad = list(pol.members)
    return Evaluation(pol, violations, sorted(bad))


@dataclass
class BandwidthLoads:
    """What every bandwidth policy of the request reserves, computed once per ``verify``."""

    paths: dict[tuple[int, int], list[int] | None]  # pair -> network edges; None = no path
    hard: Counter  # network edge -> Mbit/s of the hard pairs (and other applications)
    total: Counter  # network edge -> Mbit/s of every pair (and other applications)


def _bandwidth_loads(dc: Datacenter, req: Request, placement: dict[int, int],
                     used_bandwidth: dict[int, float]) -> BandwidthLoads:
    loads = BandwidthLoads({}, Counter(used_bandwidth), Counter(used_bandwidth))
    for pol in req.policies:
        if pol.type != "bandwidth":
            continue
        for a, b in pol.pairs:
            edges = dc.network.path_edges(dc.host_name(placement[a]), dc.host_name(placement[b]))
            loads.paths[(a, b)] = edges
            for e in edges or []:
                loads.total[e] += pol.params["mbps"]
                if pol.hard:
                    loads.hard[e] += pol.params["mbps"]
    return loads


def _bandwidth(dc: Datacenter, pol: Policy, loads: BandwidthLoads) -> Evaluation:
    """Loads of every bandwidth policy of the request are summed per edge; hard pairs must fit
    with the hard load alone, a soft pair is violated where the total load does not fit (a pair
    with no path is violated)."""
    net = dc.network
    load = loads.hard if pol.hard else loads.total
    bad = []
    for a, b in pol.pairs:
        edges = loads.paths[(a, b)]
        if edges is None or any(net.nodes[e].bandwidth is not None and
                                load[e] > net.nodes[e].bandwidth + EPSILON for e in edges):
            bad.append((a, b))
    return Evaluation(pol, len(bad), sorted({c for pair in bad for c in pair}))
