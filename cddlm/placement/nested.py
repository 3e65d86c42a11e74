"""Demands a single provider cannot hold, split over one host's provider tree.

A component is placed on one provider (``datacenter``); but a demand may name resources that
no single provider has all of: ``{cpu: 2, gpu: 1}`` where the cpus are on NUMA nodes and the
gpu is a device below one of them. Such a demand is held the way Placement's unsuffixed
request group is (``candidates``): each resource from some provider of one host's tree, the
required traits found among the providers used, none of them with a forbidden trait.

Pure: the datacenter, the amounts already used (``{provider: {dimension: amount}}``) and the
demand in; the allocations out (``{provider: {dimension: amount}}``), fewest providers first.
"""

from __future__ import annotations

from cddlm.errors import PlacementError
from cddlm.placement.candidates import CandidateRequest, Group, allocation_candidates, load_providers
from cddlm.placement.datacenter import Datacenter

Allocation = dict[str, dict[str, float]]


def needs_split(dc: Datacenter, demand: dict) -> bool:
    """Whether no provider has every dimension the demand names (amounts aside)."""
    dims = {d for d, amount in demand.items() if amount}
    return bool(dims) and not any(dims <= set(dc.nodes[p].capacity) for p in dc.providers)


def subtree(dc: Datacenter, host: int) -> list[int]:
    out, stack = [], [host]
    while stack:
        i = stack.pop()
        out.append(i)
        stack.extend(dc.nodes[i].children)
    return out


def allocations(dc: Datacenter, host: int, demand: dict, used: dict, traits=(),
                forbidden=()) -> list[Allocation]:
    """Every way ``host``'s provider tree holds ``demand`` now, fewest providers first."""
    amounts = {d: _whole(a, "demand %s" % d) for d, a in demand.items() if a}
    raw = []
    for i in subtree(dc, host):
        node = dc.nodes[i]
        raw.append({"name": node.name,
                    "parent": dc.nodes[node.parent].name if i != host else None,
                    "traits": sorted(node.traits),
                    "inventory": {d: {"total": _whole(c, "capacity %s of %s" % (d, node.name))}
                                  for d, c in node.capacity.items()},
                    "used": {d: _whole(a, "use of %s" % node.name)
                             for d, a in (used.get(node.name) or {}).items()}})
    group = Group(resources=amounts, required=[frozenset([t]) for t in traits],
                  forbidden=set(forbidden))
    found = []
    for candidate in allocation_candidates(load_providers(raw), CandidateRequest({"": group})):
        alloc: Allocation = {}
        for provider, dim, amount in candidate.allocations:
            alloc.setdefault(provider, {})[dim] = float(amount)
        found.append(alloc)
    return sorted(found, key=lambda a: (len(a), sorted((p, sorted(d.items())) for p, d in a.items())))


def anchor(dc: Datacenter, providers) -> str:
    """The lowest node above (or at) every provider of an allocation: where it runs."""
    chains = [dc.ancestors(dc.by_name[p]) for p in providers]
    common = set(chains[0]).intersection(*chains[1:])
    return dc.nodes[next(i for i in chains[0] if i in common)].name


def _whole(amount: float, what: str) -> int:
    if float(amount) != int(amount):
        raise PlacementError("%s is %s: a demand split over nested providers takes whole "
                             "amounts" % (what, amount), [what])
    return int(amount)
