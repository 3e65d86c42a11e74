"""The enactment engine: worker threads that turn work items into real processes and files,
and liveness checks that turn dead processes into failures.

Each action is idempotent and re-entrant, because a claimed item may be run again after a
crash: deploy re-creates directories and rewrites files; start first records ``starting``,
then adopts a live process left by an interrupted start (pid file) before spawning one; stop
signals only the recorded (pid, start time). An item whose application moved to a newer
generation is dropped (superseded), except stops, which always run.

Results are written in one transaction with the reconcile step they trigger, so the
component state, the next work items, the lifecycle transition and its event commit together.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Callable

from sqlalchemy import select

from cddlm.application import lifecycle
from cddlm.application import repository as repo
from cddlm.application.enactment import queue, states
from cddlm.application.enactment.local import Later, LocalRunner, Lost, Outcome, Target
from cddlm.application.enactment.reconcile import reconcile
from cddlm.application.enactment.values import HostValues
from cddlm.application.enactment.watch import ExitWatcher
from cddlm.application.hosts import Host, Hosts
from cddlm.application.store import Store
from cddlm.application.tables import components
from cddlm.config import Settings
from cddlm.errors import CddlmError, StoreUnavailable
from cddlm.lang.model import Deployment

log = logging.getLogger(__name__)


WAIT_FOR_VALUE_STEP = 0.25      # seconds between tries of a lazy reference not yet resolvable
WAIT_FOR_VALUE_ATTEMPTS = 120   # about 30 s, then the component fails naming the reference


class Superseded(Exception):
    """The application moved to a newer intent while this item was in hand."""


class Engine:
    def __init__(self, store: Store, settings: Settings, hosts: Hosts, *,
                 clock: Callable[[], float] = time.time, url: str | None = None,
                 remote: Callable[[Host], object] | None = None,
                 delegate: Callable[[str], object] | None = None):
        self.store = store
        self.settings = settings
        self.hosts = hosts
        self.clock = clock
        self.url = url
        self.id = uuid.uuid4().hex
        self.runners = {h.name: LocalRunner(h.name, h.workdir or os.path.join(settings.hosts_root, h.name),
                                            settings)
                        for h in hosts.hosts.values() if h.local}
        # the runner seam: hosts whose agent is another portal get the runner ``remote``
        # makes (application/enactment/remote.py); the engine asks any runner the same way
        self.runners.update({h.name: remote(h) for h in hosts.hosts.values()
                             if not h.local and remote is not None})
        self.delegate = delegate     # portal URL -> the runner of ``delegate`` components
        self.delegates: dict[str, object] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._trees: dict[tuple[str, int], Deployment] = {}
        self._trees_lock = threading.Lock()
        self.watcher: ExitWatcher | None = None
        self.on_events: list[Callable[[], None]] = []   # woken after lifecycle events commit
        # owner -> the OS account its components run as (tenancy.Accounts; set by app.py)
        self.accounts: Callable[[str | None], str | None] = lambda owner: settings.security.run_as

    # -- life of the engine -------------------------------------------------------------------
    def start(self) -> None:
        now = self.clock()
        with self.store.write() as conn:
            queue.release_dead(conn, now, 3 * self.settings.heartbeat_seconds, self.store.is_sqlite,
                               self.id)
            queue.register_engine(conn, self.id, self.url, now)
        self.watcher = ExitWatcher(self._on_exit)
        self._readopt()
        for i in range(self.settings.engine_workers):
            t = threading.Thread(target=self._work_loop, name="cddlm-worker-%d" % i, daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._heartbeat_loop, name="cddlm-heartbeat", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=10)
        self._threads.clear()
        if self.watcher:
            self.watcher.close()
        try:
            with self.store.write() as conn:
                queue.unregister_engine(conn, self.id)
        except StoreUnavailable:
            pass

    def wake(self) -> None:
        self._wake.set()

    def _notify_events(self) -> None:
        for callback in self.on_events:
            callback()

    # -- helpers ------------------------------------------------------------------------------
    def tree(self, app: repo.App) -> Deployment:
        key = (app.id, app.generation)
        with self._trees_lock:
            tree = self._trees.get(key)
        if tree is None:
            tree = Deployment.from_json(app.deployment or {})
            with self._trees_lock:
                if len(self._trees) > 512:
                    self._trees.clear()
                self._trees[key] = tree
        return tree

    @staticmethod
    def host_down(conn, host: str | None) -> str | None:
        down = repo.down_hosts(conn)
        return _down_message(host, down[host]) if host in down else None

    def runner_for(self, app: repo.App, comp: repo.Component):
        """Who enacts ``comp``: its host's runner, or for a ``delegate`` the portal it names."""
        if comp.type == "delegate":
            node = self.tree(app).find(comp.path)
            url = node.attributes.get("portal") if node is not None else None
            return self._delegate_runner(url)
        return self.runners.get(comp.host or "")

    def prepare_delegates(self, app_id: str, generation: int, tree: Deployment) -> None:
        """At initialize: each ``delegate`` component's sub-application made and initialized
        on its portal now, so a refusal reaches the caller (``RemoteFault``)."""
        for path, comp in tree.walk():
            url = comp.attributes.get("portal") if comp.type == "delegate" else None
            runner = self._delegate_runner(url)
            if runner is not None:
                runner.prepare(app_id, generation, path, tree)

    def _delegate_runner(self, url: object):
        """The runner of ``delegate`` components naming portal ``url`` (one per portal)."""
        if self.delegate is None or not isinstance(url, str):
            return None
        with self._trees_lock:
            if url not in self.delegates:
                self.delegates[url] = self.delegate(url)
            return self.delegates[url]

    def values(self, app: repo.App, comps: list[repo.Component], comp: repo.Component) -> HostValues:
        runner = self.runners.get(comp.host or "")
        workdir = (lambda p: runner.component_dir(app.id, p)) if runner else (lambda p: "")
        return HostValues(app, self.tree(app), {c.path: c for c in comps}, comp.host or "",
                          comp.path, workdir)

    def _target(self, app: repo.App, comps: list[repo.Component], comp: repo.Component,
                lenient: bool = False) -> Target:
        node = self.tree(app).find(comp.path)
        hv = self.values(app, comps, comp)
        attrs = hv.attributes(node, lenient) if node is not None else {}
        return Target(app.id, comp.path, comp.type, attrs, comp.host or "", values=hv.property,
                      user=self.accounts(app.owner))

    # -- the work loop ------------------------------------------------------------------------
    def _work_loop(self) -> None:
        while not self._stop.is_set():
            try:
                now = self.clock()
                with self.store.single() as conn:
                    due = queue.any_due(conn, now)
                items = []
                if due:
                    with self.store.write() as conn:
                        items = queue.claim(conn, self.id, now, self.settings.lease_seconds, 1,
                                            not self.store.is_sqlite)
            except StoreUnavailable as e:
                log.warning("cannot claim work: %s", e)
                self._stop.wait(1.0)
                continue
            if not items:
                self._wake.wait(0.25)
                self._wake.clear()
                continue
            for item in items:
                try:
                    self._perform(item)
                except Superseded:
                    self._drop(item)
                except Later as e:
                    self._later(item, e.delay)
                except Lost:
                    log.info("lost the lease of %s %s/%s", item.action, item.app_id, item.path)
                except StoreUnavailable as e:
                    log.warning("store unavailable while doing %s: %s", item.action, e)
                except Exception:
                    log.exception("work item %s failed unexpectedly", item)
                    self._give_up(item)

    def _drop(self, item: queue.Item) -> None:
        """Forget a superseded item and let the newer intent plan the next work."""
        with self.store.write() as conn:
            repo.lock_app(conn, item.app_id)
            queue.finish(conn, item.id)
            _, added = reconcile(conn, item.app_id, self.clock())
        self._after(added)

    def _later(self, item: queue.Item, delay: float) -> None:
        """The runner asked to be asked again (a remote host busy or silent)."""
        try:
            with self.store.write() as conn:
                queue.retry_later(conn, item.id, self.id, self.clock() + delay)
        except StoreUnavailable:
            pass

    def _give_up(self, item: queue.Item) -> None:
        """An unexpected error: retry later with back-off; after 5 attempts fail the component."""
        now = self.clock()
        try:
            with self.store.write() as conn:
                repo.lock_app(conn, item.app_id)
                if item.attempts >= 5:
                    comp = repo.get_component(conn, item.app_id, item.path)
                    if comp is not None and comp.observed in states.LIVE:
                        repo.update_component(conn, item.app_id, item.path, observed=states.FAILED,
                                              info="internal error during %s" % item.action,
                                              updated=now)
                    queue.finish(conn, item.id)
                    reconcile(conn, item.app_id, now)
                else:
                    queue.retry_later(conn, item.id, self.id, now + 2 ** item.attempts)
        except StoreUnavailable:
            pass

    def _keep_lease(self, item: queue.Item) -> Callable[[], None]:
        state = {"next": time.monotonic() + self.settings.lease_seconds / 3}

        def keep() -> None:
            if self._stop.is_set():
                raise Lost("engine stopping")
            if time.monotonic() < state["next"]:
                return
            with self.store.write() as conn:
                if not queue.extend(conn, item.id, self.id, self.clock() + self.settings.lease_seconds):
                    raise Lost("lease lost")
            state["next"] = time.monotonic() + self.settings.lease_seconds / 3
        return keep

    def _perform(self, item: queue.Item) -> None:
        with self.store.read() as conn:
            app = repo.get_app(conn, item.app_id)
            comps = repo.get_components(conn, item.app_id) if app else []
            down = None
            comp = next((c for c in comps if c.path == item.path), None)
            if comp is not None:
                down = self.host_down(conn, comp.host)
        if app is None or comp is None:
            with self.store.write() as conn:
                queue.finish(conn, item.id)
            return
        if item.generation < app.generation and item.action != "stop":
            self._drop(item)
            return
        runner = self.runner_for(app, comp)
        keep = self._keep_lease(item)
        if runner is None or (down and item.action != "stop"):
            # a host marked down still has its local processes: a stop stops them
            outcome = Outcome("stopped") if item.action == "stop" else Outcome(
                "failed", down or "host %s has no local agent" % comp.host)
        else:
            try:
                # processes resolve their peers' runtime values when they start, not at deploy
                lenient = item.action == "stop" or (item.action == "deploy" and comp.type != "file")
                # another portal's component: that portal resolves its attributes
                target = Target(app.id, comp.path, comp.type, {}, comp.host or "") \
                    if getattr(runner, "remote", False) else self._target(app, comps, comp, lenient)
            except CddlmError as e:
                if getattr(e, "kind", "") == "unresolved-reference" and item.action != "stop" \
                        and item.attempts < WAIT_FOR_VALUE_ATTEMPTS:
                    # a lazy reference to a runtime value another component has not produced
                    # yet (its pid, its port): ask again shortly instead of failing
                    with self.store.write() as conn:
                        queue.retry_later(conn, item.id, self.id, self.clock() + WAIT_FOR_VALUE_STEP)
                    return
                target, outcome = None, Outcome("stopped" if item.action == "stop" else "failed",
                                                "cannot resolve attributes: %s" % e)
            if target is not None:
                outcome = self._act(item, app, comp, target, runner, keep)
        self._record(item, comp, outcome)

    def _act(self, item, app, comp, target, runner: LocalRunner, keep) -> Outcome:
        if item.action == "deploy":
            return runner.deploy(target)
        if item.action == "start":
            if comp.observed == states.DEPLOYED:
                self._mark(item, comp, states.STARTING)
            return runner.start(target, comp.pid, comp.pid_start, keep)
        if item.action == "stop":
            if comp.observed != states.STOPPING:
                self._mark(item, comp, states.STOPPING)  # before the signal: its exit is no failure
            return runner.stop(target, comp.pid, comp.pid_start, keep)
        return Outcome("failed", "unknown action %s" % item.action)

    def _mark(self, item: queue.Item, comp: repo.Component, observed: str) -> None:
        """Record an action's intent before doing it, so a crash or a concurrent liveness
        check reads it right (starting: adopt, do not start twice; stopping: not a failure)."""
        with self.store.write() as conn:
            app = repo.lock_app(conn, item.app_id)
            if not queue.extend(conn, item.id, self.id, self.clock() + self.settings.lease_seconds):
                raise Lost("lease lost")
            if app is None or (item.action != "stop" and app.generation > item.generation):
                raise Superseded()   # a newer intent: this item's next step is not taken
            repo.update_component(conn, item.app_id, comp.path, observed=observed,
                                  updated=self.clock())
        comp.observed = observed

    def _record(self, item: queue.Item, comp: repo.Component, outcome: Outcome) -> None:
        now = self.clock()
        with self.store.write() as conn:
            app = repo.lock_app(conn, item.app_id)
            if not queue.extend(conn, item.id, self.id, now + self.settings.lease_seconds):
                raise Lost("lease lost before recording")
            queue.finish(conn, item.id)
            current = repo.get_component(conn, item.app_id, item.path)
            if current is not None and app is not None:
                self._apply(conn, app, current, outcome, now)
            before = app.event_seq if app else 0
            after_app, added = reconcile(conn, item.app_id, now)
            events = after_app is not None and after_app.event_seq != before
        if outcome.pid and outcome.event == "running" and self.watcher:
            if not self.watcher.watch(outcome.pid, (item.app_id, item.path)):
                self.check_component(item.app_id, item.path)
        self._after(added, events)

    def _after(self, added: bool, events: bool = False) -> None:
        if added:
            self._wake.set()
        if events:
            self._notify_events()

    def _apply(self, conn, app: repo.App, comp: repo.Component, outcome: Outcome, now: float) -> bool:
        """Record one runner outcome on a component (in ``conn``). False if it was stale."""
        event = outcome.event
        attrs = {}
        if event == "failed" and comp.oneshot and outcome.exit_code == 0:
            event = "completed"
        restart = False
        if event == "failed" and comp.type == "process" and app.desired == lifecycle.RUNNING \
                and app.state in (lifecycle.INITIALIZED, lifecycle.RUNNING) and comp.observed in (
                    states.RUNNING, states.STARTING):
            node = self.tree(app).find(comp.path)
            attrs = node.attributes if node else {}
            if attrs.get("restart") == "on-failure" and comp.restarts < int(attrs.get("restart_limit") or 0):
                event, restart = "restart", True
        new = states.component_next(comp.observed, event)
        if new is None:
            return False
        runtime = dict(comp.runtime)
        runtime.update(outcome.runtime)
        values = dict(observed=new, updated=now)
        if outcome.pid is not None:
            values.update(pid=outcome.pid, pid_start=outcome.pid_start)
        if outcome.info is not None:
            values["info"] = outcome.info
        if event in ("failed", "completed", "restart", "stopped"):
            values.update(exit_code=outcome.exit_code, exit_signal=outcome.exit_signal)
        if "workdir" in outcome.runtime:
            values["workdir"] = outcome.runtime["workdir"]
        if event == "failed" or restart:
            runner = self.runners.get(comp.host or "")
            if runner is not None and comp.type == "process":
                runtime["stderr"] = runner.stderr_tail(app.id, comp.path)
            runtime["failed_at"] = now
        if restart:
            values["restarts"] = comp.restarts + 1
            values["info"] = "restarted after: %s" % (outcome.info or "exit")
        values["runtime"] = runtime
        repo.update_component(conn, app.id, comp.path, **values)
        return True

    # -- liveness -----------------------------------------------------------------------------
    def _on_exit(self, key: object) -> None:
        app_id, path = key  # type: ignore[misc]
        self.check_component(app_id, path)

    def check_component(self, app_id: str, path: str) -> dict | None:
        """Check one component now; record a failure. Returns its health entry."""
        found = self._check(app_id, {path})
        return found[0] if found else None

    def check_app(self, app_id: str) -> list[dict]:
        return self._check(app_id)

    def _check(self, app_id: str, paths: set[str] | None = None) -> list[dict]:
        """Check an application's running components (those in ``paths``, or all), reading
        its components and the down hosts once, and record every failure in one transaction.
        Returns a health entry per component checked."""
        with self.store.read() as conn:
            app = repo.get_app(conn, app_id)
            comps = repo.get_components(conn, app_id) if app else []
            down = repo.down_hosts(conn) if comps else {}
        chosen = [c for c in comps if paths is None or c.path in paths]
        outcomes: dict[str, Outcome] = {}
        for comp in chosen:
            if comp.observed != states.RUNNING or comp.type in states.CONTAINERS:
                continue
            runner = self.runner_for(app, comp)
            if comp.host in down:
                where = getattr(runner, "where", None)   # a remote host: name its sub-application
                outcomes[comp.path] = Outcome("failed", "%s%s" % (
                    _down_message(comp.host, down[comp.host]),
                    " (%s)" % where(app_id, comp.path) if where else ""))
            elif runner is not None:
                try:
                    # another portal's component: its portal holds its values, the runner
                    # asks it by path (no attributes to resolve here)
                    target = Target(app.id, comp.path, comp.type, {}, comp.host or "") \
                        if getattr(runner, "remote", False) else self._target(app, comps, comp)
                except CddlmError as e:
                    outcomes[comp.path] = Outcome("failed", str(e))
                else:
                    outcome = runner.check(target, comp.pid, comp.pid_start)
                    if outcome is not None:
                        outcomes[comp.path] = outcome
        recorded: set[str] = set()
        if outcomes:
            now = self.clock()
            with self.store.write() as conn:
                current_app = repo.lock_app(conn, app_id)
                before = current_app.event_seq if current_app else 0
                stops = []
                for comp in chosen:
                    if comp.path not in outcomes or current_app is None:
                        continue
                    current = repo.get_component(conn, app_id, comp.path)
                    if current is None or current.observed != comp.observed or current.pid != comp.pid:
                        continue   # changed meanwhile: this report is stale
                    self._apply(conn, current_app, current, outcomes[comp.path], now)
                    recorded.add(comp.path)
                    if comp.host in down and comp.pid and comp.host in self.runners:
                        stops.append((comp.path, "stop"))   # failed with its host: stop it too
                after, added = reconcile(conn, app_id, now) if recorded else (current_app, False)
                if stops and current_app is not None:
                    added = queue.add(conn, app_id, stops, current_app.generation, now) > 0 or added
            self._after(added, after is not None and after.event_seq != before)
        return [_health(c, outcomes.get(c.path) if c.path in recorded else None) for c in chosen]

    def check_all(self, host: str | None = None) -> None:
        """The scheduled liveness pass over every running component (of one host if given)."""
        query = select(components.c.app_id, components.c.path).where(
            components.c.observed == states.RUNNING, components.c.type.not_in(list(states.CONTAINERS)))
        if host is not None:
            query = query.where(components.c.host == host)
        with self.store.read() as conn:
            rows = conn.execute(query).all()
        by_app: dict[str, set[str]] = {}
        for app_id, path in rows:
            by_app.setdefault(app_id, set()).add(path)
        for app_id, paths in by_app.items():
            if self._stop.is_set():
                return
            try:
                self._check(app_id, paths)
            except StoreUnavailable as e:
                log.warning("liveness check skipped: %s", e)
                return
            except Exception:
                log.exception("liveness check of %s failed", app_id)

    def _readopt(self) -> None:
        """After a restart: watch the processes recorded as running, so deaths are prompt."""
        with self.store.read() as conn:
            rows = conn.execute(select(components.c.app_id, components.c.path, components.c.pid,
                                       components.c.host)
                                .where(components.c.observed == states.RUNNING,
                                       components.c.pid.is_not(None))).all()
        for app_id, path, pid, host in rows:
            if host in self.runners and self.watcher and not self.watcher.watch(pid, (app_id, path)):
                self.check_component(app_id, path)

    def _heartbeat_loop(self) -> None:
        beat = self.settings.heartbeat_seconds
        while not self._stop.wait(beat):
            try:
                now = self.clock()
                with self.store.write() as conn:
                    queue.heartbeat(conn, self.id, now)
                    if not self.store.is_sqlite:
                        if queue.release_dead(conn, now, 3 * beat, False, self.id):
                            self._wake.set()
            except StoreUnavailable as e:
                log.warning("heartbeat failed: %s", e)

    # -- hosts --------------------------------------------------------------------------------
    def remove_app_files(self, app_id: str) -> None:
        for runner in list(self.runners.values()) + list(self.delegates.values()):
            runner.remove_app(app_id)


def _down_message(host: str | None, reason: str | None) -> str:
    return "host %s is down%s" % (host, ": " + reason if reason else "")


def _health(comp: repo.Component, outcome: Outcome | None) -> dict:
    """A component's health as ping reports it; ``outcome`` is a failure just recorded."""
    state = states.FAILED if outcome is not None and outcome.event == "failed" else comp.observed
    return {"path": comp.path, "type": comp.type, "host": comp.host, "state": state,
            "healthy": state != states.FAILED, "pid": comp.pid, "restarts": comp.restarts,
            "detail": (outcome.info if outcome else comp.info) or ""}
