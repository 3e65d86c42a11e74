"""The hosts a portal manages: from ``--datacenter FILE`` (CONTRACT section 10), or one host,
``localhost``, when none is given. Hosts whose agent is ``local`` run on this machine, each
in its own directory, so a multi-host deployment is real on one machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cddlm.errors import BadArgument

DEFAULT_HOST = "localhost"


@dataclass(frozen=True)
class Host:
    name: str
    agent: str = "local"
    capacity: dict = field(default_factory=dict, hash=False, compare=False)
    workdir: str | None = None   # a local host's directory (default HOSTS_DIR/NAME)
    # the providers below the host (NUMA nodes, devices): name -> capacity, in document order
    providers: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def local(self) -> bool:
        return self.agent == "local"


@dataclass
class Hosts:
    hosts: dict[str, Host]
    datacenter: dict | None = None   # the file's data, for the placement engine

    @classmethod
    def default(cls) -> "Hosts":
        return cls({DEFAULT_HOST: Host(DEFAULT_HOST)})

    @classmethod
    def from_datacenter(cls, data: dict[str, Any]) -> "Hosts":
        levels = data.get("levels") or []
        host_level = "host" if "host" in levels else None
        found: dict[str, Host] = {}

        def visit(node: Any, depth: int) -> None:
            if depth > 64:
                raise BadArgument("datacenter location tree is nested deeper than 64 levels")
            if not isinstance(node, dict) or "name" not in node:
                raise BadArgument("every location node needs a name")
            is_host = "agent" in node or (host_level is not None and node.get("level") == host_level)
            if is_host:
                name = str(node["name"])
                if name in found:
                    raise BadArgument("host %s appears twice in the datacenter" % name)
                found[name] = Host(name, str(node.get("agent") or "local"),
                                   dict(node.get("capacity") or {}),
                                   str(node["workdir"]) if node.get("workdir") else None,
                                   _providers_below(node))
                return
            for child in node.get("children") or []:
                visit(child, depth + 1)

        roots = data.get("location")
        if roots is None:
            raise BadArgument("the datacenter has no location tree")
        for root in roots if isinstance(roots, list) else [roots]:
            visit(root, 0)
        if not found:
            raise BadArgument("the datacenter names no hosts (nodes with an agent or at level host)")
        return cls(found, data)

    def implicit_datacenter(self, dimensions: set[str] = frozenset()) -> dict:
        """The datacenter a portal without ``--datacenter`` stands for: its hosts at one level,
        with no capacity limit in any dimension a descriptor mentions, on one network (they
        all run on this machine: each reaches the others through loopback)."""
        resources = sorted(set(dimensions) | {"slots"})
        unbounded = {d: 1e15 for d in resources}
        return {"resources": resources, "levels": ["host"],
                "location": [{"name": h.name, "level": "host", "agent": h.agent,
                              "capacity": dict(unbounded)} for h in self.hosts.values()],
                "network": {"name": "loopback",
                            "children": [{"host": h.name} for h in self.hosts.values()]}}

    def __contains__(self, name: str) -> bool:
        return name in self.hosts

    def names(self) -> list[str]:
        return list(self.hosts)


def _providers_below(host: dict) -> dict:
    out, stack = {}, list(reversed(host.get("children") or []))
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("capacity"):
                out[str(node.get("name"))] = dict(node["capacity"])
            stack.extend(reversed(node.get("children") or []))
    return out
