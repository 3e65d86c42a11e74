"""The placement solver: always answers, within a time limit.

1. Filters (``eligibility``): providers each component may use at all.
2. Greedy pass (``greedy``): milliseconds; an answer in hand, and a hint for step 3.
3. CP-SAT (``cpmodel``) over candidate providers per component: all of them when the model stays
   small (at most FULL_LIMIT booleans), else the K cheapest half plus a seeded sample half plus
   the greedy choice (K = PRUNED_BUDGET / components). It improves soft violations and packing,
   gives a bound, and proves infeasibility. The greedy answer is its hint.
4. The verifier re-checks whatever is returned; a rejected answer is never returned as feasible.
5. No placement: ``conflicts`` explains with a small set of hard policies.

Status: ``optimal`` only when CP-SAT proved it over the unpruned candidates; ``feasible`` for
any other verified answer; ``infeasible`` when proven (``proven``) or when nothing was found in
time (``proven`` false, said in ``reason``).

Determinism: CP-SAT runs with a fixed ``random_seed`` and ``num_workers`` (default 2, the
machine's cores). An answer proved optimal has the same objective on every run; when the time
limit stops the search, or when several optima tie, two runs may differ, since the parallel
workers share solutions in a timing-dependent way. ``workers=1`` with ``deterministic=True``
uses a deterministic time limit instead of the wall clock and repeats exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from cddlm.placement import conflicts, eligibility, greedy
from cddlm.placement.cpmodel import Model
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.request import Request
from cddlm.placement.verifier import Report, verify

FULL_LIMIT = 120_000
PRUNED_BUDGET = 60_000
MIN_K = 16


@dataclass
class Result:
    status: str
    placement: dict[int, int]  # component index -> provider node index
    report: Report | None
    solver: str
    conflicts: list[int] = field(default_factory=list)
    reason: str | None = None
    proven: bool = True
    bound: int | None = None
    pruned: bool = False
    seconds: float = 0.0
    first_solution: float | None = None  # seconds from the start to the first verified answer
    greedy_objective: int | None = None

    @property
    def objective(self) -> int | None:
        return self.report.objective if self.report and self.report.ok else None


class _FirstSolution(cp_model.CpSolverSolutionCallback):
    def __init__(self, clock):
        super().__init__()
        self.clock, self.at = clock, None

    def on_solution_callback(self):
        if self.at is None:
            self.at = self.clock()


def candidates(inst: eligibility.Instance, seed: int, hint: dict[int, int] | None
               ) -> tuple[list[list[int]], bool]:
    total = sum(len(e) for e in inst.eligible)
    if total <= FULL_LIMIT:
        return inst.eligible, False
    k = max(MIN_K, PRUNED_BUDGET // max(1, len(inst.eligible)))
    out, pruned = [], False
    for c, elig in enumerate(inst.eligible):
        if len(elig) <= k:
            out.append(elig)
            continue
        pruned = True
        keep = elig[: k // 2]
        rest = elig[k // 2:]
        keep += random.Random(seed * 1_000_003 + c).sample(rest, min(len(rest), k - len(keep)))
        if hint and hint.get(c) is not None and hint[c] not in keep:
            keep.append(hint[c])
        out.append(sorted(keep, key=lambda p: (inst.cost[c][p], p)))
    return out, pruned


def solve(dc: Datacenter, req: Request, *, clock, time_limit: float = 10.0, seed: int = 0,
          used=None, used_bandwidth=None, workers: int = 2, deterministic: bool = False,
          use_cp: bool = True) -> Result:
    start = clock()
    used = used or {}
    inst = eligibility.build(dc, req, used, used_bandwidth)

    def elapsed():
        return clock() - start

    def checked(placement):
        report = verify(dc, req, placement, used, used_bandwidth)
        return report if report.ok else None

    if any(not e for e in inst.eligible):
        return _infeasible(dc, req, used, used_bandwidth, inst, start, clock, time_limit, seed,
                           "filters")
    first = greedy.solve(inst)
    g_report = checked(first) if first else None
    best = Result("feasible", first, g_report, "greedy") if g_report else None
    if best:
        best.first_solution = elapsed()
        best.greedy_objective = g_report.objective
    if not use_cp:
        return _finish(best, start, clock) if best else _infeasible(
            dc, req, used, used_bandwidth, inst, start, clock, time_limit, seed, "greedy")
    cands, pruned = candidates(inst, seed, first if g_report else None)
    outcome = _cp(inst, cands, first if g_report else None, clock, start, time_limit, seed,
                  workers, deterministic)
    status, placement, bound, found_at = outcome
    if placement is not None:
        report = checked(placement)
        if report is not None and (best is None or report.objective <= best.report.objective):
            optimal = status == cp_model.OPTIMAL and not pruned
            greedy_objective = best.greedy_objective if best else None
            best = Result("optimal" if optimal else "feasible", placement, report,
                          "greedy+cp-sat" if g_report else "cp-sat", bound=bound, pruned=pruned,
                          first_solution=best.first_solution if best else found_at - start,
                          greedy_objective=greedy_objective)
        elif best is not None:
            best.bound, best.pruned = bound, pruned
            if status == cp_model.OPTIMAL and not pruned and report is not None:
                best.status = "optimal"  # CP-SAT proved the greedy answer cannot be beaten
    elif best is not None:
        best.bound, best.pruned = bound, pruned
    if best is not None:
        return _finish(best, start, clock)
    if status == cp_model.INFEASIBLE and pruned:
        status, placement, bound, found_at = _cp(inst, inst.eligible, None, clock, start,
                                                 time_limit, seed, workers, deterministic)
        if placement is not None and checked(placement):
            return _finish(Result("feasible", placement, checked(placement), "cp-sat",
                                  first_solution=found_at - start), start, clock)
        pruned = status != cp_model.INFEASIBLE
    if status == cp_model.INFEASIBLE and not pruned:
        return _infeasible(dc, req, used, used_bandwidth, inst, start, clock, time_limit, seed,
                           "cp-sat")
    result = Result("infeasible", {}, None, "cp-sat", proven=False,
                    reason="no placement was found within the time limit of %gs, and none "
                           "could be shown impossible" % time_limit)
    return _finish(result, start, clock)


def _cp(inst, cands, hint, clock, start, time_limit, seed, workers, deterministic):
    model = Model(inst, cands)
    if hint:
        model.hint(hint)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    left = max(0.05, time_limit - (clock() - start) - 0.05)
    if deterministic:
        solver.parameters.max_deterministic_time = left
    else:
        solver.parameters.max_time_in_seconds = left
    callback = _FirstSolution(clock)
    status = solver.Solve(model.m, callback)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return status, model.placement(solver), int(solver.BestObjectiveBound()), callback.at
    return status, None, None, None


def _infeasible(dc, req, used, used_bandwidth, inst, start, clock, time_limit, seed, by):
    """Explain, with the policies that emptied a component's providers when that is the cause."""
    for c, elig in enumerate(inst.eligible):
        if not elig and c in inst.emptied_by:
            labels = [req.policies[i].label for i in inst.emptied_by[c]]
            return _finish(Result(
                "infeasible", {}, None, by, conflicts=sorted(inst.emptied_by[c]),
                reason="component %s: no provider satisfies %s" % (
                    req.components[c].name, "; ".join(labels))), start, clock)
    base = eligibility.build(dc, req, used, used_bandwidth, monadic=False, arcs=False)
    left = max(0.5, time_limit - (clock() - start))
    why = conflicts.explain(base, left, clock, seed)
    result = Result("infeasible", {}, None, by, conflicts=why.conflicts, reason=why.reason,
                    proven=True)
    return _finish(result, start, clock)


def _finish(result: Result, start, clock) -> Result:
    result.seconds = clock() - start
    return result
