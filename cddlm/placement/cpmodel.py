"""The CP-SAT model of a placement problem over given candidate providers per component.

Variables: one boolean x[c, p] per component and candidate provider (exactly one true per
component). Sums of x over the candidates of c that lie in one vertex of a partition (a level,
a scope, a host, a network subtree) stand for "c is in that vertex"; they get a boolean of their
own when more than one candidate is involved.

Constraints (each hard policy's may be made conditional on an assumption literal, which is how
``conflicts`` finds a small set of policies that cannot hold together):

* capacity: per provider and dimension, only where the candidates could overflow it;
* anti-collocation / anti-affinity: at most one member (or one part of a pair structure) per
  vertex; collocation / affinity / same-subtree: one chosen vertex per connected set of members;
* llmn: <= ceil(M/n) per l1 vertex, <= 1 per l2 vertex, >= n l1 vertices used;
* hop-limit: c on host h implies its partner on a host within the limit (linear, no product);
* bandwidth: per network edge that could overflow (lazy), the load of the pairs whose path uses
  it, with "uses" = exactly one end below the edge;
* license / root-traits / affinity targets: candidates outside are forbidden.

Soft policies add violation counters to the objective (weight units x SOFT_UNIT each), with the
same counting as the verifier: pairs apart / together, members outside a target, llmn excess,
members outside the chosen vertex, pairs too far, bandwidth pairs on an overloaded edge.
"""

from __future__ import annotations

from collections import defaultdict

from ortools.sat.python import cp_model

from cddlm.placement.costs import SOFT_UNIT, weight_units
from cddlm.placement.eligibility import Instance, host_ok, relation_sets

MBPS_SCALE = 1000


def new_solver(seed: int, workers: int = 1) -> cp_model.CpSolver:
    """A CP-SAT solver: placement makes every one here. By default CP-SAT catches SIGINT while
    it solves and then sets it to the default action, not back to the handler it found
    (OR-Tools 9.15): a portal that had placed with it died at the next Ctrl-C at once, without
    stopping cleanly or saying what keeps running. Placement leaves the signals to its caller."""
    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    return solver


class Model:
    def __init__(self, inst: Instance, candidates: list[list[int]],
                 assumptions: set[int] | None = None, packing: bool = True):
        """``assumptions``: indices of hard policies to make conditional on literals (then
        ``self.literal[index]``); None = every hard policy unconditional."""
        self.inst, self.dc = inst, inst.dc
        self.cand = candidates
        self.m = cp_model.CpModel()
        self.literal: dict[int, cp_model.IntVar] = {}
        self.assumed = assumptions
        self.terms: list = []  # objective terms (soft counters)
        self.cost_vars: list = []  # packing: x variables and their costs, summed at the end
        self.cost_coefs: list[int] = []
        self._in: dict[tuple, object] = {}
        self.x = []
        for c, cands in enumerate(candidates):
            xs = {p: self.m.NewBoolVar("x%d_%d" % (c, p)) for p in cands}
            self.x.append(xs)
            self.m.AddExactlyOne(xs.values())
            if packing:
                for p, v in xs.items():
                    if inst.cost[c][p]:
                        self.cost_vars.append(v)
                        self.cost_coefs.append(inst.cost[c][p])
        self._capacity()
        for pol in inst.req.policies:
            lit = self._literal(pol)
            getattr(self, "_" + pol.type.replace("-", "_"))(pol, lit)
        self._relations()
        self.network_edges()
        self.objective = (cp_model.LinearExpr.weighted_sum(self.cost_vars, self.cost_coefs)
                          + cp_model.LinearExpr.sum(self.terms))
        self.m.Minimize(self.objective)

    # -- helpers -------------------------------------------------------------------------------
    def _literal(self, pol):
        if not pol.hard or self.assumed is None or pol.index not in self.assumed:
            return None
        if pol.index not in self.literal:
            self.literal[pol.index] = self.m.NewBoolVar("assume%d" % pol.index)
        return self.literal[pol.index]

    def _add(self, ct, lit):
        if lit is not None:
            ct.OnlyEnforceIf(lit)
        return ct

    def _unsat(self, lit):
        """A constraint that cannot hold (under ``lit``)."""
        if lit is None:
            self.m.AddBoolOr([])
        else:
            self.m.AddBoolOr([lit.Not()])

    def within(self, c: int, key, group) -> dict:
        """{vertex: 0/1 expression "c is in that vertex"} for a grouping of providers."""
        cache_key = (c, key)
        if cache_key not in self._in:
            by_vertex = defaultdict(list)
            for p, v in self.x[c].items():
                by_vertex[group(p)].append(v)
            out = {}
            for vertex, vs in by_vertex.items():
                if len(vs) == 1:
                    out[vertex] = vs[0]
                else:
                    b = self.m.NewBoolVar("in%d_%s_%s" % (c, key, vertex))
                    self.m.Add(sum(vs) == b)
                    out[vertex] = b
            self._in[cache_key] = out
        return self._in[cache_key]

    def vertices(self, c: int, partition) -> dict:
        part = self.dc.partition(*partition)
        return self.within(c, partition, part.of.__getitem__)

    def hosts(self, c: int) -> dict:
        return self.within(c, "host", self.inst.host_of.__getitem__)

    def _soft(self, pol, expr) -> None:
        self.terms.append(weight_units(pol.weight) * SOFT_UNIT * expr)

    # -- capacity ------------------------------------------------------------------------------
    def _capacity(self) -> None:
        users = defaultdict(list)
        for c, xs in enumerate(self.x):
            for p, v in xs.items():
                users[p].append((c, v))
        for p, cs in users.items():
            for i, cap in enumerate(self.inst.free[p]):
                need = [(self.inst.demand[c][i], v) for c, v in cs if self.inst.demand[c][i]]
                if sum(d for d, _ in need) > cap:
                    self.m.Add(sum(d * v for d, v in need) <= cap)

    # -- pair policies -------------------------------------------------------------------------
    def _anti_collocation(self, pol, lit) -> None:
        ins = {c: self.vertices(c, pol.partition) for c in pol.members}
        if not pol.hard:
            return self._soft_apart(pol, ins)
        disjoint = sum(len(p) for p in pol.parts) == len({c for p in pol.parts for c in p})
        if not disjoint:
            for a, b in pol.pairs:
                for v in ins[a].keys() & ins[b].keys():
                    self._add(self.m.Add(ins[a][v] + ins[b][v] <= 1), lit)
            return
        by_vertex = defaultdict(list)
        for i, part in enumerate(pol.parts):
            for c in part:
                for v, b in ins[c].items():
                    by_vertex[v].append((i, b))
        for v, entries in by_vertex.items():
            parts = {i for i, _ in entries}
            if len(parts) < 2:
                continue
            if len(entries) == len(parts):  # one member per part here: plain at-most-one
                self._add(self.m.Add(sum(b for _, b in entries) <= 1), lit)
                continue
            present = {i: self.m.NewBoolVar("") for i in parts}
            for i, b in entries:
                self.m.AddImplication(b, present[i])
            self._add(self.m.Add(sum(present.values()) <= 1), lit)

    _anti_affinity = _anti_collocation

    def _soft_apart(self, pol, ins) -> None:
        """Count member pairs that share a vertex: sum over vertices of C(n_v, 2) when every part
        is one member, else one counter per pair and shared vertex."""
        if all(len(p) == 1 for p in pol.parts):
            by_vertex = defaultdict(list)
            for c in pol.members:
                for v, b in ins[c].items():
                    by_vertex[v].append(b)
            for v, bs in by_vertex.items():
                if len(bs) < 2:
                    continue
                steps = [self.m.NewBoolVar("") for _ in range(len(bs) - 1)]
                self.m.Add(sum(bs) <= 1 + sum(steps))
                self._soft(pol, sum(k * s for k, s in enumerate(steps, start=1)))
            return
        for a, b in pol.pairs:
            for v in ins[a].keys() & ins[b].keys():
                s = self.m.NewBoolVar("")
                self.m.Add(ins[a][v] + ins[b][v] <= 1 + s)
                self._soft(pol, s)

    def _collocation(self, pol, lit) -> None:
        if pol.hard:
            return  # in _relations, with the other "share one vertex" policies
        ins = {c: self.vertices(c, pol.partition) for c in pol.members}
        for a, b in pol.pairs:
            together = []
            for v in ins[a].keys() & ins[b].keys():
                s = self.m.NewBoolVar("")
                self.m.AddImplication(s, ins[a][v])
                self.m.AddImplication(s, ins[b][v])
                together.append(s)
            self._soft(pol, 1 - sum(together))

    def _affinity(self, pol, lit) -> None:
        if "target" in pol.params:
            self._license(pol, lit)  # members outside the target, as for host traits
        else:
            self._collocation(pol, lit)

    def _relations(self) -> None:
        """Hard collocation, affinity and same-subtree: each connected set of members picks one
        vertex, and every member lies in it."""
        for pol, members in relation_sets(self.inst):
            lit = self._literal(pol)
            self._one_vertex(pol, members, lit)

    def _one_vertex(self, pol, members, lit, soft: bool = False) -> None:
        ins = {c: self.vertices(c, pol.partition) for c in members}
        common = set.intersection(*(set(i) for i in ins.values()))
        if not common and not soft:
            return self._unsat(lit)
        choose = {v: self.m.NewBoolVar("") for v in sorted(set().union(*ins.values()) if soft
                                                            else common)}
        self.m.AddExactlyOne(choose.values())
        inside = []
        for c in members:
            for v, b in ins[c].items():
                if soft:
                    t = self.m.NewBoolVar("")
                    self.m.AddImplication(t, b)
                    self.m.AddImplication(t, choose[v])
                    inside.append(t)
                elif v in choose:
                    self._add(self.m.AddImplication(b, choose[v]), lit)
                else:
                    self._add(self.m.Add(b == 0), lit)
        if soft:
            self._soft(pol, len(members) - sum(inside))

    def _same_subtree(self, pol, lit) -> None:
        if not pol.hard:
            self._one_vertex(pol, pol.members, None, soft=True)

    # -- llmn ----------------------------------------------------------------------------------
    def _llmn(self, pol, lit) -> None:
        n, cap = pol.params["n"], pol.params["per_l1"]
        l1 = defaultdict(list)
        l2 = defaultdict(list)
        for c in pol.members:
            for v, b in self.vertices(c, ("level", pol.params["l1"])).items():
                l1[v].append(b)
            for v, b in self.vertices(c, ("level", pol.params["l2"])).items():
                l2[v].append(b)
        used = []
        for v, bs in l1.items():
            u = self.m.NewBoolVar("")
            self.m.Add(sum(bs) >= u)
            used.append(u)
            if len(bs) > cap:
                if pol.hard:
                    self._add(self.m.Add(sum(bs) <= cap), lit)
                else:
                    over = self.m.NewIntVar(0, len(bs), "")
                    self.m.Add(sum(bs) <= cap + over)
                    self._soft(pol, over)
        for v, bs in l2.items():
            if len(bs) > 1:
                if pol.hard:
                    self._add(self.m.Add(sum(bs) <= 1), lit)
                else:
                    over = self.m.NewIntVar(0, len(bs), "")
                    self.m.Add(sum(bs) <= 1 + over)
                    self._soft(pol, over)
        if pol.hard:
            self._add(self.m.Add(sum(used) >= n), lit)
        else:
            short = self.m.NewIntVar(0, n, "")
            self.m.Add(sum(used) + short >= n)
            self._soft(pol, short)

    # -- network -------------------------------------------------------------------------------
    def _hop_limit(self, pol, lit) -> None:
        net, hops = self.dc.network, pol.params["hops"]
        names = {}
        for a, b in pol.pairs:
            ha, hb = self.hosts(a), self.hosts(b)
            by_name_b = {self.dc.nodes[h].name: v for h, v in hb.items()}
            violated = None if pol.hard else self.m.NewBoolVar("")
            for h, v in ha.items():
                if h not in names:
                    names[h] = net.within(self.dc.nodes[h].name, hops)
                near = [by_name_b[n] for n in names[h] if n in by_name_b]
                if violated is None:
                    self._add(self.m.Add(sum(near) >= v), lit)
                else:
                    self.m.Add(sum(near) + violated >= v)
            if violated is not None:
                self._soft(pol, violated)

    def _bandwidth(self, pol, lit) -> None:
        pass  # all bandwidth policies are modelled together in _network_edges

    def network_edges(self) -> None:
        """Loads on the network edges that could overflow; called once after all policies."""
        pols = [p for p in self.inst.req.policies if p.type == "bandwidth"]
        if not pols:
            return
        net, dc = self.dc.network, self.dc
        below: dict[int, set[int]] = {}  # edge -> host node indices below it
        for n in net.nodes:
            if n.parent is not None and n.bandwidth is not None:
                below[n.index] = {dc.by_name[h] for h in net.hosts_below(n.index)}
        pairs = []  # (policy, a, b, violation or None)
        for pol in pols:
            lit = self._literal(pol)
            for a, b in pol.pairs:
                v = None if pol.hard else self.m.NewBoolVar("")
                pairs.append((pol, a, b, v, lit))
                if v is not None:
                    self._soft(pol, v)
                self._off_network(pol, a, b, v, lit)
        host_sets = {(a, b): (set(self.hosts(a)), set(self.hosts(b))) for _, a, b, _, _ in pairs}
        for e, hosts_below in below.items():
            cap = round((net.nodes[e].bandwidth - self.inst.used_bandwidth.get(e, 0.0))
                        * MBPS_SCALE)
            crossing = []
            for pol, a, b, v, lit in pairs:
                ha, hb = host_sets[(a, b)]
                if (ha <= hosts_below and hb <= hosts_below) or not (ha | hb) & hosts_below:
                    continue  # both always below, or never: the pair never crosses this edge
                crossing.append((pol, a, b, v, lit))
            need = sum(round(p.params["mbps"] * MBPS_SCALE) for p, *_ in crossing)
            if need <= cap:
                continue
            hard_load, soft_load, softs = [], [], []
            for pol, a, b, v, lit in crossing:
                ua = sum(x for h, x in self.hosts(a).items() if h in hosts_below)
                ub = sum(x for h, x in self.hosts(b).items() if h in hosts_below)
                on = self.m.NewBoolVar("")
                self._add(self.m.Add(on >= ua - ub), lit)
                self._add(self.m.Add(on >= ub - ua), lit)
                load = round(pol.params["mbps"] * MBPS_SCALE) * on
                (hard_load if pol.hard else soft_load).append(load)
                if v is not None:
                    softs.append((on, v))
            if hard_load:
                self.m.Add(sum(hard_load) <= cap)
            if soft_load:
                over = self.m.NewBoolVar("")
                self.m.Add(sum(hard_load) + sum(soft_load) <= cap + need * over)
                for on, v in softs:
                    self.m.Add(on + over <= 1 + v)

    def _off_network(self, pol, a, b, v, lit) -> None:
        """A pair member on a host outside the network tree has no path: its partner must share
        the host."""
        leaf = self.dc.network.leaf_of
        for x, y in ((a, b), (b, a)):
            hy = self.hosts(y)
            for h, var in self.hosts(x).items():
                if self.dc.nodes[h].name in leaf:
                    continue
                same = hy.get(h, 0)
                if v is None:
                    self._add(self.m.Add(var <= same), lit)
                else:
                    self.m.Add(var <= same + v)

    # -- monadic -------------------------------------------------------------------------------
    def _license(self, pol, lit) -> None:
        for c in pol.members:
            bad = [v for p, v in self.x[c].items() if not host_ok(self.dc, pol, p)]
            if bad and pol.hard:
                self._add(self.m.Add(sum(bad) == 0), lit)
            elif bad:
                self._soft(pol, sum(bad))

    _root_traits = _license

    # -- answers -------------------------------------------------------------------------------
    def hint(self, placement: dict[int, int]) -> None:
        for c, xs in enumerate(self.x):
            for p, v in xs.items():
                self.m.AddHint(v, 1 if placement.get(c) == p else 0)

    def placement(self, solver: cp_model.CpSolver) -> dict[int, int]:
        out = {}
        for c, xs in enumerate(self.x):
            for p, v in xs.items():
                if solver.BooleanValue(v):
                    out[c] = p
        return out
