"""Plain regression tests for what the generated cases found (issue 17), each with the shrunk
example it was found with."""

from __future__ import annotations

import threading
import time

from lxml import etree

from cddlm.client import Portal, PortalFault
from tests.property.trees import EXITS_1, NATIVE, Node, Tree, descriptor


def test_initialize_leaves_the_callers_descriptor_alone_and_two_threads_may_send_it(live_portal):
    # found by test_operations: initialize sent twice at once with one element; zeep moved the
    # element into one envelope while the other was being built, and the portal got an empty body
    portal = Portal(live_portal().url)
    holder = etree.Element("holder")
    body = descriptor(Tree([Node("p0", "process")]))
    holder.append(body)
    for _ in range(5):
        app = portal.create()
        faults: list[str] = []
        gate = threading.Barrier(2)

        def send() -> None:
            gate.wait()
            try:
                app.initialize(NATIVE, body)
            except PortalFault as fault:
                faults.append(fault.fault)

        threads = [threading.Thread(target=send) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert faults == ["WrongStateFault"]       # one accepted, the other too late
        assert body.getparent() is holder and len(body) == 1
        app.terminate()


def test_an_application_whose_every_leaf_failed_optionally_runs(live_portal):
    # found by test_descriptors: the optional compound fails with its run-to-completion child,
    # no leaf counts any more, and the application stayed initialized for ever
    portal = Portal(live_portal().url)
    outer = Node("c0", "compound", optional=True, children=[
        Node("c0", "compound", optional=True), Node("f1", "file"),
        Node("p2", "process", behaviour=EXITS_1, oneshot=True)])
    app = portal.create()
    app.initialize(NATIVE, descriptor(Tree([outer])))
    app.run()
    assert app.wait_for("running", timeout=10) == "running"
    time.sleep(0.5)
    assert app.state() == "running"
    app.terminate()
    assert app.wait_for("terminated", timeout=10) == "terminated"


def test_a_tree_of_containers_with_no_leaf_settles_like_any_other(live_portal):
    # the issue's own example (and 3 of 12 random trees): a lone empty container, or containers
    # nested with nothing at the bottom, stayed instantiated for good; every container type alike
    portal = Portal(live_portal().url)
    trees = [Tree([Node("c0", kind)]) for kind in ("compound", "sequence", "parallel")]
    trees.append(Tree([Node("c0", "sequence", children=[
        Node("c0", "parallel", children=[Node("c0", "compound")]), Node("c1", "compound")])]))
    for tree in trees:
        app = portal.create()
        app.initialize(NATIVE, descriptor(tree))
        assert app.wait_for("initialized", timeout=10) == "initialized"
        app.run()
        assert app.wait_for("running", timeout=10) == "running"
        app.terminate()
        assert app.wait_for("terminated", timeout=10) == "terminated"
        app.destroy()
