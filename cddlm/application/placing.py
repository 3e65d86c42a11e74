"""Deciding the host of each placed component before anything is enacted.

Without a datacenter every component goes to the one local host (a ``host`` attribute must
then name it); a descriptor's policies are still solved, over that one host. With ``--datacenter`` the portal builds a placement request from the
descriptor's components, groups and policies plus the capacity other applications hold, and
asks the placement engine; no placement is a ``PlacementError`` naming the conflict, and the
hosts left out as marked down (down or unreachable), the likely cause when there are any.
"""

from __future__ import annotations

from cddlm.application.hosts import Hosts
from cddlm.errors import PlacementError
from cddlm.lang.library import placed_paths
from cddlm.lang.model import Deployment

NAMED_DOWN = 5       # hosts named in a refusal's "left out" list; the others are counted


class Placer:
    def __init__(self, hosts: Hosts, time_limit: float = 10.0):
        self.hosts = hosts
        self.time_limit = time_limit

    def place(self, deployment: Deployment, used: dict[str, dict[str, float]],
              down: set[str] = frozenset(), default_host: str | None = None
              ) -> tuple[dict[str, dict], dict | None]:
        """({component path: {"host", "provider"}} for every placed component, the audit of
        the placement's policies (None without a datacenter: there are no policies to audit)).
        ``default_host`` (create's ``hostname``) pins components that name no host of their own."""
        if default_host:
            for _, comp in placed_paths(deployment):
                comp.attributes.setdefault("host", default_host)
        unusable = set(down)
        if self.hosts.datacenter is not None:
            return self._solve(self.hosts.datacenter, deployment, used, unusable)
        if deployment.policies:
            # policies still apply on the one default host: a hard anti-collocation of two
            # components cannot hold there, and the caller must hear it
            dims = {d for _, c in placed_paths(deployment) for d in (c.attributes.get("demand") or {})}
            return self._solve(self.hosts.implicit_datacenter(dims), deployment, used, unusable)
        names = self.hosts.names()
        only = names[0] if len(names) == 1 else None
        out = {}
        for path, comp in placed_paths(deployment):
            host = comp.attributes.get("host") or only
            if host not in self.hosts:
                raise PlacementError("component %s asks for host %r, which this portal does not "
                                     "manage (hosts: %s)" % (path, host, ", ".join(names)),
                                     ["host pin of %s" % path])
            if host in down:
                raise PlacementError("component %s needs host %s, which is marked down" % (path, host),
                                     ["host %s is down" % host])
            out[path] = {"host": host, "provider": host}
        return out, None

    def _solve(self, datacenter: dict, deployment: Deployment, used: dict[str, dict[str, float]],
               down: set[str]) -> tuple[dict[str, dict], dict | None]:
        from cddlm.application import placement_bridge
        try:
            return placement_bridge.solve(datacenter, deployment, used, down, self.time_limit)
        except PlacementError as e:
            left_out = sorted(h for h in down if h in self.hosts)
            if not left_out:
                raise
            raise PlacementError("%s; hosts left out as down or unreachable: %s" % (
                e.message, _some(left_out, NAMED_DOWN)), e.conflicts) from None


def _some(names: list[str], limit: int) -> str:
    """``h1, h2 and 3 more``: the first ``limit`` names, the others counted."""
    shown = ", ".join(names[:limit])
    return shown + (" and %d more" % (len(names) - limit) if len(names) > limit else "")
