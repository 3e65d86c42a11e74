"""What a placement costs: the objective every method (greedy, CP-SAT, the benchmark's baseline)
is judged by, and the capacity other applications already hold. Part of the model, so the solver
and the verifier both use this one definition.

    objective = sum over soft policies of violations x weight units x SOFT_UNIT
              + sum over components of packing(component, provider)

``packing`` prefers providers that are already loaded (a linear consolidation proxy): the share
of the provider that was free before this request, averaged over the dimensions the component
asks for, scaled to 0..PACK_SCALE. Each component counts alike, so the best placement puts as
many components as it can where load already is and leaves empty hosts empty; a placement that
spends the last room of a loaded host on one big component, where several small ones would have
fitted, pays for it.
A weight of 1 costs 1000 x SOFT_UNIT = 10^7 per violation, more than the packing of a thousand
components, so soft policies come first.
"""

from __future__ import annotations

from cddlm.errors import BadArgument
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.values import number

PACK_SCALE = 10_000
SOFT_UNIT = PACK_SCALE


def weight_units(weight: float) -> int:
    return max(1, round(weight * 1000))


def load_used(used, dc: Datacenter) -> dict[int, dict[str, float]]:
    """``{provider: {dimension: amount}}`` held by other applications, checked."""
    out: dict[int, dict[str, float]] = {}
    if not used:
        return out
    if not isinstance(used, dict):
        raise BadArgument("used: expected a mapping {provider: {dimension: amount}}")
    for name, amounts in used.items():
        if name not in dc.by_name or not dc.node(name).capacity:
            raise BadArgument("used: %r is not a provider of the datacenter" % (name,))
        if not isinstance(amounts, dict):
            raise BadArgument("used: %s: expected a mapping {dimension: amount}" % name)
        for dim, amount in amounts.items():
            if dim not in dc.resources:
                raise BadArgument("used: %s: unknown dimension %r" % (name, dim))
            number(amount, "used: %s: %s" % (name, dim))
        out[dc.by_name[name]] = dict(amounts)
    return out


def load_used_bandwidth(used, dc: Datacenter) -> dict[int, float]:
    """``{network node: Mbit/s}`` already reserved on the edge above that node."""
    out: dict[int, float] = {}
    if not used:
        return out
    names = {n.name: n.index for n in dc.network.nodes} if dc.network else {}
    if not isinstance(used, dict):
        raise BadArgument("used_bandwidth: expected a mapping {network node: mbps}")
    for name, mbps in used.items():
        if name not in names:
            raise BadArgument("used_bandwidth: %r is not a network node" % (name,))
        out[names[name]] = number(mbps, "used_bandwidth: %s" % name)
    return out


def free_capacity(dc: Datacenter, used: dict[int, dict[str, float]], provider: int,
                  dim: str) -> float:
    cap = dc.nodes[provider].capacity.get(dim, 0.0)
    return max(0.0, cap - used.get(provider, {}).get(dim, 0.0))


def packing(dc: Datacenter, used: dict[int, dict[str, float]], demand: dict[str, float],
            provider: int) -> int:
    total, dims = 0.0, 0
    for dim, amount in demand.items():
        cap = dc.nodes[provider].capacity.get(dim, 0.0)
        if amount > 0 and cap > 0:
            total += free_capacity(dc, used, provider, dim) / cap
            dims += 1
    return round(PACK_SCALE * total / dims) if dims else 0
