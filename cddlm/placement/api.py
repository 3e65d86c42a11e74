"""The placement engine's entry points, for the portal and the command line.

Typed: ``load_datacenter(dict)``, ``load_request(dict, datacenter)``, ``solve(dc, req, ...)``
(a ``solver.Result``), ``audit(dc, req, assignment)``, ``solve_audited(dc, req, ...)`` (both at
once). Plain data: ``solve_json`` returns the CONTRACT section 10 result, ``audit_json`` the
audit. ``used`` is the capacity other applications hold, ``{provider: {dimension: amount}}``;
``used_bandwidth`` the bandwidth they reserve, ``{network node: Mbit/s}`` for the edge above
that node.

Every answer is re-checked by the independent verifier here, whatever the solver says: an answer
the verifier rejects is never returned as a placement.
"""

from __future__ import annotations

import time

from cddlm.placement import audit as audit_module
from cddlm.placement import solver
from cddlm.placement.costs import load_used, load_used_bandwidth
from cddlm.placement.datacenter import Datacenter
from cddlm.placement.datacenter import load_datacenter as _load_datacenter
from cddlm.placement.request import Request
from cddlm.placement.request import load_request as _load_request
from cddlm.placement.verifier import Report, verify
from cddlm.errors import BadArgument


def load_datacenter(data: dict) -> Datacenter:
    return _load_datacenter(data)


def load_request(data: dict, dc: Datacenter) -> Request:
    return _load_request(data, dc)


def solve(dc: Datacenter, req: Request, *, time_limit: float = 10.0, seed: int = 0,
          used: dict | None = None, used_bandwidth: dict | None = None, workers: int = 2,
          deterministic: bool = False, clock=time.perf_counter) -> solver.Result:
    return _solve_verified(dc, req, time_limit=time_limit, seed=seed, used=used,
                           used_bandwidth=used_bandwidth, workers=workers,
                           deterministic=deterministic, clock=clock)[0]


def solve_audited(dc: Datacenter, req: Request, *, time_limit: float = 10.0, seed: int = 0,
                  used: dict | None = None, used_bandwidth: dict | None = None,
                  salt: str = "") -> tuple[solver.Result, dict | None]:
    """``solve``, and the audit of its placement (None when there is none), from the one
    verification of the answer."""
    result, report = _solve_verified(dc, req, time_limit=time_limit, seed=seed, used=used,
                                     used_bandwidth=used_bandwidth)
    if report is None:
        return result, None
    return result, audit_module.audit(dc, req, result.placement, salt=salt, report=report)


def _solve_verified(dc: Datacenter, req: Request, *, time_limit, seed, used, used_bandwidth,
                    workers: int = 2, deterministic: bool = False, clock=time.perf_counter
                    ) -> tuple[solver.Result, Report | None]:
    """(the result, the independent verifier's report on its placement; None when infeasible)."""
    if not isinstance(time_limit, (int, float)) or time_limit <= 0:
        raise BadArgument("time limit must be a positive number of seconds, got %r"
                          % (time_limit,))
    used_ = load_used(used, dc)
    used_bw = load_used_bandwidth(used_bandwidth, dc)
    result = solver.solve(dc, req, clock=clock, time_limit=float(time_limit), seed=seed,
                          used=used_, used_bandwidth=used_bw, workers=workers,
                          deterministic=deterministic)
    if result.status == "infeasible":
        return result, None
    report = verify(dc, req, result.placement, used_, used_bw)
    if not report.ok:  # never hand out a placement the verifier rejects
        return solver.Result("infeasible", {}, None, result.solver, proven=False,
                             reason="internal error: the verifier rejected the answer: "
                                    + "; ".join(report.errors), seconds=result.seconds), None
    return result, report


def result_json(dc: Datacenter, req: Request, result: solver.Result) -> dict:
    names = [c.name for c in req.components]
    out = {
        "status": result.status,
        "assignment": {names[c]: dc.host_name(p) for c, p in sorted(result.placement.items())},
        "providers": {names[c]: dc.nodes[p].name for c, p in sorted(result.placement.items())},
        "violations": [],
        "conflicts": list(result.conflicts),
        "objective": result.objective,
        "seconds": round(result.seconds, 3),
        "solver": result.solver,
    }
    if result.report is not None:
        out["violations"] = audit_module.soft_violations_json(result.report, names)
    if result.bound is not None:
        out["bound"] = result.bound
        out["bound_by"] = result.bound_by
    if result.status == "infeasible":
        out["reason"] = result.reason
        out["proven"] = result.proven
    return out


def solve_json(datacenter: dict, request: dict, time_limit: float = 10.0, seed: int = 0,
               used: dict | None = None, used_bandwidth: dict | None = None) -> dict:
    dc = load_datacenter(datacenter)
    req = load_request(request, dc)
    result = solve(dc, req, time_limit=time_limit, seed=seed, used=used,
                   used_bandwidth=used_bandwidth)
    return result_json(dc, req, result)


def audit(dc: Datacenter, req: Request, assignment: dict, used: dict | None = None,
          used_bandwidth: dict | None = None, salt: str = "") -> dict:
    """``assignment``: {component: provider name, or host name when the host is its own only
    provider} (the ``providers`` of a solve result)."""
    placement = audit_module.resolve_assignment(dc, req, assignment)
    missing = [c.name for c in req.components if c.index not in placement]
    if missing:
        raise BadArgument("assignment: no place given for %s" % ", ".join(missing))
    return audit_module.audit(dc, req, placement, load_used(used, dc),
                              load_used_bandwidth(used_bandwidth, dc), salt)


def audit_json(datacenter: dict, request: dict, assignment: dict, used: dict | None = None,
               used_bandwidth: dict | None = None, salt: str = "") -> dict:
    dc = load_datacenter(datacenter)
    return audit(dc, load_request(request, dc), assignment, used, used_bandwidth, salt)
