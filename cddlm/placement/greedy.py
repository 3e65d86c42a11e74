"""The fast greedy pass: one component at a time, each on the feasible provider of lowest marginal
cost (packing cost plus the soft violations it adds with the components already placed).

``State`` holds a partial placement and answers "may component c go on provider p now?" against
every hard policy, and "what soft cost would that add?". The greedy pass uses it with a
most-constrained-first order and a look-ahead for llmn's minimum spread; the benchmark's
Nova-style baseline uses it in request order as its filters. No look-ahead beyond that: the pass
can fail where a placement exists (the greedy traps), and CP-SAT then takes over.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from cddlm.placement.costs import SOFT_UNIT, weight_units
from cddlm.placement.eligibility import Instance, host_ok, monadic_policies

PAIR_TYPES = ("collocation", "anti-collocation", "affinity", "anti-affinity",
              "hop-limit", "bandwidth")


class State:
    def __init__(self, inst: Instance, lookahead: bool = True):
        self.inst = inst
        self.dc = inst.dc
        self.lookahead = lookahead
        self.where: dict[int, int] = {}
        self.free = {p: list(v) for p, v in inst.free.items()}
        self.partners: dict[int, list[tuple[object, int]]] = defaultdict(list)
        self.group_of: dict[int, list[object]] = defaultdict(list)
        for pol in inst.req.policies:
            if pol.type in PAIR_TYPES and not (pol.type == "affinity" and "target" in pol.params):
                for a, b in pol.pairs:
                    self.partners[a].append((pol, b))
                    self.partners[b].append((pol, a))
            elif pol.type in ("llmn", "same-subtree"):
                for c in pol.members:
                    self.group_of[c].append(pol)
        self.soft_monadic = {pol.index: pol for pol in monadic_policies(inst.req, hard=False)}
        self.counts: dict[tuple[int, str, int], int] = Counter()
        self.placed_in: dict[int, int] = Counter()  # llmn/same-subtree policy -> members placed
        net = self.dc.network
        self.bw_free = {n.index: n.bandwidth - inst.used_bandwidth.get(n.index, 0.0)
                        for n in (net.nodes if net is not None else []) if n.bandwidth is not None}
        self.spread: dict[int, int] = Counter()  # llmn policy -> l1 vertices in use

    # -- vertices -----------------------------------------------------------------------------
    def vertex(self, partition, provider: int) -> int:
        return self.dc.partition(*partition).of[provider]

    def host_name(self, provider: int) -> str:
        return self.dc.nodes[self.inst.host_of[provider]].name

    def path(self, pa: int, pb: int):
        return self.dc.network.path_edges(self.host_name(pa), self.host_name(pb))

    # -- hard checks ---------------------------------------------------------------------------
    def fits(self, c: int, p: int) -> bool:
        return all(a <= b for a, b in zip(self.inst.demand[c], self.free[p]))

    def allowed(self, c: int, p: int) -> bool:
        if not self.fits(c, p):
            return False
        bandwidth: Counter = Counter()
        for pol, other in self.partners[c]:
            if not pol.hard or other not in self.where:
                continue
            q = self.where[other]
            if pol.type in ("collocation", "affinity"):
                if self.vertex(pol.partition, p) != self.vertex(pol.partition, q):
                    return False
            elif pol.type in ("anti-collocation", "anti-affinity"):
                if self.vertex(pol.partition, p) == self.vertex(pol.partition, q):
                    return False
            elif pol.type == "hop-limit":
                edges = self.path(p, q)
                if edges is None or len(edges) > pol.params["hops"]:
                    return False
            else:  # bandwidth
                edges = self.path(p, q)
                if edges is None:
                    return False
                for e in edges:
                    bandwidth[e] += pol.params["mbps"]
        if any(self.bw_free.get(e, float("inf")) < need - 1e-9 for e, need in bandwidth.items()):
            return False
        for pol in self.group_of[c]:
            if pol.hard and not self._group_allowed(pol, c, p):
                return False
        return True

    def _group_allowed(self, pol, c: int, p: int) -> bool:
        if pol.type == "same-subtree":
            v = self.vertex(pol.partition, p)
            return all(self.vertex(pol.partition, self.where[o]) == v
                       for o in pol.members if o in self.where)
        u = self.vertex(("level", pol.params["l1"]), p)
        w = self.vertex(("level", pol.params["l2"]), p)
        if self.counts[(pol.index, "l1", u)] >= pol.params["per_l1"]:
            return False
        if self.counts[(pol.index, "l2", w)] >= 1:
            return False
        if self.lookahead:
            used = self.spread[pol.index]
            new = self.counts[(pol.index, "l1", u)] == 0
            left = len(pol.members) - self.placed_in[pol.index] - 1
            if used + new + left < pol.params["n"]:
                return False
        return True

    # -- soft cost -----------------------------------------------------------------------------
    def penalty(self, c: int, p: int) -> int:
        units = 0
        for pol, other in self.partners[c]:
            if pol.hard or other not in self.where:
                continue
            q = self.where[other]
            if pol.type in ("collocation", "affinity", "anti-collocation", "anti-affinity"):
                same = self.vertex(pol.partition, p) == self.vertex(pol.partition, q)
                bad = same != (pol.type in ("collocation", "affinity"))
            elif pol.type == "hop-limit":
                edges = self.path(p, q)
                bad = edges is None or len(edges) > pol.params["hops"]
            else:
                edges = self.path(p, q)
                bad = edges is None or any(self.bw_free.get(e, float("inf")) <
                                           pol.params["mbps"] - 1e-9 for e in edges)
            units += weight_units(pol.weight) if bad else 0
        for pol in self.group_of[c]:
            if not pol.hard and not self._group_allowed(pol, c, p):
                units += weight_units(pol.weight)
        for pol in self.soft_monadic.values():
            if c in pol.members and not host_ok(self.dc, pol, p):
                units += weight_units(pol.weight)
        return units * SOFT_UNIT

    # -- placing -------------------------------------------------------------------------------
    def place(self, c: int, p: int) -> None:
        self.where[c] = p
        self.free[p] = [b - a for a, b in zip(self.inst.demand[c], self.free[p])]
        for pol, other in self.partners[c]:
            if pol.type == "bandwidth" and other in self.where:
                edges = self.path(p, self.where[other]) or []
                if pol.hard or all(self.bw_free.get(e, float("inf")) >= pol.params["mbps"]
                                   for e in edges):
                    for e in edges:
                        if e in self.bw_free:
                            self.bw_free[e] -= pol.params["mbps"]
        for pol in self.group_of[c]:
            self.placed_in[pol.index] += 1
            if pol.type == "llmn":
                u = (pol.index, "l1", self.vertex(("level", pol.params["l1"]), p))
                self.spread[pol.index] += self.counts[u] == 0
                self.counts[u] += 1
                self.counts[(pol.index, "l2", self.vertex(("level", pol.params["l2"]), p))] += 1


def orders(inst: Instance) -> list[list[int]]:
    """Sequences to try, existing placements always first: most constrained (fewest providers,
    biggest demand), smallest demand first (more components fit where load already is), and
    request order."""
    biggest = [max([f[i] for f in inst.free.values()] + [1]) for i in range(len(inst.dims))]

    def share(c):
        return sum(d / biggest[i] for i, d in enumerate(inst.demand[c]))

    def pinned(c):
        return c not in inst.req.existing
    every = range(len(inst.req.components))
    return [sorted(every, key=lambda c: (pinned(c), len(inst.eligible[c]), -share(c), c)),
            sorted(every, key=lambda c: (pinned(c), share(c), c)),
            sorted(every, key=lambda c: (pinned(c), c))]


def solve(inst: Instance, sequence: list[int] | None = None, lookahead: bool = True
          ) -> dict[int, int] | None:
    """A placement {component: provider}, or None when the pass gets stuck."""
    state = State(inst, lookahead)
    for c in (sequence if sequence is not None else orders(inst)[0]):
        best = cheapest(state, c)
        if best is None:
            return None
        state.place(c, best)
    return state.where


def cheapest(state: State, c: int) -> int | None:
    """The provider of lowest marginal cost the hard policies allow for ``c`` now, or None."""
    best, best_score = None, None
    for p in state.inst.eligible[c]:  # cheapest first: stop once packing alone cannot win
        base = state.inst.cost[c][p]
        if best_score is not None and base >= best_score:
            break
        if not state.allowed(c, p):
            continue
        score = base + state.penalty(c, p)
        if best_score is None or score < best_score:
            best, best_score = p, score
    return best
