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

from cddlm.application.placing import placed_paths
from cddlm.errors import BadArgument, PlacementError
from cddlm.lang import library
from cddlm.lang.model import Deployment
from cddlm.placement import api

DOWN_TRAIT = "CDDLM_HOST_DOWN"


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


def _describe(request: dict, index: int) -> str:
    p = request["policies"][index]
    target = p.get("group") or " and ".join(p.get("between") or []) or ", ".join(p.get("groups") or [])
    return "policy %d: %s%s%s" % (index, "" if p.get("hard", True) else "soft ", p["type"],
                                  " on " + target if target else "")


def solve(datacenter: dict, deployment: Deployment, used: dict, down: set[str],
          time_limit: float) -> tuple[dict[str, dict], dict | None]:
    """({component path: {host, provider}}, the placement's audit)."""
    request = request_for(deployment)
    if not request["components"]:
        return {}, None
    dc = api.load_datacenter(datacenter_without(datacenter, down))
    try:
        req = api.load_request(request, dc)
    except BadArgument as e:   # a valid descriptor that asks what this datacenter cannot give
        raise PlacementError("the descriptor's placement does not fit this portal's datacenter: %s"
                             % e.message, [e.message]) from None
    result, audit = api.solve_audited(dc, req, time_limit=time_limit, used=used or None)
    answer = api.result_json(dc, req, result)
    if answer["status"] == "infeasible":
        conflicts = [_describe(request, i) for i in answer["conflicts"]]
        reason = answer["reason"] or "no placement satisfies the hard policies"
        raise PlacementError("no placement: %s%s" % (
            reason, (" (conflicting: %s)" % "; ".join(conflicts)) if conflicts else ""), conflicts)
    out = {path: {"host": host, "provider": answer["providers"][path]}
           for path, host in answer["assignment"].items()}
    audit.update(status=answer["status"], solver=answer["solver"])
    return out, audit
