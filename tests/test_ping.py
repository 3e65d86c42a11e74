"""ext:ping answers an application's state with its components' health: the two must say the
same moment (``cddlm deploy``, ``run`` and ``terminate`` stop at the state and print the
health beside it)."""

from __future__ import annotations

from lxml import etree

from cddlm import ns
from cddlm.application.service import DescriptorInput
from tests.conftest import wait_state

SLEEPERS = (b'<application xmlns="urn:cddlm:lang:components:1">'
            b'<component name="a" type="process"><attribute name="argv"><item>sleep</item>'
            b'<item>300</item></attribute></component>'
            b'<component name="b" type="process"><attribute name="argv"><item>sleep</item>'
            b'<item>300</item></attribute></component></application>')


def test_a_ping_that_meets_a_terminate_answers_the_health_of_the_state_it_answers(portal, monkeypatch):
    """A terminate that ends while a ping looks at the components (the README's tour saw
    `hello: terminated (1 failed, 1 running)` once) is answered `terminated` with its
    components stopped, not with what they were a moment before."""
    svc = portal.service
    app, _ = svc.create("pinged", None, [], portal.url)
    svc.initialize(app.id, DescriptorInput(ns.NATIVE, body=etree.fromstring(SLEEPERS)), [], [])
    wait_state(portal, app.id, "initialized")
    svc.run(app.id)
    wait_state(portal, app.id, "running")
    look = svc.engine.check_app
    met = []

    def look_while_it_terminates(app_id):
        health = look(app_id)
        if not met:      # the first look, then the terminate ends before the state is read
            met.append([h["state"] for h in health])
            svc.terminate(app_id, "meets the ping")
            wait_state(portal, app_id, "terminated")
        return health

    monkeypatch.setattr(svc.engine, "check_app", look_while_it_terminates)
    answer = svc.ping(app.id)
    assert met == [["running", "running"]]
    assert answer.state == "terminated"
    assert [h["state"] for h in answer.health] == ["stopped", "stopped"]
