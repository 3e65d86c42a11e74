"""Every accepted descriptor settles (issue 17): generated component trees on a live portal.

For each generated tree (``trees.py``): create, initialize, run. Initialize either answers the
fault the model says (a tree without a leaf, if that is the documented choice) and changes
nothing, or is accepted; an accepted one settles within ``BOUND`` seconds in the state the
model derives from docs/components.md's rules, with the invariants of ``harness.py`` holding; then
terminate leaves no process behind, within the bound too.
"""

from __future__ import annotations

from hypothesis import given

from cddlm.client import PortalFault
from tests.property.harness import BOUND
from tests.property.trees import NATIVE, descriptor, expect, trees

# docs/components.md's choice for a tree whose containers hold no leaf (issue 17)
LEAFLESS = "settles"


@given(tree=trees())
def test_every_accepted_descriptor_settles_as_the_rules_say(put, tree):
    expected = expect(tree, LEAFLESS)
    app = put.portal.create()
    try:
        app.initialize(NATIVE, body=descriptor(tree))
    except PortalFault as fault:
        assert expected.refused, "initialize refused a tree the rules accept: %s" % fault
        assert fault.fault == "DescriptorFault", fault
        assert put.check(app.id) == ["instantiated"]
        assert app.state() == "instantiated"
        app.terminate()
        put.wait_settled(app.id, "terminated")
        app.destroy()
        return
    assert not expected.refused, "initialize accepted a tree without a leaf"
    app.run()
    # a failing process may let its application run for a moment first: hold "running" a while
    took = put.wait_settled(app.id, expected.state, hold=0.8 if expected.state == "running" else 0)
    seen = put.check(app.id)
    if expected.state == "failed":
        info = app.ping()["terminationInfo"]
        assert info is not None and not info["normal"] and info["component"], info
    app.terminate("property test")
    took_down = put.wait_settled(app.id, "terminated")
    put.check(app.id, seen)
    app.destroy()
    assert took < BOUND and took_down < BOUND
