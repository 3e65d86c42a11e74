"""A datacenter from a Slurm cluster (``--datacenter slurm:``). Pure: the nodes as ``sinfo
--json`` lists them and the switches as ``scontrol show topology`` prints them in, the plain
data of a datacenter file out (CONTRACT section 10).

- Each node is a host (level ``host``, agent ``slurm:NODE``) with its CPUs and memory (MiB) as
  capacity in the dimensions ``cpu`` and ``memory``, and its features as traits.
- The switches of ``topology.conf`` are location levels ``switch0`` (Slurm's leaf switches,
  ``Level=0``), ``switch1`` and so on up, under one root of level ``cluster``; a node no switch
  names hangs from the root. They are the network tree too (a leaf per node), so hop limits and
  ``llmn`` see the cluster's fabric.
- Which nodes are down (state ``down``, or flagged ``NOT_RESPONDING``) and why is returned
  beside the datacenter: that is the host monitor's to mark, not a property of the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cddlm.errors import BadArgument

RESOURCES = ["cpu", "memory"]
DOWN_STATES = {"down"}
DOWN_FLAGS = {"NOT_RESPONDING"}
MAX_HOSTLIST = 100_000          # names one hostlist expression may stand for
_RANGE = re.compile(r"\[([^\[\]]*)\]")


def expand_hostlist(expr: str) -> list[str]:
    """``n[1-3,07],gpu1`` -> ``n1 n2 n3 n07 gpu1`` (Slurm's hostlist syntax; zero padding kept;
    several bracket groups in one name multiply). ``BadArgument`` for what is not one."""
    out: list[str] = []
    for item in _split_top(expr.strip()):
        names = [""]
        pos = 0
        for m in _RANGE.finditer(item):
            names = [n + item[pos:m.start()] for n in names]
            names = [n + part for n in names for part in _ranges(m.group(1), expr)]
            if len(names) > MAX_HOSTLIST:
                raise BadArgument("hostlist %r names more than %d hosts" % (expr[:80], MAX_HOSTLIST))
            pos = m.end()
        out.extend(n + item[pos:] for n in names)
        if len(out) > MAX_HOSTLIST:
            raise BadArgument("hostlist %r names more than %d hosts" % (expr[:80], MAX_HOSTLIST))
    if any(not n or "[" in n or "]" in n for n in out):
        raise BadArgument("%r is not a Slurm hostlist" % expr[:80])
    return out


def _split_top(expr: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(expr[start:i])
            start = i + 1
    items.append(expr[start:])
    return [i for i in items if i]


def _ranges(spec: str, expr: str) -> list[str]:
    out = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise BadArgument("%r is not a Slurm hostlist" % expr[:80])
        width = len(lo) if lo.startswith("0") else 0
        first, last = int(lo), int(hi or lo)
        if last < first or last - first > MAX_HOSTLIST:
            raise BadArgument("%r is not a Slurm hostlist (range %s)" % (expr[:80], part))
        out.extend(str(n).zfill(width) for n in range(first, last + 1))
    return out


@dataclass
class Switch:
    name: str
    level: int
    nodes: list[str] = field(default_factory=list)       # the nodes right below (leaf switch)
    switches: list[str] = field(default_factory=list)    # the switches right below


def parse_topology(text: str) -> list[Switch]:
    """The switches of ``scontrol show topology`` (``SwitchName=s1 Level=0 LinkSpeed=1
    Nodes=n[1-2]``, and ``Switches=`` on the upper ones; an upper switch's ``Nodes=`` lists
    every node below it, so only leaf switches' nodes are kept)."""
    found: list[Switch] = []
    for line in text.splitlines():
        pairs = dict(word.split("=", 1) for word in line.split() if "=" in word)
        if "SwitchName" not in pairs:
            continue
        try:
            level = int(pairs.get("Level", "0"))
        except ValueError:
            raise BadArgument("topology: switch %s has level %r" % (pairs["SwitchName"],
                                                                    pairs.get("Level"))) from None
        switches = expand_hostlist(pairs["Switches"]) if pairs.get("Switches") else []
        nodes = expand_hostlist(pairs["Nodes"]) if pairs.get("Nodes") and not switches else []
        found.append(Switch(pairs["SwitchName"], level, nodes, switches))
    return found


def node_down(node: dict) -> str | None:
    """Why a node (an entry of ``sinfo --json``) cannot run jobs now, or None when it can."""
    state = str(node.get("state") or "").lower()
    flags = {str(f).upper() for f in node.get("state_flags") or []}
    if state in DOWN_STATES or flags & DOWN_FLAGS:
        what = " ".join([state.upper()] + sorted(flags & DOWN_FLAGS)) if state in DOWN_STATES \
            else " ".join(sorted(flags & DOWN_FLAGS))
        reason = str(node.get("reason") or "").strip()
        return "node %s is %s%s" % (node.get("name"), what, ": " + reason if reason else "")
    return None


def datacenter(nodes: list[dict], switches: list[Switch], cluster: str = "slurm") -> dict:
    """The datacenter file's data for these nodes and switches."""
    hosts: dict[str, dict] = {}
    for n in nodes:
        name = str(n.get("name") or "")
        if not name or name in hosts:
            raise BadArgument("sinfo: a node without a name, or %r twice" % name)
        features = [f for f in str(n.get("active_features") or n.get("features") or "").split(",") if f]
        hosts[name] = {"name": name, "level": "host", "agent": "slurm:" + name,
                       "capacity": {"cpu": int(n.get("cpus") or 0),
                                    "memory": int(n.get("real_memory") or 0)},
                       "traits": sorted(set(features))}
    if not hosts:
        raise BadArgument("the Slurm cluster lists no nodes")
    by_name = {s.name: s for s in switches}
    clash = sorted((set(by_name) | {cluster}) & set(hosts))
    if clash:
        raise BadArgument("Slurm switch and node names must differ: %s" % ", ".join(clash))
    below = {c for s in switches for c in s.switches}
    missing = sorted(below - set(by_name))
    if missing:
        raise BadArgument("topology: switches %s are named but not described" % ", ".join(missing))
    levels = sorted({s.level for s in switches}, reverse=True)
    placed: set[str] = set()

    def location(s: Switch, depth: int) -> dict:
        if depth > 64:
            raise BadArgument("topology: switches nested deeper than 64 (a loop?)")
        kids = [location(by_name[c], depth + 1) for c in s.switches]
        for node in s.nodes:
            if node in hosts and node not in placed:
                placed.add(node)
                kids.append(hosts[node])
        return {"name": s.name, "level": "switch%d" % s.level, "children": kids}

    def network(s: Switch) -> dict:
        kids = [network(by_name[c]) for c in s.switches]
        kids += [{"host": node} for node in s.nodes if node in hosts]
        return {"name": s.name, "children": kids}

    tops = [s for s in switches if s.name not in below]
    tree = [location(s, 0) for s in tops]
    loose = [h for name, h in hosts.items() if name not in placed]
    net_loose = [{"host": name} for name in hosts if name not in placed]
    return {"resources": list(RESOURCES),
            "levels": ["cluster"] + ["switch%d" % lv for lv in levels] + ["host"],
            "location": {"name": cluster, "level": "cluster", "children": tree + loose},
            "network": {"name": cluster, "children": [network(s) for s in tops] + net_loose}}
