"""A live portal for the property tests: a real subprocess on a fixed port (so EPRs survive a
SIGKILL and restart), reached through ``cddlm.client``, with its SQLite store readable by the
test for the invariants a client cannot see all of (the outbox of lifecycle events).

The invariants every application must satisfy at any moment, and after it settles:

- its state history is a path through the lifecycle table, and it only grows (a state once
  reached is never taken back; a terminal state is never left);
- its lifecycle events are numbered 1..n without gaps and say exactly the history;
- each component has at most one live session of processes, and a running one's recorded
  pid leads it;
- once terminated, no process of it is alive.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from sqlalchemy import select

from cddlm.application import lifecycle
from cddlm.application import repository as repo
from cddlm.application.store import Store
from cddlm.application.tables import events
from cddlm.client import Portal
from tests.conftest import LivePortal, free_port

# a settled application got there within this many seconds (issue 17: "say 10 s")
BOUND = float(os.environ.get("CDDLM_SETTLE_BOUND", "10"))
TUNING = ["--lease-seconds", "3", "--heartbeat", "1", "--liveness-interval", "0.5"]


def live_sessions(app_id: str) -> dict[str, set[int]]:
    """Component path -> the sessions of live processes that belong to it. Each start of a
    component is a session of its own (led by the pid the portal records), so a component
    started twice shows two sessions, whatever its process has forked."""
    out: dict[str, set[int]] = {}
    marker = ("CDDLM_COMPONENT=%s " % app_id).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = open("/proc/%s/environ" % entry, "rb").read().split(b"\0")
            stat = open("/proc/%s/stat" % entry).read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            continue
        for item in env:
            if item.startswith(marker):
                out.setdefault(item[len(marker):].decode(), set()).add(int(fields[3]))
    return out


class PortalUnderTest:
    def __init__(self, root: Path):
        self.root = root
        self.port = free_port()
        self.state = root / "state"
        self.state.mkdir(parents=True, exist_ok=True)
        self.live: LivePortal | None = None
        self.store = Store("sqlite:///%s" % (self.state / "portal.db"))
        self.restarts = 0

    def start(self) -> Portal:
        extra = TUNING + ["--hosts-dir", str(self.root / "hosts")]
        self.live = LivePortal(self.state, self.port, None, extra).start()
        self.portal = Portal(self.live.url, timeout=20)
        return self.portal

    def kill_and_restart(self) -> Portal:
        self.live.stop(signal.SIGKILL)
        self.restarts += 1
        return self.start()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
        self.store.dispose()

    # -- what the store says ----------------------------------------------------------------------
    def history(self, app_id: str) -> list[str]:
        with self.store.read() as conn:
            return [h[1] for h in repo.get_history(conn, app_id)]

    def record(self, app_id: str) -> tuple[repo.App | None, list[repo.Component], list[str], list[tuple]]:
        with self.store.read() as conn:
            app = repo.get_app(conn, app_id)
            comps = repo.get_components(conn, app_id) if app else []
            history = [h[1] for h in repo.get_history(conn, app_id)]
            outbox = [(r.seq, json.loads(r.message)["state"]) for r in conn.execute(
                select(events.c.seq, events.c.message).where(events.c.producer == app_id)
                .order_by(events.c.seq))]
        return app, comps, history, outbox

    def check(self, app_id: str, seen: list[str] | None = None) -> list[str]:
        """Check the invariants now; ``seen`` is the history seen before (it must only grow).
        Returns the history."""
        app, comps, history, outbox = self.record(app_id)
        if app is None:
            return seen or []
        assert lifecycle.is_legal_history(history), history
        if seen:
            assert history[:len(seen)] == seen, (seen, history)
        # the outbox keeps the newest delivered event at least; older ones may be pruned
        assert [s for s, _ in outbox] == list(range(outbox[0][0], len(history) + 1)) if outbox \
            else not history, (outbox, history)
        assert [st for _, st in outbox] == history[len(history) - len(outbox):], (outbox, history)
        live = live_sessions(app_id)
        assert all(len(sessions) == 1 for sessions in live.values()), ("a component runs twice", live)
        for c in comps:
            if c.type == "process" and c.observed == "running" and c.path in live:
                assert live[c.path] == {c.pid}, (c.path, c.pid, live[c.path])
        if app.state == lifecycle.TERMINATED:
            assert live == {}, ("processes outlive their terminated application", live)
        return history

    def wait_settled(self, app_id: str, state: str, hold: float = 0.0) -> float:
        """Wait until the application is in ``state`` with no component in transit, and (with
        ``hold``) still there that much later; returns the seconds it took. Fails when it
        settles elsewhere or not within ``BOUND``."""
        start = time.monotonic()
        deadline = start + BOUND
        transit = {"pending", "deployed", "starting", "stopping"} if state == "terminated" else set()
        while True:
            app, comps, _, _ = self.record(app_id)
            reached = app is not None and app.state == state and not any(
                c.observed in transit for c in comps if c.type not in ("compound", "sequence", "parallel"))
            if reached:
                took = time.monotonic() - start
                if hold:
                    time.sleep(hold)
                    app, comps, _, _ = self.record(app_id)
                    assert app.state == state, "left %s for %s: %s" % (state, app.state, app.state_info)
                return took
            # a terminal state, or failed when terminated is not what is awaited, is never left
            if app is not None and app.state != state and (
                    app.state == "terminated" or (app.state == "failed" and state != "terminated")):
                raise AssertionError("settled in %s, not %s: %s" % (app.state, state, app.state_info))
            if time.monotonic() > deadline:
                raise AssertionError("still %s after %gs, not %s (components: %s)" % (
                    app.state if app else "gone", BOUND, state,
                    {c.path: c.observed for c in comps}))
            time.sleep(0.05)
