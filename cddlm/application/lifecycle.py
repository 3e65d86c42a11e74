"""The application lifecycle of CONTRACT section 5, as tables. Pure: no I/O, no clock.

    instantiated ──deployed──▶ initialized ──started──▶ running ──stopped──▶ terminated
         │                          │                      │
         └────────failed────────────┴──────────────────────┴──▶ failed ──stopped──▶ terminated
    (terminated is reachable from every non-final state: terminate before anything ran)

Two tables drive it:
- ``TRANSITIONS``: (state, event) → next state, for what the enactment engine observes.
  A pair that is not in the table is an illegal transition (a bug, never a silent change).
- ``OPERATIONS``: which client operations are legal for a (state, desired) pair. ``desired`` is
  the last intent the portal accepted (initialize → initialized, run → running, terminate →
  terminated); the state moves asynchronously afterwards. ``run`` is accepted as soon as
  ``initialize`` is (the engine starts the components once they are deployed), so a client may
  send initialize and run back to back.
"""

from __future__ import annotations

from cddlm.errors import WrongState

INSTANTIATED, INITIALIZED, RUNNING, FAILED, TERMINATED = (
    "instantiated", "initialized", "running", "failed", "terminated")
STATES = (INSTANTIATED, INITIALIZED, RUNNING, FAILED, TERMINATED)
FINAL = frozenset({TERMINATED})

TRANSITIONS: dict[tuple[str, str], str] = {
    (INSTANTIATED, "deployed"): INITIALIZED,
    (INITIALIZED, "started"): RUNNING,
    (INSTANTIATED, "failed"): FAILED,
    (INITIALIZED, "failed"): FAILED,
    (RUNNING, "failed"): FAILED,
    (INSTANTIATED, "stopped"): TERMINATED,
    (INITIALIZED, "stopped"): TERMINATED,
    (RUNNING, "stopped"): TERMINATED,
    (FAILED, "stopped"): TERMINATED,
}

# operation -> the (state, desired) pairs in which it is accepted
OPERATIONS: dict[str, frozenset[tuple[str, str]]] = {
    "initialize": frozenset({(INSTANTIATED, INSTANTIATED)}),
    "run": frozenset({(INSTANTIATED, INITIALIZED), (INITIALIZED, INITIALIZED)}),
    "destroy": frozenset({(TERMINATED, d) for d in STATES}),
}

# the intent each operation records
INTENT = {"initialize": INITIALIZED, "run": RUNNING, "terminate": TERMINATED}


class IllegalTransition(AssertionError):
    """The engine asked for a transition the table does not have: a bug, not a user error."""


def next_state(state: str, event: str) -> str:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition("no transition from %s on %s" % (state, event)) from None


def check_operation(operation: str, state: str, desired: str) -> None:
    """Raise ``WrongState`` unless ``operation`` is legal now."""
    allowed = OPERATIONS.get(operation)
    if allowed is not None and (state, desired) not in allowed:
        raise WrongState(state, operation)


def path_to(state: str, target: str) -> list[str]:
    """The events that lead from ``state`` to ``target`` through the table (shortest path),
    e.g. instantiated → running is [deployed, started]. Empty if already there."""
    if state == target:
        return []
    frontier = [(state, [])]
    seen = {state}
    while frontier:
        current, events = frontier.pop(0)
        for (src, ev), dst in TRANSITIONS.items():
            if src == current and dst not in seen:
                if dst == target:
                    return events + [ev]
                seen.add(dst)
                frontier.append((dst, events + [ev]))
    raise IllegalTransition("no path from %s to %s" % (state, target))


def is_legal_history(states: list[str]) -> bool:
    """Whether a recorded state history is a path through the table from instantiated."""
    if not states or states[0] != INSTANTIATED:
        return False
    for a, b in zip(states, states[1:]):
        if not any(src == a and dst == b for (src, _), dst in TRANSITIONS.items()):
            return False
    return True
