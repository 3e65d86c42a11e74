"""The placement solver: always answers, within a time limit.

1. Filters (``eligibility``): providers each component may use at all.
2. Greedy pass (``greedy``): milliseconds; an answer in hand, and a hint for step 4.
3. Large requests (over LARGE_MODEL booleans): the packing relaxation (``relaxation``), with at
   most RELAX_SHARE of the time left: a lower bound over the whole problem (every eligible
   provider, no pruning), and placements disaggregated from its counts. A verified placement
   whose objective reaches the bound is optimal, and the solver stops there. Middling ones
   (PROVE_FROM to LARGE_MODEL booleans): the relaxation's bound only, for at most
   PROVE_SECONDS, which ends the solve when the greedy answer reaches it.
4. CP-SAT (``cpmodel``) over candidate providers per component: all of them when the model stays
   small (at most FULL_LIMIT booleans), else the K cheapest half plus a seeded sample half plus
   the hint's choice plus the providers the relaxation's counts use for the component's class
   (K = PRUNED_BUDGET / components). It improves soft violations and packing, gives a bound
   when it saw every candidate, and proves infeasibility. The best answer so far is its hint,
   and the relaxation's bound a constraint on its objective (so it stops on reaching it).
5. The verifier re-checks whatever is returned; a rejected answer is never returned as feasible.
6. No placement: ``conflicts`` explains with a small set of hard policies.

``bound`` is always a lower bound on the objective of every placement of the whole problem: the
relaxation's, or CP-SAT's when its model had every candidate, whichever is higher
(``bound_by``). CP-SAT's bound over pruned candidates is never reported: it holds for the
pruned model only.

Status: ``optimal`` when the objective reaches that bound (CP-SAT proved it over the unpruned
candidates, or the relaxation did); ``feasible`` for any other verified answer; ``infeasible``
when proven (``proven``) or when nothing was found in time (``proven`` false, said in
``reason``).

Determinism: CP-SAT runs with a fixed ``random_seed``, ``num_workers`` (default 2, the
machine's cores) and, for models up to LARGE_MODEL booleans, ``interleave_search``, which
schedules its subsolvers in deterministic batches: a search that ends (optimal or infeasible)
before the time limit gives the same answer on every run, ties included. Larger models use the
plain parallel portfolio without probing (measured: interleaving and probing delayed the first
CP-SAT solution on 1,000 x 1,000 from 3 s to 12-19 s), whose answers at the limit vary; the
relaxation runs on one worker, so a large request it proves optimal is answered the same on
every run. When the wall-clock limit stops a search, how far it got depends on the machine's
speed and load, so the answer may differ; ``deterministic=True`` measures the limits in
CP-SAT's deterministic time instead, and then repeats exactly (but no longer tracks seconds
precisely).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from cddlm.placement import conflicts, eligibility, greedy, relaxation
from cddlm.placement.cpmodel import Model, new_solver
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.request import Request
from cddlm.placement.verifier import Report, verify

FULL_LIMIT = 120_000
PRUNED_BUDGET = 60_000
MIN_K = 16
LARGE_MODEL = 20_000  # booleans: above, favour speed (no interleaving, no probing), and relax
RELAX_SHARE = 0.5  # of the time left after the greedy pass, at most, for the relaxation
PROVE_FROM = 2_000  # booleans: from here up to LARGE_MODEL, the relaxation's bound is tried on
PROVE_SECONDS = 1.0  # the greedy answer first, for at most this long (or RELAX_SHARE of the time)


@dataclass
class Result:
    status: str
    placement: dict[int, int]  # component index -> provider node index
    report: Report | None
    solver: str
    conflicts: list[int] = field(default_factory=list)
    reason: str | None = None
    proven: bool = True
    bound: int | None = None  # no placement of the whole problem has a smaller objective
    bound_by: str | None = None  # "cp-sat" (over every candidate) or "relaxation"
    pruned: bool = False  # CP-SAT saw pruned candidates (its own bound is then not reported)
    seconds: float = 0.0
    first_solution: float | None = None  # seconds from the start to the first verified answer

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


def candidates(inst: eligibility.Instance, seed: int, hint: dict[int, int] | None,
               extra: list[list[int]] | None = None) -> tuple[list[list[int]], bool]:
    """Every eligible provider when the model stays small; else, per component, the K/2
    cheapest, a seeded sample of K/2 from the *useful* range (no dearer than the dearest
    provider the hint gave a component with the same demand and traits: moving anywhere dearer
    cannot improve), the hint's own choice, so the hint stays a solution, and ``extra`` (the
    providers the relaxation's counts use for the component's class)."""
    total = sum(len(e) for e in inst.eligible)
    if total <= FULL_LIMIT:
        return inst.eligible, False
    k = max(MIN_K, PRUNED_BUDGET // max(1, len(inst.eligible)))
    limit: dict[int, int] = {}  # id of a shared eligibility list -> dearest hinted cost
    if hint:
        for c, p in hint.items():
            key = id(inst.eligible[c]) if c not in inst.req.existing else -1 - c
            limit[key] = max(limit.get(key, 0), inst.cost[c][p])
    out, pruned = [], False
    for c, elig in enumerate(inst.eligible):
        if len(elig) <= k:
            out.append(elig)
            continue
        pruned = True
        keep = elig[: k // 2]
        rest = elig[k // 2:]
        ceiling = limit.get(id(elig))
        if ceiling is not None:
            useful = [p for p in rest if inst.cost[c][p] <= ceiling]
            rest = useful if len(useful) >= k - len(keep) else rest[:max(len(useful), k)]
        keep += random.Random(seed * 1_000_003 + c).sample(rest, min(len(rest), k - len(keep)))
        if hint and hint.get(c) is not None and hint[c] not in keep:
            keep.append(hint[c])
        if extra:
            keep = list(set(keep).union(extra[c]))
        out.append(sorted(keep, key=lambda p: (inst.cost[c][p], p)))
    return out, pruned


def solve(dc: Datacenter, req: Request, *, clock, time_limit: float = 10.0, seed: int = 0,
          used=None, used_bandwidth=None, workers: int = 2, deterministic: bool = False
          ) -> Result:
    start = clock()
    used = used or {}
    inst = eligibility.build(dc, req, used, used_bandwidth)

    def elapsed():
        return clock() - start

    def checked(placement):
        report = verify(dc, req, placement, used, used_bandwidth)
        return report if report.ok else None

    if any(not e for e in inst.eligible):
        return _infeasible(req, inst, start, clock, time_limit, seed, "filters")
    first, g_report = None, None
    for sequence in greedy.orders(inst):  # a few orders, milliseconds each: keep the best
        attempt = greedy.solve(inst, sequence)
        report = checked(attempt) if attempt else None
        if report is not None and (g_report is None or report.objective < g_report.objective):
            first, g_report = attempt, report
    best = Result("feasible", first, g_report, "greedy") if g_report else None
    if best:
        best.first_solution = elapsed()
    rel, extra = None, None
    size = sum(len(e) for e in inst.eligible)
    if size > LARGE_MODEL:
        rel, best = _relax(inst, best, checked, elapsed, time_limit, seed, deterministic)
    elif size >= PROVE_FROM and best is not None:
        # the relaxation's bound alone (its counts unused): when it shows the greedy answer
        # optimal, CP-SAT need not search to prove it (1,000 x 10: 0.1 s, not 2-5 s)
        rel = relaxation.solve(inst, min(PROVE_SECONDS, RELAX_SHARE * (time_limit - elapsed())),
                               seed, deterministic=deterministic)
    if best is not None and rel is not None and best.report.objective <= rel_bound(rel):
        best.status = "optimal"  # the relaxation proves nothing can cost less
        best.bound, best.bound_by = rel.bound, "relaxation"
        return _finish(best, start, clock)
    if size <= LARGE_MODEL:
        rel = None      # (a smaller model's search and bounds stay CP-SAT's alone, as before)
    elif rel is not None and rel.counts:
        extra = rel.support()
    hint = best.placement if best else None
    cands, pruned = candidates(inst, seed, hint, extra)
    outcome = _cp(inst, cands, hint, clock, start, time_limit, seed, workers, deterministic,
                  rel_bound(rel))
    status, placement, cp_bound, found_at = outcome
    bound, bound_by = (rel.bound, "relaxation") if rel is not None else (None, None)
    if cp_bound is not None and not pruned and (bound is None or cp_bound > bound):
        bound, bound_by = cp_bound, "cp-sat"  # over every candidate: the whole problem's
    if placement is not None:
        report = checked(placement)
        if report is not None and (best is None or report.objective <= best.report.objective):
            best = Result("feasible", placement, report,
                          best.solver + "+cp-sat" if best else "cp-sat",
                          first_solution=best.first_solution if best else found_at - start)
    if best is not None:
        best.bound, best.bound_by, best.pruned = bound, bound_by, pruned
        if bound is not None and best.report.objective <= bound:
            best.status = "optimal"  # CP-SAT or the relaxation proved nothing costs less
        return _finish(best, start, clock)
    if status == cp_model.INFEASIBLE and pruned:
        status, placement, bound, found_at = _cp(inst, inst.eligible, None, clock, start,
                                                 time_limit, seed, workers, deterministic)
        report = checked(placement) if placement is not None else None
        if report is not None:
            return _finish(Result("feasible", placement, report, "cp-sat",
                                  first_solution=found_at - start), start, clock)
        pruned = status != cp_model.INFEASIBLE
    if status == cp_model.INFEASIBLE and not pruned:
        return _infeasible(req, inst, start, clock, time_limit, seed, "cp-sat")
    result = Result("infeasible", {}, None, "cp-sat", proven=False,
                    reason="no placement was found within the time limit of %gs, and none "
                           "could be shown impossible" % time_limit)
    return _finish(result, start, clock)


def rel_bound(rel) -> float:
    return rel.bound if rel is not None else float("-inf")


def _relax(inst, best, checked, elapsed, time_limit, seed, deterministic):
    """The packing relaxation (``relaxation.py``) with at most RELAX_SHARE of the time left: a
    bound over the whole problem, and placements disaggregated from its counts, kept when they
    beat ``best``. Returns (relaxation or None, best)."""
    seconds = RELAX_SHARE * (time_limit - elapsed())
    rel = relaxation.solve(inst, seconds, seed, deterministic=deterministic)
    if rel is None or rel.value is None:
        return rel, best
    for sequence in greedy.orders(inst):
        attempt = relaxation.disaggregate(inst, rel, sequence)
        report = checked(attempt) if attempt else None
        if report is None:
            continue
        if best is None or report.objective < best.report.objective:
            best = Result("feasible", attempt, report, "relaxation",
                          first_solution=best.first_solution if best else elapsed())
        if report.objective <= rel.value:
            break  # the counts are met exactly: other orders cannot do better
    return rel, best


def _cp(inst, cands, hint, clock, start, time_limit, seed, workers, deterministic,
        at_least=float("-inf")):
    """CP-SAT over ``cands``; ``at_least``: a lower bound on the objective known to hold for
    every placement (from the relaxation), added as a constraint so that the search stops when
    it reaches it."""
    model = Model(inst, cands)
    if hint:
        model.hint(hint)
    if at_least > float("-inf"):
        model.m.Add(model.objective >= int(at_least))
    solver = new_solver(seed, workers)
    if sum(len(c) for c in cands) <= LARGE_MODEL:
        solver.parameters.interleave_search = True  # parallel, yet repeatable for one seed
    else:  # measured: interleaving and probing delay the first solution by 10-20 s here
        solver.parameters.cp_model_probing_level = 0
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


def _infeasible(req, inst, start, clock, time_limit, seed, by):
    """Explain, with the policies that emptied a component's providers when that is the cause."""
    for c, elig in enumerate(inst.eligible):
        if not elig and c in inst.emptied_by:
            labels = [req.policies[i].label for i in inst.emptied_by[c]]
            return _finish(Result(
                "infeasible", {}, None, by, conflicts=sorted(inst.emptied_by[c]),
                reason="component %s: no provider satisfies %s" % (
                    req.components[c].name, "; ".join(labels))), start, clock)
    # the providers each component fits on its own, before any policy filtered them
    base = dataclasses.replace(inst, eligible=list(inst.base_eligible), emptied_by={})
    left = max(0.5, time_limit - (clock() - start))
    why = conflicts.explain(base, left, clock, seed)
    result = Result("infeasible", {}, None, by, conflicts=why.conflicts, reason=why.reason,
                    proven=True)
    return _finish(result, start, clock)


def _finish(result: Result, start, clock) -> Result:
    result.seconds = clock() - start
    return result
