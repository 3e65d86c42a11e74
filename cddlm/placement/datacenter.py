"""The datacenter meta-model (CONTRACT section 10, Heat policy extension): a location tree whose
vertices carry a level, capacity vectors and traits; an optional network tree over the same hosts
with a bandwidth per edge; optional named scopes (Nova host aggregates) partitioning the hosts.

Providers and hosts. A node with a non-empty ``capacity`` is a *provider*: a component is placed
on exactly one provider. The provider's *host* is its nearest ancestor-or-self that is marked as a
host (it has an ``agent``, or its level is the datacenter's ``host_level``, default ``host``); a
provider with no marked host at or above it is its own host. Hosts never nest.

Partitions. Policies speak of "the vertex a member occupies" at a location level or in a scope.
``Datacenter.partition(kind, name)`` maps every provider to that vertex: at a level, the
ancestor-or-self at that level, else the provider's host (a tree need not be of uniform depth, and
a host without a rack is a rack of its own); in a scope, the aggregate holding the host, else the
host itself (as the implicit ``host`` scope does for every host).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cddlm.errors import BadArgument
from cddlm.placement.network import Network, load_network
from cddlm.placement.scopes import Scope, load_scopes
from cddlm.placement.values import check_keys, check_name, number, string_list

# workdir: a host's directory (its runner's business: application/hosts.py)
NODE_KEYS = ("name", "level", "children", "capacity", "traits", "agent", "workdir")
DC_KEYS = ("resources", "levels", "location", "network", "scopes", "host_level")


@dataclass
class Node:
    index: int
    name: str
    level: str
    parent: int | None
    capacity: dict[str, float]
    traits: frozenset[str]
    agent: str | None
    children: list[int] = field(default_factory=list)
    host: int = -1  # index of the host node above (or at) this node; -1 when none


@dataclass
class Partition:
    """Vertex of every provider at one level or scope: ``vertex[provider] -> vertex number``."""

    kind: str  # "level" or "scope"
    name: str
    names: list[str]  # vertex number -> identifier (node, aggregate or host name)
    of: dict[int, int]  # provider node index -> vertex number


@dataclass
class Datacenter:
    resources: tuple[str, ...]
    levels: tuple[str, ...]
    host_level: str
    nodes: list[Node]
    by_name: dict[str, int]
    providers: list[int]  # node indices with capacity, in document order
    hosts: list[int]  # node indices that run components, in document order
    network: Network | None
    scopes: dict[str, Scope]
    _partitions: dict[tuple[str, str], Partition] = field(default_factory=dict, repr=False)

    def node(self, name: str) -> Node:
        return self.nodes[self.by_name[name]]

    def host_name(self, node_index: int) -> str:
        return self.nodes[self.nodes[node_index].host].name

    def providers_under(self, node_index: int) -> list[int]:
        """Providers at or below a node (a host's own provider trees)."""
        out, stack = [], [node_index]
        while stack:
            i = stack.pop()
            if self.nodes[i].capacity:
                out.append(i)
            stack.extend(reversed(self.nodes[i].children))
        return sorted(out)

    def ancestors(self, node_index: int) -> list[int]:
        """The node and its ancestors, nearest first."""
        out = []
        i: int | None = node_index
        while i is not None:
            out.append(i)
            i = self.nodes[i].parent
        return out

    def partition(self, kind: str, name: str) -> Partition:
        key = (kind, name)
        if key not in self._partitions:
            self._partitions[key] = self._build_partition(kind, name)
        return self._partitions[key]

    def vertex_name(self, partition: tuple[str, str], provider: int) -> str:
        """The identifier of the vertex holding ``provider`` in a (kind, name) partition."""
        part = self.partition(*partition)
        return part.names[part.of[provider]]

    def _build_partition(self, kind: str, name: str) -> Partition:
        names: list[str] = []
        number_of: dict[str, int] = {}
        of: dict[int, int] = {}
        for p in self.providers:
            if kind == "level":
                vertex = next((self.nodes[a].name for a in self.ancestors(p)
                               if self.nodes[a].level == name), self.host_name(p))
            elif name == "host":
                vertex = self.host_name(p)
            else:
                host = self.host_name(p)
                vertex = self.scopes[name].aggregate_of.get(host, host)
            if vertex not in number_of:
                number_of[vertex] = len(names)
                names.append(vertex)
            of[p] = number_of[vertex]
        return Partition(kind, name, names, of)


def load_datacenter(data: dict) -> Datacenter:
    """A ``Datacenter`` from the plain data of a datacenter file; ``BadArgument`` when invalid."""
    if not isinstance(data, dict):
        raise BadArgument("datacenter: expected a mapping, got %s" % type(data).__name__)
    check_keys(data, DC_KEYS, "datacenter")
    resources = tuple(string_list(data.get("resources", []), "datacenter: resources"))
    levels = tuple(string_list(data.get("levels", []), "datacenter: levels"))
    for what, names in (("resource", resources), ("level", levels)):
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise BadArgument("datacenter: duplicate %s %s" % (what, ", ".join(dup)))
    host_level = data.get("host_level", "host")
    if not isinstance(host_level, str):
        raise BadArgument("datacenter: host_level must be a level name")
    if "host_level" in data and host_level not in levels:
        raise BadArgument("datacenter: host_level %r is not one of the levels %s"
                          % (host_level, list(levels)))
    roots = data.get("location")
    if roots is None:
        raise BadArgument("datacenter: location (the location tree) is missing")
    roots = roots if isinstance(roots, list) else [roots]
    nodes: list[Node] = []
    by_name: dict[str, int] = {}
    for root in roots:
        _load_node(root, None, "datacenter: location", resources, levels, nodes, by_name)
    _assign_hosts(nodes, host_level)
    providers = [n.index for n in nodes if n.capacity]
    hosts = sorted({n.host for n in nodes if n.host >= 0})
    if not providers:
        raise BadArgument("datacenter: no location node has a capacity, so nothing can be placed")
    host_names = {nodes[h].name for h in hosts}
    network = load_network(data["network"], host_names) if data.get("network") is not None else None
    scopes = load_scopes(data.get("scopes") or {}, host_names, set(levels))
    return Datacenter(resources, levels, host_level, nodes, by_name, providers, hosts,
                      network, scopes)


def _load_node(raw, parent: int | None, where: str, resources, levels, nodes, by_name) -> None:
    # Iterative, so that deep or wide trees never hit the recursion limit.
    stack = [(raw, parent, where)]
    while stack:
        raw, parent, where = stack.pop()
        if not isinstance(raw, dict):
            raise BadArgument("%s: a node must be a mapping, got %r" % (where, raw))
        name = check_name(raw.get("name"), where + ": node name")
        where = "%s: node %s" % (where.split(": node ")[0], name)
        check_keys(raw, NODE_KEYS, where)
        if name in by_name:
            raise BadArgument("datacenter: duplicate location node name %r" % name)
        level = raw.get("level")
        if level not in levels:
            raise BadArgument("%s: unknown level %r (levels are %s)" % (where, level, ", ".join(levels)))
        if parent is not None:
            above = nodes[parent].level
            if levels.index(level) <= levels.index(above):
                raise BadArgument("%s: level %s is not finer than its parent's level %s"
                                  % (where, level, above))
        if raw.get("capacity") is not None and not isinstance(raw.get("capacity"), dict):
            raise BadArgument("%s: capacity must be a mapping {dimension: amount}" % where)
        capacity = {}
        for dim, amount in (raw.get("capacity") or {}).items():
            if dim not in resources:
                raise BadArgument("%s: unknown dimension %r in capacity (resources are %s)"
                                  % (where, dim, ", ".join(resources)))
            capacity[dim] = number(amount, "%s: capacity %s" % (where, dim))
        agent = raw.get("agent")
        if agent is not None and (not isinstance(agent, str) or not agent):
            raise BadArgument("%s: agent must be 'local', a portal URL, ssh://USER@ADDRESS[:PORT] or "
                              "slurm:NODE" % where)
        node = Node(len(nodes), name, level, parent, capacity,
                    frozenset(string_list(raw.get("traits", []), where + ": traits")), agent)
        nodes.append(node)
        by_name[name] = node.index
        if parent is not None:
            nodes[parent].children.append(node.index)
        children = raw.get("children") or []
        if not isinstance(children, list):
            raise BadArgument("%s: children must be a list of nodes" % where)
        for child in reversed(children):
            stack.append((child, node.index, where))


def _assign_hosts(nodes: list[Node], host_level: str) -> None:
    for node in nodes:  # parents come before children in ``nodes``
        marked = node.agent is not None or node.level == host_level
        above = nodes[node.parent].host if node.parent is not None else -1
        if marked and above >= 0:
            raise BadArgument("datacenter: host %s lies below host %s; hosts cannot nest"
                              % (node.name, nodes[above].name))
        node.host = node.index if marked else above
    for node in nodes:  # unmarked providers: the topmost provider of their branch is the host
        if node.host < 0 and node.parent is not None and nodes[node.parent].host >= 0:
            node.host = nodes[node.parent].host
        elif node.host < 0 and node.capacity:
            node.host = node.index
