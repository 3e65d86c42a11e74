"""Component states and the planner: from desired and observed state to work. Pure.

Component desired states: ``absent`` (created, nothing asked), ``deployed``, ``running``,
``stopped``. Observed states move through ``TRANSITIONS`` below; runners report events.

    pending ─deployed─▶ deployed ─starting─▶ starting ─running─▶ running ─completed─▶ completed
       │                   │  ▲                 │                  │
       │                   │  └───restart───────┴──────────────────┘  (restart policy on-failure)
       └──── failed (from any live state) ─── stopping ─stopped─▶ stopped (from any state)

A deploy may report a component further on than deployed (pending ─starting/running/completed─▶):
a host portal given its share to run as soon as it has it (``remote.py``'s early run) says what
it is doing with it. A component starting with no start queued (so reported) is started like a
deployed one: the start waits for it to run (a runner's start adopts what already runs).

``plan`` looks at one application's components and says which work items to queue (deploy,
start, stop) and which lifecycle events the application has reached (deployed, started,
failed, stopped). Containers (compound, sequence, parallel) are not enacted: their state is
derived from their children, and a ``sequence`` starts a child only once the previous one runs
(or, for a run-to-completion child, has completed successfully). A failed component fails its
parent unless it is ``optional``; a failure that reaches a root fails the application.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cddlm.application import lifecycle

PENDING, DEPLOYED, STARTING, RUNNING, COMPLETED, STOPPING, STOPPED, FAILED = (
    "pending", "deployed", "starting", "running", "completed", "stopping", "stopped", "failed")
CONTAINERS = frozenset({"compound", "sequence", "parallel"})

LIVE = (PENDING, DEPLOYED, STARTING, RUNNING, COMPLETED)
TRANSITIONS: dict[tuple[str, str], str] = {
    (PENDING, "deployed"): DEPLOYED,
    (PENDING, "starting"): STARTING,
    (PENDING, "running"): RUNNING,
    (PENDING, "completed"): COMPLETED,
    (DEPLOYED, "starting"): STARTING,
    (STARTING, "running"): RUNNING,
    (DEPLOYED, "running"): RUNNING,
    (RUNNING, "completed"): COMPLETED,
    (STARTING, "completed"): COMPLETED,
    (RUNNING, "restart"): DEPLOYED,
    (STARTING, "restart"): DEPLOYED,
    **{(s, "failed"): FAILED for s in LIVE},
    **{(s, "stopping"): STOPPING for s in LIVE + (FAILED,)},
    **{(s, "stopped"): STOPPED for s in LIVE + (FAILED, STOPPING, STOPPED)},
}

STARTED_OK = frozenset({RUNNING, COMPLETED})
DEPLOYED_OK = frozenset({DEPLOYED, STARTING, RUNNING, COMPLETED})
DOWN = frozenset({STOPPED, PENDING})
STARTABLE = frozenset({DEPLOYED, STARTING})     # a start is planned for these (none queued)


def component_next(observed: str, event: str) -> str | None:
    """The next observed state, or None when the event does not apply (stale report)."""
    return TRANSITIONS.get((observed, event))


@dataclass
class Node:
    path: str
    type: str
    observed: str
    optional: bool = False
    run_to_completion: bool = False
    children: list["Node"] = field(default_factory=list)

    @property
    def container(self) -> bool:
        return self.type in CONTAINERS


@dataclass
class Plan:
    work: list[tuple[str, str]] = field(default_factory=list)      # (path, action)
    mark_stopped: list[str] = field(default_factory=list)          # never deployed: just stop
    events: list[str] = field(default_factory=list)                # lifecycle events, in order
    failure: str | None = None                                     # path of the failing leaf
    derived: dict[str, str] = field(default_factory=dict)          # container path -> observed


def build_tree(rows: list[tuple[str, str, str | None, int, str, bool, bool]]) -> list[Node]:
    """Rows of (path, type, parent, position, observed, optional, run_to_completion)."""
    nodes = {r[0]: Node(r[0], r[1], r[4], r[5], r[6]) for r in rows}
    roots: list[tuple[int, Node]] = []
    ordered = sorted(rows, key=lambda r: r[3])
    for path, _t, parent, pos, *_ in ordered:
        if parent is None:
            roots.append((pos, nodes[path]))
        else:
            nodes[parent].children.append(nodes[path])
    return [n for _, n in sorted(roots, key=lambda x: x[0])]


def _leaves(nodes: list[Node]):
    for n in nodes:
        if n.container:
            yield from _leaves(n.children)
        else:
            yield n


def _failed(node: Node) -> Node | None:
    """The leaf whose failure makes ``node`` failed (ignoring optional children), if any."""
    if not node.container:
        return node if node.observed == FAILED else None
    for child in node.children:
        culprit = _failed(child)
        if culprit is not None and not child.optional:
            return culprit
    return None


def _settled_leaves(roots: list[Node]):
    """Leaves that count for progress: not below (or being) a failed optional component."""
    def walk(nodes: list[Node]):
        for n in nodes:
            if n.optional and _failed(n) is not None:
                continue
            if n.container:
                yield from walk(n.children)
            else:
                yield n
    yield from walk(roots)


def _derive(node: Node, out: dict[str, str]) -> str:
    if not node.container:
        return node.observed
    states = [_derive(c, out) for c in node.children]
    if _failed(node) is not None:
        value = FAILED
    elif not states or all(s == STOPPED for s in states):
        value = STOPPED if states else RUNNING
    elif all(s in STARTED_OK or (c.optional and s == FAILED) for s, c in zip(states, node.children)):
        value = COMPLETED if all(s == COMPLETED for s in states) else RUNNING
    elif all(s in DEPLOYED_OK or (c.optional and s == FAILED) for s, c in zip(states, node.children)):
        value = DEPLOYED if not any(s in (STARTING, RUNNING, COMPLETED) for s in states) else STARTING
    elif any(s == STOPPING for s in states):
        value = STOPPING
    else:
        value = PENDING
    out[node.path] = value
    return value


def _startable(nodes: list[Node], in_sequence: bool, out: list[Node]) -> bool:
    """Collect leaves that may start now; returns whether every node here has started OK."""
    all_ok = True
    for n in nodes:
        if n.optional and _failed(n) is not None:
            continue
        if n.container:
            ok = _startable(n.children, n.type == "sequence", out)
        else:
            if n.observed in STARTABLE:
                out.append(n)
            ok = n.observed == COMPLETED if n.run_to_completion else n.observed in STARTED_OK
        all_ok = all_ok and ok
        if in_sequence and not ok:
            break  # later siblings of a sequence wait for this one
    return all_ok


def plan(state: str, desired: str, roots: list[Node], queued: set[tuple[str, str]]) -> Plan:
    """What to do next for an application in lifecycle ``state`` with intent ``desired``."""
    p = Plan()
    for r in roots:
        _derive(r, p.derived)
    leaves = list(_leaves(roots))
    if state == lifecycle.TERMINATED:
        return p

    if desired == lifecycle.TERMINATED:
        for leaf in leaves:
            if leaf.observed == PENDING and (leaf.path, "deploy") not in queued:
                p.mark_stopped.append(leaf.path)
            elif leaf.observed not in DOWN and (leaf.path, "stop") not in queued:
                p.work.append((leaf.path, "stop"))
        if all(l.observed in DOWN or l.path in p.mark_stopped for l in leaves) \
                and not any(a == "deploy" for _, a in queued):
            p.events.append("stopped")
        return p

    culprit = next((c for c in (_failed(r) if not r.optional else None for r in roots) if c), None)
    if culprit is not None:
        p.failure = culprit.path
        if state != lifecycle.FAILED:
            p.events.append("failed")
        return p
    if state == lifecycle.FAILED:
        return p

    if desired in (lifecycle.INITIALIZED, lifecycle.RUNNING):
        for leaf in leaves:
            if leaf.observed == PENDING and (leaf.path, "deploy") not in queued:
                p.work.append((leaf.path, "deploy"))
    # the leaves that count: none when every leaf is below an optional component that failed
    # (then nothing holds the application back: it is deployed and runs, as an empty
    # container does, rather than waiting for ever for an event that cannot come)
    settled = list(_settled_leaves(roots))
    current = state
    if current == lifecycle.INSTANTIATED and all(l.observed in DEPLOYED_OK for l in settled):
        p.events.append("deployed")
        current = lifecycle.INITIALIZED
    if desired == lifecycle.RUNNING and current in (lifecycle.INITIALIZED, lifecycle.RUNNING):
        ready: list[Node] = []
        _startable(roots, False, ready)
        p.work.extend((n.path, "start") for n in ready if (n.path, "start") not in queued)
        if current == lifecycle.INITIALIZED and all(
                (l.observed == COMPLETED) if l.run_to_completion else (l.observed in STARTED_OK)
                for l in settled):
            p.events.append("started")
            current = lifecycle.RUNNING
        if current == lifecycle.RUNNING and settled and all(l.observed == COMPLETED for l in settled):
            p.events.append("stopped")  # every component ran to completion: a normal end
    return p
