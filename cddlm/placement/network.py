"""The network tree (Heat policy extension): an approximation of connectivity over the same hosts
as the location tree. Each node but a root has the bandwidth (Mbit/s) of the edge to its parent;
leaves name a host (``host: NAME``). The path between two hosts is the tree path; its length in
edges is the hop count (0 for one host), and a bandwidth reservation between two components loads
every edge of the path between their hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cddlm.errors import BadArgument
from cddlm.placement.values import check_keys, check_name, number

NET_KEYS = ("name", "bandwidth", "children", "host")


@dataclass
class NetNode:
    index: int
    name: str
    parent: int | None
    bandwidth: float | None  # of the edge to the parent; None = unlimited (and for roots)
    depth: int
    host: str | None
    children: list[int] = field(default_factory=list)


@dataclass
class Network:
    nodes: list[NetNode]
    leaf_of: dict[str, int]  # host name -> leaf node index

    def path_edges(self, host_a: str, host_b: str) -> list[int] | None:
        """Edges (named by their lower node) between two hosts: none for one host (in the tree or
        not); None if either is not in the tree or they are in different trees."""
        if host_a == host_b:
            return []
        if host_a not in self.leaf_of or host_b not in self.leaf_of:
            return None
        a, b = self.leaf_of[host_a], self.leaf_of[host_b]
        edges = []
        while self.nodes[a].depth > self.nodes[b].depth:
            edges.append(a)
            a = self.nodes[a].parent
        while self.nodes[b].depth > self.nodes[a].depth:
            edges.append(b)
            b = self.nodes[b].parent
        while a != b:
            if self.nodes[a].parent is None:
                return None
            edges += [a, b]
            a, b = self.nodes[a].parent, self.nodes[b].parent
        return edges

    def hops(self, host_a: str, host_b: str) -> int | None:
        edges = self.path_edges(host_a, host_b)
        return None if edges is None else len(edges)

    def within(self, host: str, hops: int) -> set[str]:
        """Hosts at most ``hops`` edges from ``host`` (the host itself included)."""
        if host not in self.leaf_of:
            return {host}
        out: set[str] = set()
        up, node = 0, self.leaf_of[host]
        while node is not None and up <= hops:
            self._leaves_below(node, hops - up, out)
            node, up = self.nodes[node].parent, up + 1
        return out

    def _leaves_below(self, node: int, budget: int, out: set[str]) -> None:
        stack = [(node, budget)]
        while stack:
            n, left = stack.pop()
            if self.nodes[n].host is not None:
                out.add(self.nodes[n].host)
            if left > 0:
                stack.extend((c, left - 1) for c in self.nodes[n].children)

    def hosts_below(self, node: int) -> set[str]:
        out: set[str] = set()
        self._leaves_below(node, 1 << 30, out)
        return out


def load_network(raw, host_names: set[str]) -> Network:
    roots = raw if isinstance(raw, list) else [raw]
    nodes: list[NetNode] = []
    names: set[str] = set()
    leaf_of: dict[str, int] = {}
    stack = [(r, None) for r in reversed(roots)]
    while stack:
        item, parent = stack.pop()
        if not isinstance(item, dict):
            raise BadArgument("datacenter: network: a node must be a mapping, got %r" % (item,))
        host = item.get("host")
        if "name" in item or host is None:
            name = check_name(item.get("name"), "datacenter: network: node name")
        else:
            name = "host:%s" % host
        where = "datacenter: network: node %s" % name
        check_keys(item, NET_KEYS, where)
        if name in names:
            raise BadArgument("datacenter: network: duplicate node name %r" % name)
        names.add(name)
        bandwidth = item.get("bandwidth")
        if bandwidth is not None:
            bandwidth = number(bandwidth, where + ": bandwidth")
        children = item.get("children") or []
        if not isinstance(children, list):
            raise BadArgument("%s: children must be a list" % where)
        if host is not None:
            if host not in host_names:
                raise BadArgument("%s: host %r is not a host of the location tree" % (where, host))
            if host in leaf_of:
                raise BadArgument("datacenter: network: host %s appears twice" % host)
            if children:
                raise BadArgument("%s: a host leaf cannot have children" % where)
        depth = nodes[parent].depth + 1 if parent is not None else 0
        node = NetNode(len(nodes), name, parent, bandwidth, depth, host)
        nodes.append(node)
        if host is not None:
            leaf_of[host] = node.index
        if parent is not None:
            nodes[parent].children.append(node.index)
        stack.extend((c, node.index) for c in reversed(children))
    return Network(nodes, leaf_of)
