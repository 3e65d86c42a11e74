"""A Nova-style scheduler as the benchmark's baseline: one instance at a time, in request order;
filters, then weighers, then the best host (host_subset_size = 1), no look-ahead and no going
back (as nova/scheduler/manager.py ``_schedule`` does for a multi-create). Like Nova, it sees
at most MAX_PLACEMENT_RESULTS hosts per instance, the first ones Placement returns (here: in
datacenter order, which is how a database returns them).

Filters: capacity and traits (ComputeFilter, ImagePropertiesFilter / traits), the hard policies
checked against the instances already placed (ServerGroupAffinityFilter and
ServerGroupAntiAffinityFilter, generalised to scopes, llmn, hop-limit and bandwidth).
Weighers, each normalised to 0..1 over the hosts that passed (as nova/weights.py does) and
summed with multiplier 1.0: a stacking RAM/CPU weigher that scores the engine's packing cost
(negative multiplier: fuller hosts first) and the soft-(anti-)affinity weigher (fewer soft
violations with the members already placed).
"""

from __future__ import annotations

from cddlm.placement import eligibility
from cddlm.placement.greedy import State


MAX_PLACEMENT_RESULTS = 1000  # nova.conf [scheduler] max_placement_results


def _normalise(values: list[float]) -> list[float]:
    lo, hi = min(values), max(values)
    return [0.0 if hi == lo else (v - lo) / (hi - lo) for v in values]


def schedule(dc, req, used, used_bandwidth=None) -> dict[int, int] | None:
    """{component: provider}, or None when some instance finds no valid host (NoValidHost)."""
    inst = eligibility.build(dc, req, used, used_bandwidth, arcs=False)
    state = State(inst, lookahead=False)
    for c in range(len(req.components)):
        returned = sorted(inst.eligible[c])[:MAX_PLACEMENT_RESULTS]
        passed = [p for p in returned if state.allowed(c, p)]
        if not passed:
            return None
        packing = _normalise([inst.cost[c][p] for p in passed])
        soft = _normalise([state.penalty(c, p) for p in passed])
        weights = [-a - b for a, b in zip(packing, soft)]
        best = max(range(len(passed)), key=lambda i: (weights[i], -passed[i]))
        state.place(c, passed[best])
    return state.where
