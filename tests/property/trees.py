"""Generated native descriptors and what each must do, for the property tests (issue 17).

``trees()`` is a hypothesis strategy of component trees as users could write them: containers
(``compound``, ``sequence``, ``parallel``, empty ones included, nested up to four deep) over
leaves that are ``process``es (sleeping, exiting 0, exiting non-zero, run to completion, with
and without a readiness check or a restart policy) and ``file``s, some ``optional``, some
taking a sibling's runtime value through a lazy reference.

``expect(tree)`` is the model: the state the application must settle in after ``initialize``
and ``run`` (or the fault ``initialize`` must answer), derived from docs/components.md's rules without
looking at the portal's planner:

- a process that exits non-zero fails; one that exits 0 fails unless it runs to completion
  (a process that dies while the application should run is a failure); a restart policy
  only delays that;
- a failing component fails its parent unless it is optional; a failure that reaches a root
  fails the application;
- a sequence starts a child only once the previous one runs (or completed); a failure stops
  it, so later children never start (they cannot change the outcome: the application fails);
- with no failure, the application runs, or terminates normally when every leaf that counts
  ran to completion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st
from lxml import etree

NATIVE = "urn:cddlm:lang:components:1"
CONTAINERS = ("compound", "sequence", "parallel")
# how a process leaf behaves
SLEEPS, EXITS_0, EXITS_1 = "sleeps", "exits-0", "exits-1"


@dataclass
class Node:
    name: str
    type: str                                   # a container type, "process" or "file"
    children: list["Node"] = field(default_factory=list)
    behaviour: str = SLEEPS                     # processes
    oneshot: bool = False                       # run_to_completion
    readiness: str | None = None                # None, "file" or "log" (sleeping processes)
    restart: bool = False                       # on-failure, limit 1 (failing processes)
    optional: bool = False
    peer: str | None = None                     # a sleeping sibling whose pid it reads lazily

    @property
    def container(self) -> bool:
        return self.type in CONTAINERS

    def leaves(self):
        if self.container:
            for c in self.children:
                yield from c.leaves()
        else:
            yield self

    def describe(self, depth: int = 0) -> str:
        """One line per node, for a readable failure report."""
        flags = [f for f, on in (("optional", self.optional), ("run_to_completion", self.oneshot),
                                 ("restart", self.restart)) if on]
        if self.readiness:
            flags.append("readiness=" + self.readiness)
        if self.peer:
            flags.append("peer=" + self.peer)
        what = self.type if self.type != "process" else "process " + self.behaviour
        line = "  " * depth + "%s: %s %s" % (self.name, what, " ".join(flags))
        return "\n".join([line.rstrip()] + [c.describe(depth + 1) for c in self.children])


@dataclass
class Tree:
    roots: list[Node]

    def leaves(self) -> list[Node]:
        return [leaf for r in self.roots for leaf in r.leaves()]

    def describe(self) -> str:
        return "\n".join(r.describe() for r in self.roots)

    def __repr__(self) -> str:
        return "Tree(\n%s\n)" % self.describe()

    def _repr_pretty_(self, printer, cycle) -> None:   # how hypothesis prints a falsifying example
        printer.text(repr(self))


# -- the strategy ---------------------------------------------------------------------------------
PREFIX = {"process": "p", "file": "f", "compound": "c", "sequence": "s", "parallel": "l"}


def _leaf(draw) -> Node:
    if draw(st.integers(0, 7)) == 0:
        return Node("", "file", optional=draw(st.booleans()))
    behaviour = draw(st.sampled_from((SLEEPS, SLEEPS, EXITS_0, EXITS_1)))
    # a run-to-completion process that never ends would keep its application waiting for ever,
    # which is what it asks for: not a defect to look for here
    oneshot = behaviour != SLEEPS and draw(st.booleans())
    readiness = draw(st.sampled_from((None, None, "file", "log"))) if behaviour == SLEEPS else None
    restart = behaviour != SLEEPS and not oneshot and draw(st.integers(0, 3)) == 0
    return Node("", "process", behaviour=behaviour, oneshot=oneshot, readiness=readiness,
                restart=restart, optional=draw(st.integers(0, 4)) == 0)


def _node(draw, depth: int) -> Node:
    if depth < 4 and draw(st.integers(0, 2)) == 0:
        kind = draw(st.sampled_from(CONTAINERS))
        children = [_node(draw, depth + 1) for _ in range(draw(st.integers(0, 3)))]
        return Node("", kind, children, optional=draw(st.integers(0, 4)) == 0)
    return _leaf(draw)


def _name_and_link(kind: str, nodes: list[Node], draw) -> None:
    """Name siblings uniquely, then let some process children read a sleeping sibling's pid
    through a lazy reference: any sibling in a compound or parallel, only an earlier one in a
    sequence (a later one would start only after the reader runs, which waits for it: a
    descriptor that asks to wait for ever)."""
    for i, n in enumerate(nodes):
        n.name = "%s%d" % (PREFIX[n.type], i)
    for i, n in enumerate(nodes):
        if n.container:
            _name_and_link(n.type, n.children, draw)
        elif n.type == "process" and draw(st.integers(0, 3)) == 0:
            peers = [c for j, c in enumerate(nodes) if j != i and c.type == "process"
                     and c.behaviour == SLEEPS and not c.optional and (kind != "sequence" or j < i)]
            if peers:
                n.peer = draw(st.sampled_from(peers)).name


@st.composite
def trees(draw) -> Tree:
    roots = [_node(draw, 0) for _ in range(draw(st.integers(1, 4)))]
    _name_and_link("compound", roots, draw)
    return Tree(roots)


# -- the model ------------------------------------------------------------------------------------
def _fails(node: Node) -> bool:
    """Whether this subtree fails (optional children's failures do not count)."""
    if node.container:
        return any(_fails(c) and not c.optional for c in node.children)
    if node.type == "file":
        return False
    if node.behaviour == EXITS_1:
        return True
    return node.behaviour == EXITS_0 and not node.oneshot


def _counted_leaves(nodes: list[Node]):
    """Leaves that decide running versus completed: not in (or being) an optional subtree
    that failed."""
    for n in nodes:
        if n.optional and _fails(n):
            continue
        if n.container:
            yield from _counted_leaves(n.children)
        else:
            yield n


@dataclass(frozen=True)
class Expectation:
    refused: bool              # initialize answers a DescriptorFault
    state: str | None          # the state it settles in after run (when accepted)


def expect(tree: Tree, leafless: str) -> Expectation:
    """What the portal must do with ``tree``; ``leafless`` is the documented choice for a tree
    without a leaf: "refused" (a DescriptorFault at initialize) or "settles"."""
    if not tree.leaves():
        if leafless == "refused":
            return Expectation(True, None)
        return Expectation(False, "running")
    if any(_fails(r) and not r.optional for r in tree.roots):
        return Expectation(False, "failed")
    counted = list(_counted_leaves(tree.roots))
    if counted and all(l.type == "process" and l.oneshot for l in counted):
        return Expectation(False, "terminated")
    return Expectation(False, "running")


# -- the descriptor -------------------------------------------------------------------------------
def _attr(parent: etree._Element, name: str, value=None) -> etree._Element:
    el = etree.SubElement(parent, "{%s}attribute" % NATIVE, name=name)
    if isinstance(value, list):
        for v in value:
            etree.SubElement(el, "{%s}item" % NATIVE).text = v
    elif isinstance(value, dict):
        for k, v in value.items():
            etree.SubElement(el, "{%s}item" % NATIVE, name=k).text = v
    elif value is not None:
        el.text = value
    return el


def _script(node: Node) -> str:
    if node.behaviour == EXITS_0:
        return "sleep 0.2; exit 0"
    if node.behaviour == EXITS_1:
        return "sleep 0.2; echo failing >&2; exit 3"
    if node.readiness == "file":
        return "sleep 0.2; touch ready; exec sleep 600"
    if node.readiness == "log":
        return "sleep 0.2; echo up and READY; exec sleep 600"
    return "exec sleep 600"


def _component(parent: etree._Element, node: Node, path: str) -> None:
    el = etree.SubElement(parent, "{%s}component" % NATIVE, name=node.name, type=node.type)
    if node.optional:
        _attr(el, "optional", "true")
    if node.type == "file":
        _attr(el, "path", path.replace("/", "_") + ".txt")
        _attr(el, "content", "generated for %s\n" % path)
    elif node.type == "process":
        _attr(el, "argv", ["sh", "-c", _script(node)])
        if node.oneshot:
            _attr(el, "run_to_completion", "true")
        if node.readiness == "file":
            _attr(el, "readiness", {"file": "ready", "timeout": "20"})
        elif node.readiness == "log":
            _attr(el, "readiness", {"log": "READY$", "timeout": "20"})
        if node.restart:
            _attr(el, "restart", "on-failure")
            _attr(el, "restart_limit", "1")
        if node.peer:
            env = _attr(el, "env")
            item = etree.SubElement(env, "{%s}item" % NATIVE, name="PEER_PID")
            sibling = path.rpartition("/")[0]
            etree.SubElement(item, "{%s}ref" % NATIVE, path=(sibling + "/" if sibling else "")
                             + node.peer + "/pid", lazy="true")
    for child in node.children:
        _component(el, child, path + "/" + child.name)


def descriptor(tree: Tree) -> etree._Element:
    root = etree.Element("{%s}application" % NATIVE, nsmap={None: NATIVE})
    for node in tree.roots:
        _component(root, node, node.name)
    return root
