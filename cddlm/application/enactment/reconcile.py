"""One reconcile step for one application, inside the caller's write transaction: run the
planner on the stored component states, queue the work it asks for, and record the
lifecycle transitions it reports (each with its history row and event, via the table)."""

from __future__ import annotations

from sqlalchemy.engine import Connection

from cddlm.application import lifecycle
from cddlm.application import repository as repo
from cddlm.application.enactment import queue, states


def failure_info(comp: repo.Component) -> dict:
    info = {"normal": False, "component": comp.path,
            "reason": "component %s failed: %s" % (comp.path, comp.info or "failed"),
            "time": comp.runtime.get("failed_at", comp.updated)}
    if comp.exit_code is not None:
        info["exitCode"] = comp.exit_code
    if comp.exit_signal:
        info["signal"] = comp.exit_signal
    if comp.runtime.get("stderr"):
        info["stderr"] = comp.runtime["stderr"]
    if comp.runtime.get("remote"):       # enacted by a host portal: its host, sub-application, fault
        info["remote"] = comp.runtime["remote"]
    return info


def reconcile(conn: Connection, app_id: str, now: float,
              locked: repo.App | None = None) -> tuple[repo.App | None, bool]:
    """Returns the application after this step and whether new work was queued. ``locked``:
    the application as the caller locked and changed it in this transaction (not read again)."""
    app = locked if locked is not None else repo.lock_app(conn, app_id)
    if app is None or app.state == lifecycle.TERMINATED:
        return app, False
    rows = repo.component_states(conn, app_id)
    observed = {r[0]: r[4] for r in rows}
    roots = states.build_tree(rows)
    queued = queue.queued(conn, app_id)
    plan = states.plan(app.state, app.desired, roots, queued)
    # the plan asks for nothing already queued, whatever its generation
    added = queue.add(conn, app_id, plan.work, app.generation, now, have=queued)
    changes = [(path, states.STOPPED) for path in plan.mark_stopped] + [
        (path, value) for path, value in plan.derived.items() if observed[path] != value]
    repo.set_observed(conn, app_id, changes, now)
    for event in plan.events:
        new = lifecycle.next_state(app.state, event)
        info, termination = None, None
        if event == "failed":
            termination = failure_info(repo.get_component(conn, app_id, plan.failure))
            info = termination["reason"]
        elif new == lifecycle.TERMINATED:
            termination = app.termination_info or {
                "normal": True, "reason": "every component ran to completion"}
            termination.setdefault("time", now)
            info = termination.get("reason")
        app = repo.record_state(conn, app, new, now, info, termination)
    return app, added > 0
