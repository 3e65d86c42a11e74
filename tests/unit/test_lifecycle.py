import pytest

from cddlm.application import lifecycle as lc
from cddlm.errors import WrongState


def test_every_state_but_terminated_can_terminate_and_fail_only_from_live_states():
    for state in lc.STATES:
        if state == lc.TERMINATED:
            with pytest.raises(lc.IllegalTransition):
                lc.next_state(state, "stopped")
        else:
            assert lc.next_state(state, "stopped") == lc.TERMINATED
    assert {s for s in lc.STATES if (s, "failed") in lc.TRANSITIONS} == {
        lc.INSTANTIATED, lc.INITIALIZED, lc.RUNNING}


def test_failed_is_left_only_by_termination():
    assert [ev for (src, ev) in lc.TRANSITIONS if src == lc.FAILED] == ["stopped"]


@pytest.mark.parametrize("state,target,events", [
    (lc.INSTANTIATED, lc.RUNNING, ["deployed", "started"]),
    (lc.INITIALIZED, lc.RUNNING, ["started"]),
    (lc.RUNNING, lc.TERMINATED, ["stopped"]),
    (lc.RUNNING, lc.RUNNING, []),
])
def test_path_to(state, target, events):
    assert lc.path_to(state, target) == events


def test_no_path_out_of_terminated():
    with pytest.raises(lc.IllegalTransition):
        lc.path_to(lc.TERMINATED, lc.RUNNING)


@pytest.mark.parametrize("op,state,desired,ok", [
    ("initialize", "instantiated", "instantiated", True),
    ("initialize", "instantiated", "initialized", False),   # already accepted, still deploying
    ("initialize", "running", "running", False),
    ("run", "instantiated", "instantiated", False),
    ("run", "instantiated", "initialized", True),            # run right after initialize
    ("run", "initialized", "initialized", True),
    ("run", "running", "running", False),
    ("run", "initialized", "terminated", False),
    ("destroy", "terminated", "terminated", True),
    ("destroy", "running", "terminated", False),             # terminating, not yet terminated
    ("terminate", "failed", "running", True),
])
def test_operations_table(op, state, desired, ok):
    if ok:
        lc.check_operation(op, state, desired)
    else:
        with pytest.raises(WrongState) as e:
            lc.check_operation(op, state, desired)
        assert e.value.state == state and e.value.operation == op


def test_history_legality():
    assert lc.is_legal_history(["instantiated", "initialized", "running", "failed", "terminated"])
    assert lc.is_legal_history(["instantiated", "terminated"])
    assert not lc.is_legal_history(["instantiated", "running"])
    assert not lc.is_legal_history(["initialized", "running"])
    assert not lc.is_legal_history(["instantiated", "failed", "running"])
