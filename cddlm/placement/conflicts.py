"""Why no placement exists: a small set of hard policies that cannot hold together.

The CP-SAT model is built over every provider each component could use on its own (capacity,
traits, existing placements: no policy filtering), with each hard policy made conditional on an
assumption literal. Solving under all assumptions gives an infeasible core
(``sufficient_assumptions_for_infeasibility``); deletion filtering then drops each policy whose
removal keeps the rest infeasible, within the time left, so the answer is minimal when time
allows (every policy in it is needed) and merely sufficient otherwise.

When even no policy at all leaves the problem infeasible (a component fits no provider, or the
capacities cannot hold the components with the existing placements), ``conflicts`` is empty and
the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from cddlm.placement import eligibility
from cddlm.placement.cpmodel import Model, new_solver


@dataclass
class Explanation:
    conflicts: list[int]
    reason: str
    minimal: bool


def explain(inst_base: eligibility.Instance, seconds: float, clock, seed: int = 0) -> Explanation:
    req = inst_base.req
    names = [c.name for c in req.components]
    for c, cands in enumerate(inst_base.eligible):
        if not cands:
            return Explanation([], "component %s fits no provider (capacity, traits or its "
                                   "existing placement)" % names[c], True)
    hard = [p.index for p in req.policies if p.hard]
    deadline = clock() + seconds
    model = Model(inst_base, inst_base.eligible, assumptions=set(hard), packing=False)
    literal_of = {lit.Index(): i for i, lit in model.literal.items()}

    def run(active: list[int]) -> str:
        left = deadline - clock()
        if left <= 0:
            return "unknown"
        model.m.ClearAssumptions()
        model.m.AddAssumptions([model.literal[i] for i in active if i in model.literal])
        solver = new_solver(seed)
        solver.parameters.max_time_in_seconds = max(0.05, left)
        status = solver.Solve(model.m)
        run.last = solver
        if status == cp_model.INFEASIBLE:
            return "infeasible"
        return "feasible" if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else "unknown"

    if run([]) == "infeasible":
        return Explanation([], "the capacities cannot hold the components together with their "
                               "existing placements, whatever the policies", True)
    outcome = run(hard)
    if outcome != "infeasible":
        return Explanation([], "no placement was found within the time limit, and none could "
                               "be shown impossible", False)
    core = sorted({literal_of[v] for v in run.last.SufficientAssumptionsForInfeasibility()
                   if v in literal_of}) or list(hard)
    minimal = True
    for i in list(core):
        trial = [j for j in core if j != i]
        outcome = run(trial)
        if outcome == "infeasible":
            core = trial
        elif outcome == "unknown":
            minimal = False
    labels = [req.policies[i].label for i in core]
    return Explanation(core, "these hard policies cannot hold together: " + "; ".join(labels),
                       minimal)
