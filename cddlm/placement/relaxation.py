"""The packing relaxation: a lower bound on the objective over the whole problem (every eligible
provider, no pruning), and a packing to start from.

Relaxation. Keep what every placement must satisfy about providers (each component on one of
its eligible providers, capacities) and drop every policy: hard policies only restrict the
placements further, and soft ones only add violation costs, which are never negative. So the
least packing cost under capacities alone is at most the objective of any placement the
verifier accepts. Components with the same eligible providers, demand and packing costs are
interchangeable here, so they form a *class*, and the model only counts how many members of each
class go on each provider: integers y[k, p] in 0..|k|, sum over p of y[k, p] = |k|, per provider
and dimension sum over k of demand(k) y[k, p] <= free capacity, minimise sum cost(k, p) y[k, p].
Eight flavours on 1,000 hosts give 8,000 integers instead of a million booleans, fewer still
once ``useful`` drops the providers no optimal solution can use (6,042 on the benchmark's
tightly loaded 1,000 x 1,000; 8,571 instead of 76,537 on 1,000 x 10,000), and CP-SAT solves that
to optimality in seconds (exact integer arithmetic: its best bound is a proof, not a
floating-point estimate; measured 1-10 s on 1,000 x 1,000, where the LP relaxation's bound
alone, 2,235,572 by GLOP, lies 1.1 % below the optimum 2,260,828). Eligibility filters (capacity, traits, existing placements, hard
licence / root-traits / identifier targets, arc consistency) keep only providers some feasible
placement can use, so they do not weaken the argument.

Disaggregation. The counts are then turned into a placement: components one at a time (most
constrained first) onto a provider where their class still has a count, among those the hard
policies allow with the components already placed (``greedy.State``), fewest soft violations
first. When every component lands on a counted slot with no soft violation, the placement's
objective equals the relaxation's value, so a relaxation solved to optimality proves it optimal
for the whole problem. A component with no allowed slot goes, as in the greedy pass, on the
cheapest provider the policies allow; a placement that still fails is dropped (the counts then
only guide the candidates of the CP-SAT model).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cddlm.placement import greedy
from cddlm.placement.cpmodel import new_solver
from cddlm.placement.eligibility import Instance

LIMIT = 300_000  # integers y[k, p]: above, no relaxation (its model would not pay for itself)


@dataclass
class Relaxation:
    bound: int  # no placement the verifier accepts has a smaller objective
    value: int | None  # packing cost of the best counts found (None: none found)
    optimal: bool  # value == bound
    classes: list[list[int]]  # class -> its components
    counts: dict[tuple[int, int], int]  # (class, provider) -> members there, in the best counts

    def support(self) -> list[list[int]]:
        """Per component, the providers its class has a count on."""
        by_class = defaultdict(list)
        for (k, p), n in self.counts.items():
            if n:
                by_class[k].append(p)
        out: list[list[int]] = [[] for _ in range(sum(map(len, self.classes)))]
        for k, members in enumerate(self.classes):
            for c in members:
                out[c] = by_class[k]
        return out


def classes(inst: Instance) -> list[list[int]]:
    """Components that share one eligible list and one cost map (``eligibility`` shares them
    between components of the same demand and traits) and have the same demand."""
    out: dict[tuple, list[int]] = defaultdict(list)
    for c, elig in enumerate(inst.eligible):
        out[(id(elig), id(inst.cost[c]), tuple(inst.demand[c]))].append(c)
    return list(out.values())


def useful(inst: Instance, ks: list[list[int]]) -> list[list[int]] | None:
    """Per class, the eligible providers some optimal solution of the relaxation may use.

    In an optimal solution, a member of class k on provider p leaves every strictly cheaper
    eligible provider q *blocked* for k: q lacks room for one more member in some dimension i
    where k has demand d_i (else moving the member to q would cost less), so the request's own
    load on q in i is at least free_i(q) - d_i + 1. Those loads add up to at most D_i, the
    request's total demand in i less this member's, so summing b(q) = min over such i of
    (free_i(q) - d_i + 1) / D_i over the blocked providers gives at most the number of
    dimensions. Walking k's providers cheapest first, once the b of the strictly cheaper ones
    add up to more than that, no optimal solution puts a member of k on any further provider:
    dropping them leaves the relaxation's optimum and bound unchanged. None when more than
    LIMIT (class, provider) pairs remain."""
    dims = range(len(inst.dims))
    total = [sum(d[i] for d in inst.demand) for i in dims]
    out, kept = [], 0
    for members in ks:
        c0 = members[0]
        d, cost = inst.demand[c0], inst.cost[c0]
        room = [total[i] - d[i] for i in dims]
        keep, cheaper, level, level_cost = [], 0.0, 0.0, None
        for p in inst.eligible[c0]:  # cheapest first
            if cost[p] != level_cost:
                cheaper, level_cost = cheaper + level, cost[p]
                level = 0.0
                if cheaper > len(inst.dims) + 1e-9:  # strictly more, whatever the rounding
                    break
            keep.append(p)
            shares = [(inst.free[p][i] - d[i] + 1) / room[i] if room[i] > 0 else float("inf")
                      for i in dims if d[i] > 0]
            level += min(shares) if shares else float("inf")
        out.append(keep)
        kept += len(keep)
        if kept > LIMIT:
            return None
    return out


def solve(inst: Instance, time_limit: float, seed: int = 0, deterministic: bool = False
          ) -> Relaxation | None:
    """The relaxation within ``time_limit`` seconds (CP-SAT's deterministic time when
    ``deterministic``); None when the model would be too large, or when CP-SAT ends without a
    bound. One worker, a fixed seed: a relaxation solved before the limit gives the same
    counts on every run (measured on the random 1,000 x 1,000 instances: as fast as two
    workers, 3-6 s; a hint from the greedy answer made it slower)."""
    ks = classes(inst)
    providers = useful(inst, ks)
    if providers is None:
        return None
    m = cp_model.CpModel()
    y: dict[tuple[int, int], cp_model.IntVar] = {}
    users = defaultdict(list)  # provider -> (class, variable)
    variables, coefs = [], []
    for k, members in enumerate(ks):
        c0 = members[0]
        row = []
        for p in providers[k]:
            v = m.NewIntVar(0, len(members), "")
            y[(k, p)] = v
            row.append(v)
            users[p].append((k, v))
            if inst.cost[c0][p]:
                variables.append(v)
                coefs.append(inst.cost[c0][p])
        m.Add(cp_model.LinearExpr.sum(row) == len(members))
    for p, kv in users.items():
        for i, cap in enumerate(inst.free[p]):
            need = [(inst.demand[ks[k][0]][i], len(ks[k]), v) for k, v in kv]
            if sum(d * n for d, n, _ in need) > cap:
                m.Add(cp_model.LinearExpr.weighted_sum([v for *_, v in need],
                                                       [d for d, *_ in need]) <= cap)
    m.Minimize(cp_model.LinearExpr.weighted_sum(variables, coefs))
    s = new_solver(seed)
    if deterministic:
        s.parameters.max_deterministic_time = max(0.05, time_limit)
    else:
        s.parameters.max_time_in_seconds = max(0.05, time_limit)
    status = s.Solve(m)
    if status == cp_model.OPTIMAL or status == cp_model.FEASIBLE:
        counts = {key: s.Value(v) for key, v in y.items() if s.Value(v)}
        value = round(s.ObjectiveValue())
        bound = int(s.BestObjectiveBound())
        return Relaxation(bound, value, value <= bound, ks, counts)
    if status == cp_model.INFEASIBLE:  # capacities alone cannot hold the components
        return None
    bound = s.BestObjectiveBound()
    if bound != bound or bound in (float("inf"), float("-inf")):
        return None
    return Relaxation(int(bound), None, False, ks, {})


def disaggregate(inst: Instance, rel: Relaxation, sequence: list[int]) -> dict[int, int] | None:
    """A placement from the relaxation's counts (see the module's doc), or None."""
    if rel.value is None:
        return None
    of = {c: k for k, members in enumerate(rel.classes) for c in members}
    slots: dict[int, dict[int, int]] = defaultdict(dict)  # class -> {provider: count left}
    for (k, p), n in rel.counts.items():
        slots[k][p] = n
    state = greedy.State(inst)
    for c in sequence:
        left = slots[of[c]]
        best, best_key = None, None
        for p, n in left.items():
            if n <= 0 or not state.allowed(c, p):
                continue
            key = (state.penalty(c, p), -n, inst.cost[c][p], p)  # fullest slot first
            if best_key is None or key < best_key:
                best, best_key = p, key
        if best is None:  # no counted slot: the greedy pass's rule
            best = greedy.cheapest(state, c)
        if best is None:
            return None
        if left.get(best, 0) > 0:
            left[best] -= 1
        state.place(c, best)
    return state.where
