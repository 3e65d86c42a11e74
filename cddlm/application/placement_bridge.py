"""From a resolved ``Deployment`` and the portal's datacenter to a placement request, and
from the engine's answer back to hosts, with a ``PlacementError`` naming the conflict.

The request follows CONTRACT section 10: every placed component (process, file, probe) is a
request component named by its path, with its ``demand``, ``traits`` and
``forbidden_traits``; a ``host`` attribute pins it (``existing``); the descriptor's groups
become request groups (a container named as a member stands for its placed descendants) and
its policies are passed as they are. Hosts marked down carry a trait no component accepts.
"""

from __future__ import annotations

import copy
from typing import Any

from cddlm.errors import BadArgument, PlacementError
from cddlm.lang import library
from cddlm.lang.library import placed_paths
from cddlm.lang.model import Deployment
from cddlm.placement import api, nested

DOWN_TRAIT = "CDDLM_HOST_DOWN"
SPLIT_ROUNDS = 8     # placements tried when split components and others compete for a host


def request_for(deployment: Deployment) -> dict[str, Any]:
    components, existing = [], {}
    for path, comp in placed_paths(deployment):
        a = comp.attributes
        components.append({"name": path, "demand": dict(a.get("demand") or {}),
                           "traits": list(a.get("traits") or []),
                           "forbidden_traits": list(a.get("forbidden_traits") or []) + [DOWN_TRAIT]})
        if a.get("host"):
            existing[path] = a["host"]
    group_names = {g.name for g in deployment.groups}
    groups = []
    for g in deployment.groups:
        members: list[str] = []
        for m in g.members:
            expanded = [m] if m in group_names else library.placed_members(deployment, m)
            members.extend(x for x in expanded if x not in members)
        groups.append({"name": g.name, "members": members})
    request: dict[str, Any] = {"components": components, "groups": groups,
                               "policies": [p.to_json() for p in deployment.policies]}
    if existing:
        request["existing"] = existing
    return request


def datacenter_without(datacenter: dict, down: set[str]) -> dict:
    """A copy of the datacenter where every node of a down host carries ``DOWN_TRAIT``."""
    if not down:
        return datacenter
    data = copy.deepcopy(datacenter)

    def mark(node: dict, inside: bool) -> None:
        inside = inside or node.get("name") in down
        if inside:
            node["traits"] = list(node.get("traits") or []) + [DOWN_TRAIT]
        for child in node.get("children") or []:
            mark(child, inside)

    roots = data.get("location")
    for root in roots if isinstance(roots, list) else [roots]:
        mark(root, False)
    return data


def solve(datacenter: dict, deployment: Deployment, used: dict, down: set[str],
          time_limit: float) -> tuple[dict[str, dict], dict | None]:
    """({component path: {host, provider, allocations}}, the placement's audit).

    A component whose demand no single provider can hold (``nested.needs_split``) is split
    over the provider tree of one host, as Placement's allocation candidates do: the solver
    places it, with its policies, on a host whose tree can hold it now (a trait marks those),
    then its allocation is chosen there with what the placement's other components take. A
    host where it no longer fits is ruled out for it and the placement solved again."""
    request = request_for(deployment)
    if not request["components"]:
        return {}, None
    marked = datacenter_without(datacenter, down)
    dc = api.load_datacenter(marked)
    split = {c["name"]: c for c in request["components"] if nested.needs_split(dc, c["demand"])}
    excluded: dict[str, set[int]] = {name: set() for name in split}
    for _ in range(SPLIT_ROUNDS):
        data, req_data = _with_split(marked, dc, request, split, used, down, excluded)
        result = _solve_once(data, req_data, used, time_limit)
        out, audit, dc_now = result
        misfits = _allocate(dc_now, out, split, used)
        if not misfits:
            return out, audit
        for name, host in misfits:
            excluded[name].add(host)
    raise PlacementError("no placement: the components split over nested providers (%s) did not "
                         "fit together after %d tries" % (", ".join(sorted(split)), SPLIT_ROUNDS),
                         ["nested providers of %s" % ", ".join(sorted(split))])


def _solve_once(data: dict, request: dict, used: dict, time_limit: float):
    dc = api.load_datacenter(data)
    try:
        req = api.load_request(request, dc)
    except BadArgument as e:   # a valid descriptor that asks what this datacenter cannot give
        raise PlacementError("the descriptor's placement does not fit this portal's datacenter: %s"
                             % e.message, [e.message]) from None
    result, audit = api.solve_audited(dc, req, time_limit=time_limit, used=used or None)
    answer = api.result_json(dc, req, result)
    if answer["status"] == "infeasible":
        # the reason names each conflicting policy by its label already: said once
        conflicts = [req.policies[i].label for i in answer["conflicts"]]
        raise PlacementError("no placement: %s" % (
            answer["reason"] or "no placement satisfies the hard policies"), conflicts)
    demand = {c["name"]: c["demand"] for c in request["components"]}
    out = {path: {"host": host, "provider": answer["providers"][path],
                  "allocations": {answer["providers"][path]: dict(demand[path])} if demand[path] else {}}
           for path, host in answer["assignment"].items()}
    audit.update(status=answer["status"], solver=answer["solver"])
    return out, audit, dc


def _with_split(marked: dict, dc, request: dict, split: dict, used: dict, down: set[str],
                excluded: dict[str, set[int]]) -> tuple[dict, dict]:
    """The datacenter and request the solver sees: each split component demands nothing
    itself and requires a trait that only the providers of the hosts able to hold it carry."""
    if not split:
        return marked, request
    data = copy.deepcopy(marked)
    nodes = {}

    def index(node: dict) -> None:
        nodes[node["name"]] = node
        for child in node.get("children") or []:
            index(child)

    roots = data.get("location")
    for root in roots if isinstance(roots, list) else [roots]:
        index(root)
    components = []
    for comp in request["components"]:
        name = comp["name"]
        if name not in split:
            components.append(comp)
            continue
        trait = "CDDLM_HOLDS_%d" % len(components)
        hosts = [h for h in dc.hosts if h not in excluded[name] and dc.nodes[h].name not in down
                 and nested.allocations(dc, h, comp["demand"], used, comp["traits"],
                                        comp["forbidden_traits"])]
        if not hosts:
            raise PlacementError("no placement: no host's providers can hold the demand %s of %s%s"
                                 % (_amounts(comp["demand"]), name,
                                    " with traits %s" % ", ".join(comp["traits"]) if comp["traits"] else ""),
                                 ["demand of %s" % name])
        for h in hosts:
            for i in nested.subtree(dc, h):
                node = nodes[dc.nodes[i].name]
                node["traits"] = list(node.get("traits") or []) + [trait]
        components.append(dict(comp, demand={}, traits=[trait],
                               forbidden_traits=[DOWN_TRAIT]))
    return data, dict(request, components=components)


def _allocate(dc, out: dict[str, dict], split: dict, used: dict) -> list[tuple[str, int]]:
    """Choose the allocation of each split component on its host, after what the other
    components of this placement take; (component, host) of those that no longer fit."""
    taken = {p: dict(d) for p, d in (used or {}).items()}
    for path, where in out.items():
        if path not in split:
            for provider, amounts in where["allocations"].items():
                _add(taken, provider, amounts)
    misfits = []
    for path in sorted(split):
        comp, host = split[path], dc.by_name[out[path]["host"]]
        found = nested.allocations(dc, host, comp["demand"], taken, comp["traits"],
                                   comp["forbidden_traits"])
        if not found:
            misfits.append((path, host))
            continue
        allocation = found[0]
        for provider, amounts in allocation.items():
            _add(taken, provider, amounts)
        out[path].update(provider=nested.anchor(dc, allocation), allocations=allocation)
    return misfits


def _add(taken: dict, provider: str, amounts: dict) -> None:
    slot = taken.setdefault(provider, {})
    for dim, amount in amounts.items():
        slot[dim] = slot.get(dim, 0.0) + float(amount)


def _amounts(demand: dict) -> str:
    return "{%s}" % ", ".join("%s: %g" % kv for kv in sorted(demand.items()))
