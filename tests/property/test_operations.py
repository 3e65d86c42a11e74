"""Random sequences of operations on a live portal keep every application legal (issue 17).

A ``RuleBasedStateMachine`` sends what clients could send, in any order: create, initialize
(generated trees), run, ping, terminate, destroy, ``wsrf-rl:Destroy`` of a view, lookup and
rebind to get a view back, the same operation twice at once from two clients, and a SIGKILL
of the portal followed by a restart. It keeps a model of each application (the last intent
accepted, the tree it was given, whether it is destroyed) and checks after every step:

- each answer is one the model allows: an operation the lifecycle table refuses answers
  ``WrongStateFault`` and changes nothing (intent, generation, descriptor), a destroyed
  application or view answers as one that does not exist;
- the invariants of ``harness.py`` (legal, growing history; gap-free events that say it; one
  session per component; nothing alive after termination, before or after a restart);
- every application is created with a subscription (``urn:cddlm:option:subscribe``), and its
  consumer receives exactly the history as lifecycle events, numbered from 1, through every
  restart;

and at the end that every application settles within the bound where its intent says:
``instantiated`` if never initialized, ``initialized`` (or the tree's failure) if never run,
the tree's state when run, ``terminated`` when terminated.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from cddlm.client import Application, Listener, PortalFault
from tests.property.harness import BOUND
from tests.property.test_descriptors import LEAFLESS
from tests.property.trees import NATIVE, Tree, descriptor, expect, trees

MAX_APPS = 3
MAX_RESTARTS = 2
SUBSCRIBE = "urn:cddlm:option:subscribe"
GONE = ("ResourceUnknownFault", "NoSuchApplicationFault")


@dataclass
class Model:
    view: Application                 # the client's current view of it
    view_alive: bool = True
    tree: Tree | None = None
    intent: str | None = None         # initialized, running or terminated once accepted
    destroyed: bool = False
    seen: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.view.id


def _call(fn, *args):
    """(True, None) when accepted, (False, fault name) when refused with a fault."""
    try:
        fn(*args)
        return True, None
    except PortalFault as fault:
        return False, fault.fault


def _twice(fn, *args) -> list[tuple[bool, str | None]]:
    """The same call from two clients at the same moment."""
    results: list = [None, None]
    gate = threading.Barrier(2)

    def one(i: int) -> None:
        gate.wait()
        results[i] = _call(fn, *args)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


class Operations(RuleBasedStateMachine):
    put = None        # the live portal (set by the test)
    listener = None   # the consumer of every application's lifecycle events (set by the test)

    apps = Bundle("apps")

    def __init__(self):
        super().__init__()
        self.models: list[Model] = []
        self.restarts = 0
        self.received: dict[str, list[tuple[int, str]]] = {}

    # -- what the store says, for "a refused request changed nothing" ------------------------------
    def _fingerprint(self, m: Model) -> tuple:
        app, _, _, _ = self.put.record(m.id)
        return (app.desired, app.generation, app.descriptor_digest) if app else None

    def _refused(self, m: Model, fault: str, before: tuple, legal_now) -> None:
        if m.destroyed or not m.view_alive:
            assert fault in GONE, fault
            return
        assert fault == "WrongStateFault", fault
        assert legal_now(), "refused although legal (intent %s, state %s)" % (m.intent, self._state(m))
        assert self._fingerprint(m) == before, "a refused request changed the application"

    def _state(self, m: Model) -> str | None:
        app, _, _, _ = self.put.record(m.id)
        return app.state if app else None

    # -- rules ------------------------------------------------------------------------------------
    @initialize(target=apps)
    def first(self):
        return self._create()

    @precondition(lambda self: len(self.models) < MAX_APPS)
    @rule(target=apps)
    def create(self):
        return self._create()

    def _create(self) -> Model:
        m = Model(self.put.portal.create(options={SUBSCRIBE: self.listener.url("ops")}))
        self.models.append(m)
        return m

    @rule(m=apps, tree=trees(), twice=st.booleans())
    def initialize(self, m: Model, tree: Tree, twice: bool):
        before = None if m.destroyed else self._fingerprint(m)
        body = descriptor(tree)
        results = _twice(m.view.initialize, NATIVE, body) if twice else [_call(m.view.initialize, NATIVE, body)]
        accepted = [r for r in results if r[0]]
        legal = m.intent is None and not m.destroyed and m.view_alive
        refused_tree = expect(tree, LEAFLESS).refused
        assert len(accepted) <= 1, "initialize accepted twice"
        if accepted:
            assert legal and not refused_tree
            m.tree, m.intent = tree, "initialized"
        for ok, fault in results:
            if ok:
                continue
            if legal and refused_tree:
                assert fault == "DescriptorFault", fault
                assert self._fingerprint(m) == before
            elif legal and twice and accepted:
                assert fault == "WrongStateFault", fault    # the other one won
            else:
                self._refused(m, fault, before, lambda: m.intent is not None)

    @rule(m=apps, twice=st.booleans())
    def run(self, m: Model, twice: bool):
        before = None if m.destroyed else self._fingerprint(m)
        results = _twice(m.view.run) if twice else [_call(m.view.run)]
        accepted = [r for r in results if r[0]]
        assert len(accepted) <= 1, "run accepted twice"
        if accepted:
            assert m.intent == "initialized" and not m.destroyed and m.view_alive
            m.intent = "running"
        for ok, fault in results:
            if not ok and not (twice and accepted):
                # refused: not initialized, already asked to run or terminate, or failed meanwhile
                self._refused(m, fault, before, lambda: m.intent != "initialized"
                              or self._state(m) in ("failed", "terminated"))

    @rule(m=apps)
    def ping(self, m: Model):
        ok, fault = _call(m.view.ping)
        assert ok or (fault in GONE and (m.destroyed or not m.view_alive)), fault

    @rule(m=apps, twice=st.booleans())
    def terminate(self, m: Model, twice: bool):
        results = _twice(m.view.terminate, "property test") if twice else [_call(m.view.terminate, "property test")]
        for ok, fault in results:
            assert ok or (fault in GONE and (m.destroyed or not m.view_alive)), fault
        if not m.destroyed and m.view_alive:
            m.intent = "terminated"

    @rule(m=apps, twice=st.booleans())
    def destroy(self, m: Model, twice: bool):
        before = None if m.destroyed else self._fingerprint(m)
        results = _twice(m.view.destroy) if twice else [_call(m.view.destroy)]
        accepted = [r for r in results if r[0]]
        assert len(accepted) <= 1, "destroy accepted twice"
        if accepted:
            assert not m.destroyed and m.view_alive and m.intent == "terminated"
            m.destroyed = True
            assert self.put.record(m.id)[0] is None, "destroy left the application's records"
        for ok, fault in results:
            if ok:
                continue
            if twice and accepted:
                # the other call came after the winner (gone), or before the application had
                # finished terminating (the winner came once it had)
                assert fault in GONE + ("WrongStateFault",), fault
            else:
                self._refused(m, fault, before, lambda: self._state(m) != "terminated")

    @rule(m=apps)
    def destroy_view(self, m: Model):
        ok, fault = _call(m.view.destroy_view)
        assert ok == (not m.destroyed and m.view_alive), (ok, fault)
        if ok:
            m.view_alive = False
            assert self.put.record(m.id)[0] is not None, "destroying a view destroyed the application"
        else:
            assert fault in GONE, fault

    @rule(m=apps, by_rebind=st.booleans())
    def view_again(self, m: Model, by_rebind: bool):
        """Get a live view back: rebind the EPR held (dead or alive), or look the id up."""
        portal = self.put.portal
        try:
            view = portal.rebind(m.view.reference) if by_rebind else portal.lookup(m.id)
        except PortalFault as fault:
            assert m.destroyed and fault.fault == "NoSuchApplicationFault", fault
            return
        assert not m.destroyed, "a destroyed application was found again"
        assert view.id == m.id
        m.view, m.view_alive = view, True

    @precondition(lambda self: self.restarts < MAX_RESTARTS)
    @rule()
    def kill_and_restart(self):
        """SIGKILL the portal at whatever point it is, and start it again on the same port."""
        self.put.kill_and_restart()
        self.restarts += 1

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def every_application_is_legal(self):
        for m in self.models:
            if not m.destroyed:
                m.seen = self.put.check(m.id, m.seen)

    def _received_exactly_the_history(self, m: Model) -> None:
        deadline = time.monotonic() + BOUND
        while len(self.received.get(m.id, [])) < len(m.seen) and time.monotonic() < deadline:
            event = self.listener.get(timeout=0.2)
            if event is not None and event.kind == "lifecycle":
                self.received.setdefault(event.resource_id, []).append((event.sequence, event.state))
        got = self.received.get(m.id, [])
        assert got == list(enumerate(m.seen, 1)), ("events received", got, "history", m.seen)

    def teardown(self):
        try:
            for m in self.models:
                if m.destroyed:
                    continue
                if not m.view_alive:
                    m.view, m.view_alive = self.put.portal.lookup(m.id), True
                if m.intent is None:
                    assert self._state(m) == "instantiated"
                elif m.intent == "initialized":   # nothing was started: nothing can fail
                    self.put.wait_settled(m.id, "initialized")
                elif m.intent == "running":
                    self.put.wait_settled(m.id, expect(m.tree, LEAFLESS).state)
                m.seen = self.put.check(m.id, m.seen)
                m.view.terminate("teardown")
                self.put.wait_settled(m.id, "terminated")
                m.seen = self.put.check(m.id, m.seen)
                self._received_exactly_the_history(m)
                m.view.destroy()
        finally:
            for m in self.models:   # whatever failed above, leave nothing running
                if not m.destroyed:
                    try:
                        m.view.terminate("teardown")
                    except Exception:
                        pass


def test_random_operation_sequences_keep_every_application_legal(put):
    with Listener() as listener:
        Operations.put, Operations.listener = put, listener
        run_state_machine_as_test(Operations)
