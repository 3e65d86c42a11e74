"""The audit of a placement (Nova scoped-policies spec, ``GET .../audit``): for each policy, the
vertex each member occupies at the policy's level or scope, and whether the policy is met (with
its violation count); plus the hard problems the verifier finds and the objective.

Identifiers follow the scope's configuration: real names for levels and plain scopes; for a scope
with ``obfuscate_identifiers``, the tenant's surrogate (two-pass uuid5); for a scope that does
not ``allow_identifiers``, a surrogate that is consistent within one audit and unrelated to the
real name (pass a fresh ``salt`` per call to make it ephemeral, as the spec asks).
"""

from __future__ import annotations

from cddlm.errors import BadArgument
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.identifiers import obfuscate, surrogate
from cddlm.placement.request import Request
from cddlm.placement.verifier import Report, verify


def resolve_assignment(dc: Datacenter, req: Request, assignment: dict) -> dict[int, int]:
    """{component name: provider or host name} -> {component index: provider node index}."""
    if not isinstance(assignment, dict):
        raise BadArgument("assignment: expected a mapping {component: provider or host}")
    out = {}
    for name, where in assignment.items():
        if name not in req.groups.component_index:
            raise BadArgument("assignment: %r is not a component of the request" % (name,))
        if not isinstance(where, str) or where not in dc.by_name:
            raise BadArgument("assignment: %s: %r is not a node of the datacenter" % (name, where))
        node = dc.node(where)
        if not node.capacity:
            below = dc.providers_under(node.index) if node.index in dc.hosts else []
            if len(below) != 1:
                raise BadArgument("assignment: %s: %s is not a provider%s" % (
                    name, where, "; name one of %s" % ", ".join(dc.nodes[p].name for p in below)
                    if below else ""))
            node = dc.nodes[below[0]]
        out[req.index(name)] = node.index
    return out


def identifier(dc: Datacenter, req: Request, partition: tuple[str, str], vertex: str,
               salt: str) -> str:
    kind, name = partition
    scope = dc.scopes.get(name) if kind == "scope" else None
    if scope is None:
        return vertex
    if not scope.allow_identifiers:
        return surrogate(salt, name, vertex)
    if scope.obfuscate_identifiers:
        return obfuscate(scope.namespace, req.tenant, vertex) if req.tenant is not None \
            else surrogate(salt, name, vertex)
    return vertex


def soft_violations_json(report: Report, names: list[str]) -> list[dict]:
    """The soft policies the placement violates, as the solve result and the audit give them."""
    return [{"index": e.policy.index, "type": e.policy.written,
             "members": [names[c] for c in e.bad], "count": e.violations}
            for e in report.soft_violations()]


def audit(dc: Datacenter, req: Request, placement: dict[int, int], used=None,
          used_bandwidth=None, salt: str = "", report: Report | None = None) -> dict:
    """``report``: the verifier's report on this very placement, when the caller has one."""
    if report is None:
        report = verify(dc, req, placement, used, used_bandwidth)
    names = [c.name for c in req.components]
    if report.evaluations == [] and report.errors:
        return {"ok": False, "hard_violations": report.errors, "policies": [],
                "violations": [], "objective": None}
    policies = []
    for ev in report.evaluations:
        pol = ev.policy
        entry = {"index": pol.index, "type": pol.written, "hard": pol.hard,
                 "met": ev.violations == 0, "violations": ev.violations,
                 "violated_members": [names[c] for c in ev.bad]}
        if not pol.hard:
            entry["weight"] = pol.weight
        if pol.name:
            entry["name"] = pol.name
        if pol.partition is not None:
            kind, pname = pol.partition
            entry[kind] = pname
            entry["members"] = {names[c]: identifier(dc, req, pol.partition,
                                                     dc.vertex_name(pol.partition, placement[c]),
                                                     salt)
                                for c in pol.members}
            if "target" in pol.params:
                entry["target"] = identifier(dc, req, pol.partition, pol.params["target"], salt)
        elif pol.type == "llmn":
            l1, l2 = ("level", pol.params["l1"]), ("level", pol.params["l2"])
            entry["members"] = {names[c]: {"l1": dc.vertex_name(l1, placement[c]),
                                           "l2": dc.vertex_name(l2, placement[c])}
                                for c in pol.members}
        else:
            entry["members"] = {names[c]: dc.host_name(placement[c]) for c in pol.members}
            if pol.type == "hop-limit":
                entry["pairs"] = [{"between": [names[a], names[b]],
                                   "hops": dc.network.hops(dc.host_name(placement[a]),
                                                           dc.host_name(placement[b]))}
                                  for a, b in pol.pairs]
        policies.append(entry)
    return {"ok": report.ok, "hard_violations": report.errors, "policies": policies,
            "violations": soft_violations_json(report, names),
            "objective": report.objective if report.ok else None}
