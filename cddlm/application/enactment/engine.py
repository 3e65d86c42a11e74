"""The enactment engine: worker threads that turn work items into real processes and files,
and liveness checks that turn dead processes into failures.

Each action is idempotent and re-entrant, because a claimed item may be run again after a
crash: deploy re-creates directories and rewrites files; start first records ``starting``,
then adopts a live process left by an interrupted start (pid file) before spawning one; stop
signals only the recorded (pid, start time). An item whose application moved to a newer
generation is dropped (superseded), except stops, which always run.

Results are written in one transaction with the reconcile step they trigger, so the
component state, the next work items, the lifecycle transition and its event commit together.

Work is done in batches: a worker claims an item with up to ``BATCH - 1`` more of the same
application, action and generation, reads the application's components once, marks them
(starting, stopping) in one transaction, spawns or signals them one after the other, waits
for readiness and exits together, and records what happened in a few transactions with one
reconcile each. One application of N components costs O(N) reads and plans, not O(N^2).
A SIGKILL at any point leaves what a single item leaves: leases expire, ``starting`` adopts
by pid file, ``stopping`` is no failure.

Liveness: exits are seen at once through pidfds (``watch``) and recorded together; the
scheduled pass reads one narrow list of the running components and checks only what the
watcher does not cover (files, probes, processes it could not watch, hosts marked down).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, ContextManager

from sqlalchemy import or_, select

from cddlm import metrics
from cddlm.application import lifecycle, secrets
from cddlm.application import repository as repo
from cddlm.application.enactment import logs, procfs, queue, states
from cddlm.application.enactment.local import Later, LocalRunner, Lost, Outcome, Target
from cddlm.application.enactment.reconcile import reconcile
from cddlm.application.enactment.values import HostValues
from cddlm.application.enactment.watch import ExitWatcher
from cddlm.application.hosts import Host, Hosts
from cddlm.application.store import Store
from cddlm.application.tables import components
from cddlm.config import Settings
from cddlm.errors import CddlmError, ResolutionError, StoreUnavailable
from cddlm.lang.model import Deployment

log = logging.getLogger(__name__)


WAIT_FOR_VALUE_STEP = 0.25      # seconds between tries of a lazy reference not yet resolvable
WAIT_FOR_VALUE_ATTEMPTS = 120   # about 30 s, then the component fails naming the reference
BATCH = 500                     # work items of one application enacted together (or more:
                                # a worker's share of those waiting, see queue.claim_batch)
REPORT_EVERY = 0.25             # seconds between records of one batch's outcomes (at least)
IDLE_WAIT = 1.0                 # seconds an idle worker sleeps between looks at the queue
LOOKER_RELIEF = 30.0            # seconds the other idle workers sleep, if nothing wakes them
FULL_SWEEP = 15                 # liveness passes between reads of every running process
INTENT_CHECK = 0.5              # seconds between looks for a newer intent while waiting
SETTLE_EVERY = 2.0              # seconds: a batch's records reconcile at least this often
TREE_NODES = 100_000            # component-tree nodes kept of applications not in use
TREE_IN_USE = 60.0              # seconds: a tree used this recently is kept, whatever its size
# the outcomes of each action after which the plan waits for the rest of the action's items
# (a deploy may find a component starting or running already: a host portal's early run)
QUIET_OUTCOME = {"deploy": frozenset({"deployed", "starting", "running"}),
                 "start": frozenset({"running"}), "stop": frozenset({"stopped"})}


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
        self._looker = threading.Lock()     # held by the idle worker that looks at the queue
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._trees = _Trees()
        self._trees_lock = threading.Lock()
        self._build_lock = threading.Lock()
        self.watcher: ExitWatcher | None = None
        self._passes = 0
        self._swept = 0.0       # when the liveness pass last read every running process
        self.on_events: list[Callable[[], None]] = []   # woken after lifecycle events commit
        # owner -> the OS account its components run as (tenancy.Accounts; set by app.py)
        self.accounts: Callable[[str | None], str | None] = lambda owner: settings.security.run_as
        # delegate components (cddlm/agents.py; set by app.py): whether one may name a portal
        # (path, URL; raises the fault that says why not), and the bound on a request thread
        # that waits on those portals at initialize
        self.admit_delegate: Callable[[str, object], None] | None = None
        self.waiting_on_portals: Callable[[], ContextManager] = contextlib.nullcontext

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

    def dead(self) -> str | None:
        """Why the engine does no work (not started, or a thread of it ended), or None."""
        gone = [t.name for t in self._threads if not t.is_alive()]
        if not self._threads or self._stop.is_set():
            return "the engine is not running"
        return "engine threads ended: %s" % ", ".join(gone) if gone else None

    def _notify_events(self) -> None:
        for callback in self.on_events:
            callback()

    # -- helpers ------------------------------------------------------------------------------
    def tree(self, app: repo.App) -> Deployment:
        return self._tree(app)[0]

    def _tree(self, app: repo.App) -> tuple[Deployment, dict]:
        """The application's component tree and its index by path (cached per generation)."""
        with self._trees_lock:
            found = self._trees.get(app.id, app.generation)
        if found is None:
            with self._build_lock:       # one thread builds it, the others wait for it
                with self._trees_lock:
                    found = self._trees.get(app.id, app.generation)
                if found is None:
                    # read under a light lock: its tree, as committed (the lock holds it still)
                    whole = (repo.get_app(self.store, app.id) or app) if app.light else app
                    tree = Deployment.from_json(whole.deployment or {})
                    secrets.of(tree)        # its secrets are masked in log lines from now on
                    found = (tree, dict(tree.walk()))
                    with self._trees_lock:
                        self._trees.put(app.id, app.generation, found)
        return found

    def node(self, app: repo.App, path: str):
        return self._tree(app)[1].get(path)

    def _watchable(self, host: str | None) -> bool:
        """Whether the processes of ``host`` run on this machine (their pids are ours to
        watch through pidfds)."""
        return isinstance(self.runners.get(host or ""), LocalRunner) and self.watcher is not None

    def runner_for(self, app: repo.App, comp: repo.Component):
        """Who enacts ``comp``: its host's runner, or for a ``delegate`` the portal it names."""
        if comp.type == "delegate":
            node = self.node(app, comp.path)
            url = node.attributes.get("portal") if node is not None else None
            return self._delegate_runner(url)
        return self.runners.get(comp.host or "")

    def check_delegates(self, tree: Deployment) -> None:
        """At initialize, before anything changes: each ``delegate`` component names a portal
        this portal may call (else the fault that says why not)."""
        for path, comp in tree.walk():
            if comp.type == "delegate" and self.admit_delegate is not None:
                self.admit_delegate(path, comp.attributes.get("portal"))

    def prepare_delegates(self, app_id: str, generation: int, tree: Deployment) -> None:
        """At initialize: each ``delegate`` component's sub-application made and initialized
        on its portal now, so a refusal reaches the caller (``RemoteFault``), all within one
        bounded wait of the request thread (``waiting_on_portals``)."""
        jobs = []
        for path, comp in tree.walk():
            url = comp.attributes.get("portal") if comp.type == "delegate" else None
            runner = self._delegate_runner(url)
            if runner is not None:
                jobs.append((runner, path))
        if jobs:
            with self.waiting_on_portals():
                for runner, path in jobs:
                    runner.prepare(app_id, generation, path, tree)

    def _delegate_runner(self, url: object):
        """The runner of ``delegate`` components naming portal ``url`` (one per portal)."""
        if self.delegate is None or not isinstance(url, str):
            return None
        with self._trees_lock:
            if url not in self.delegates:
                self.delegates[url] = self.delegate(url)
            return self.delegates[url]

    def values(self, app: repo.App, rows: dict[str, repo.Component], comp: repo.Component) -> HostValues:
        runner = self.runners.get(comp.host or "")
        workdir = (lambda p: runner.component_dir(app.id, p)) if runner else (lambda p: "")
        return HostValues(app, self.tree(app), rows, comp.host or "", comp.path, workdir,
                          hostname=getattr(runner, "hostname", None),
                          elsewhere=lambda host: self.asker(app.id, host), **self.lookups())

    def lookups(self) -> dict[str, Callable]:
        """How ``HostValues`` reads the values a component's host knows (its ports, its pid
        on a node): the runners' ways, for ``resolve`` as for the references of components."""
        return {"ports": self._ports, "on_node": self.on_node}

    def on_node(self, row: repo.Component) -> tuple[int | None, list[int]] | None:
        """For a component whose host's runner reads what its process reports of itself (a
        Slurm job's watcher): its pid on that node and the ports it listens on there
        (``SlurmRunner.on_node``); None for the other hosts."""
        reads = getattr(self.runners.get(row.host or ""), "on_node", None)
        return reads(row) if reads is not None else None

    def asker(self, app_id: str, host: str) -> Callable[[str, str], object] | None:
        """For a host another portal runs (a host portal), a way to read a runtime value of one
        of its components there (component path, name) -> the value, None while it has none or
        cannot be asked (a reference waits for it); None for the hosts this portal enacts."""
        runner = self.runners.get(host)
        if not getattr(runner, "remote", False) or not hasattr(runner, "value"):
            return None

        def ask(path: str, name: str) -> object:
            try:
                return runner.value(app_id, path, path + "/" + name)
            except CddlmError as e:      # not there yet, the host silent or refusing: later
                log.debug("%s/%s on host %s: %s", path, name, host, e)
                return None
        return ask

    def own_value(self, app_id: str, target: str):
        """A runtime value (``COMPONENT/NAME``, or a part of one: ``COMPONENT/NAME/KEY``) of a
        component this portal enacts on a host of its own, as a reference of one of its
        components would read it (``ResolutionError`` while there is none yet): what a share
        sent to a host portal carries in its place."""
        with self.store.read() as conn:
            app = repo.get_app(conn, app_id)
            comp = repo.get_component(conn, app_id, self.tree(app).split_target(target).component) \
                if app is not None else None
        if app is None or comp is None:
            raise ResolutionError("%s names no component" % target, kind="dangling-reference",
                                  path=target)
        return self.values(app, _Rows(self.store, app_id, [comp]), comp).reference(target)

    def _ports(self, host: str | None, pid: int, started: str | None) -> list[int]:
        """The ports a process listens on: from /proc where it runs on this machine, else from
        its host's runner if that can tell (SSH)."""
        runner = self.runners.get(host or "")
        if isinstance(runner, LocalRunner):
            return procfs.listening_ports(pid) if procfs.alive(pid, started) else []
        asks = getattr(runner, "ports", None)
        return asks(pid, started) if asks is not None else []

    def _target(self, app: repo.App, rows: dict[str, repo.Component], comp: repo.Component,
                lenient: bool = False) -> Target:
        """What a runner needs of one component; ``rows``: the application's components by
        path (read once per batch)."""
        node = self.node(app, comp.path)
        hv = self.values(app, rows, comp)
        attrs = hv.attributes(node, lenient) if node is not None else {}
        return Target(app.id, comp.path, comp.type, attrs, comp.host or "", values=hv.property,
                      user=self.accounts(app.owner), generation=app.generation)

    # -- the work loop ------------------------------------------------------------------------
    def _work_loop(self) -> None:
        while not self._stop.is_set():
            try:
                now = self.clock()
                with self.store.single() as conn:
                    ready = queue.next_ready(conn)
                due = ready is not None and ready <= now
                nap = IDLE_WAIT if ready is None else min(IDLE_WAIT, max(0.01, ready - now))
                items = []
                if due:
                    with self.store.write() as conn:
                        items = queue.claim_batch(conn, self.id, now, self.settings.lease_seconds,
                                                  BATCH, not self.store.is_sqlite,
                                                  share=self.settings.engine_workers)
            except StoreUnavailable as e:
                log.warning("cannot claim work: %s", e)
                self._stop.wait(1.0)
                continue
            if not items:
                # new work wakes the workers; items due later and leases that expire (or
                # work another portal on the store added) are looked for by one idle worker
                # at a time, the looker: when due, and at least every IDLE_WAIT seconds
                looking = self._looker.acquire(blocking=False)
                try:
                    self._wake.wait(nap if looking else LOOKER_RELIEF)
                finally:
                    if looking:
                        self._looker.release()
                self._wake.clear()
                continue
            if not self._looker.locked():
                self._wake.set()    # the looker found work: another idle worker looks on
            batch = _Batch(items)
            metrics.claimed(batch.action, len(items))
            try:
                self._perform(batch)
            except Superseded:
                self._drop(batch)
            except Lost:
                log.info("lost the lease of %d %s item(s) of %s", len(batch.held), batch.action,
                         batch.app_id)
            except StoreUnavailable as e:
                log.warning("store unavailable while doing %s: %s", batch.action, e)
            except Exception:
                log.exception("work items %s failed unexpectedly", items[:3])
                for item in items:
                    if item.id in batch.held:
                        self._give_up(item)

    def _drop(self, batch: "_Batch") -> None:
        """Forget superseded items and let the newer intent plan the next work."""
        self._finish(batch, set(batch.held))

    def _finish(self, batch: "_Batch", ids: set[int]) -> None:
        """Forget these items of a batch unenacted, and let the plan say what comes next."""
        with self.store.write() as conn:
            repo.lock_app(conn, batch.app_id, light=True)
            queue.finish_many(conn, sorted(ids))
            _, added = reconcile(conn, batch.app_id, self.clock())
        batch.held.difference_update(ids)
        self._after(added)

    def _later(self, items: list[queue.Item], delay: float) -> None:
        """The runner asked to be asked again (a remote host busy or silent): in one
        transaction, however many items (one each made a batch of thousands queue for the
        store's write lock as many times)."""
        if not items:
            return
        try:
            with self.store.write() as conn:
                queue.retry_later(conn, [i.id for i in items], self.id, self.clock() + delay)
        except StoreUnavailable:
            pass

    def _give_up(self, item: queue.Item) -> None:
        """An unexpected error: retry later with back-off; after 5 attempts fail the component."""
        now = self.clock()
        try:
            with self.store.write() as conn:
                repo.lock_app(conn, item.app_id, light=True)
                if item.attempts >= 5:
                    comp = repo.get_component(conn, item.app_id, item.path)
                    if comp is not None and comp.observed in states.LIVE:
                        repo.update_components(conn, item.app_id, [(item.path, dict(
                            observed=states.FAILED, updated=now,
                            info="internal error during %s" % item.action))])
                    queue.finish(conn, item.id)
                    reconcile(conn, item.app_id, now)
                else:
                    queue.retry_later(conn, item.id, self.id, now + 2 ** item.attempts)
        except StoreUnavailable:
            pass

    def _keep_lease(self, batch: "_Batch", reporter: "_Reporter") -> Callable[[], None]:
        """Called while a batch waits: records the outcomes in hand when it is time, renews the
        leases, and raises ``Superseded`` soon after a newer intent (a terminate during a
        readiness wait stops the wait within a second)."""
        now = time.monotonic()
        state = {"lease": now + self.settings.lease_seconds / 3, "intent": now + INTENT_CHECK}

        def keep() -> None:
            if self._stop.is_set():
                raise Lost("engine stopping")
            reporter.add([])
            now = time.monotonic()
            if batch.action != "stop" and now >= state["intent"]:
                with self.store.single() as conn:
                    app = repo.get_app(conn, batch.app_id, light=True)
                if app is None or app.generation > batch.generation:
                    raise Superseded()
                state["intent"] = now + INTENT_CHECK
            if now >= state["lease"]:
                with self.store.write() as conn:
                    if not queue.extend_many(conn, sorted(batch.held), self.id,
                                             self.clock() + self.settings.lease_seconds):
                        raise Lost("lease lost")
                state["lease"] = now + self.settings.lease_seconds / 3
        return keep

    def _perform(self, batch: "_Batch") -> None:
        with self.store.read() as conn:
            app = repo.get_app(conn, batch.app_id)
            # the batch's own components; others only if a reference asks for one
            comps = repo.get_components_at(conn, batch.app_id, [i.path for i in batch.items]) \
                if app else []
            down = repo.down_hosts(conn) if comps else {}
        rows = _Rows(self.store, batch.app_id, comps)
        gone = {i.id for i in batch.items if i.path not in rows}
        if gone:
            self._finish(batch, gone)
        items = [i for i in batch.items if i.path in rows]
        if app is None or not items:
            return
        if batch.generation < app.generation and batch.action != "stop":
            raise Superseded()
        action = batch.action
        now_known: list[tuple[queue.Item, Outcome]] = []
        later: list[queue.Item] = []
        jobs: dict[int, tuple[object, list[tuple[queue.Item, Target, repo.Component]]]] = {}
        for item in items:
            comp = rows[item.path]
            problem = _down_message(comp.host, down[comp.host]) if comp.host in down else None
            runner = self.runner_for(app, comp)
            if runner is None or (problem and action != "stop"):
                # a host marked down still has its local processes: a stop stops them
                now_known.append((item, Outcome("stopped") if action == "stop" else Outcome(
                    "failed", problem or "host %s has no local agent" % comp.host)))
                continue
            try:
                # processes resolve their peers' runtime values when they start, not at deploy;
                # another portal's component: that portal resolves its attributes
                lenient = action == "stop" or (action == "deploy" and comp.type != "file")
                target = _by_path(app.id, comp) if getattr(runner, "remote", False) \
                    else self._target(app, rows, comp, lenient)
            except CddlmError as e:
                if getattr(e, "kind", "") == "unresolved-reference" and action != "stop" \
                        and item.attempts < WAIT_FOR_VALUE_ATTEMPTS:
                    # a lazy reference to a runtime value another component has not produced
                    # yet (its pid, its port): ask again shortly instead of failing
                    later.append(item)
                    continue
                now_known.append((item, Outcome("stopped" if action == "stop" else "failed",
                                                "cannot resolve attributes: %s" % e)))
                continue
            jobs.setdefault(id(runner), (runner, []))[1].append((item, target, comp))
            batch.hosts[item.path] = comp.host
        if later:
            with self.store.write() as conn:
                queue.retry_later(conn, [i.id for i in later], self.id, self.clock() + WAIT_FOR_VALUE_STEP)
            batch.held.difference_update(i.id for i in later)
        if now_known:
            self._record(batch, now_known)
        if jobs:
            self._enact(batch, jobs)

    def _enact(self, batch: "_Batch", jobs: dict[int, tuple]) -> None:
        """Do one action on the components of a batch, host by host, recording outcomes as
        they come (a few transactions, whatever the batch's size)."""
        action = batch.action
        if action in ("start", "stop"):
            # the intent first, so a crash or a concurrent liveness check reads it right
            # (starting: adopt, do not start twice; stopping: its exit is no failure)
            mark = states.STARTING if action == "start" else states.STOPPING
            self._mark(batch, [c for _, group in jobs.values() for _, _, c in group
                               if (c.observed == states.DEPLOYED if action == "start"
                                   else c.observed != states.STOPPING)], mark)
        reporter = _Reporter(lambda pairs: self._record(batch, pairs))
        keep = self._keep_lease(batch, reporter)
        try:
            self._enact_on_hosts(batch, jobs, keep, reporter.add)
        finally:
            reporter.flush()    # what is known is recorded, even when a newer intent came

    def _enact_on_hosts(self, batch: "_Batch", jobs: dict[int, tuple], keep, report) -> None:
        """``jobs``: per runner (a local host's, a host portal's, a delegate's portal's), the
        items it enacts. Runners of other machines that say so (``parallel``: each waits on
        its own host) are enacted side by side, up to ``Settings.parallel_hosts`` at once,
        their reports and lease keeping taken in turn."""
        groups = list(jobs.values())
        apart = [g for g in groups if getattr(g[0], "parallel", False)]
        if len(apart) < 2 or self.settings.parallel_hosts < 2:
            for runner, group in groups:
                self._enact_group(batch, runner, group, keep, report)
            return
        lock = threading.Lock()

        def in_turn(fn: Callable) -> Callable:
            def call(*args):
                with lock:
                    return fn(*args)
            return call
        keep, report = in_turn(keep), in_turn(report)
        with ThreadPoolExecutor(min(len(apart), self.settings.parallel_hosts),
                                thread_name_prefix="cddlm-hosts") as pool:
            futures = [pool.submit(self._enact_group, batch, runner, group, keep, report, lock)
                       for runner, group in apart]
            try:
                for runner, group in groups:
                    if not getattr(runner, "parallel", False):
                        self._enact_group(batch, runner, group, keep, report, lock)
            finally:
                errors = [e for e in (f.exception() for f in futures) if e is not None]
        if errors:
            raise errors[0]

    def _enact_group(self, batch: "_Batch", runner, group: list, keep, report,
                     lock: threading.Lock | None = None) -> None:
        """One runner's items of a batch."""
        action = batch.action
        if action == "deploy" and hasattr(runner, "deploy_many"):
            self._many(batch, runner.deploy_many, [(item, target) for item, target, _ in group],
                       keep, report, lock)
        elif action == "deploy":
            for item, target, _ in group:
                self._one(batch, item, report, lambda: runner.deploy(target))
                keep()
        elif action in ("start", "stop"):
            jobs_of = [(item, target, comp.pid, comp.pid_start) for item, target, comp in group]
            many = getattr(runner, action + "_many", None)
            if many is not None:
                self._many(batch, many, jobs_of, keep, report, lock)
            else:          # a runner that does one at a time (another portal's)
                for item, target, pid, pid_start in jobs_of:
                    self._one(batch, item, report, lambda: getattr(runner, action)(
                        target, pid, pid_start, keep))
        else:
            report([(item, Outcome("failed", "unknown action %s" % action)) for item, _, _ in group])

    def _many(self, batch: "_Batch", many: Callable, jobs: list[tuple], keep, report,
              lock: threading.Lock | None = None) -> None:
        """A runner's batch call (``deploy_many``, ``start_many``, ``stop_many``). One that
        cannot go on yet (``Later``: its host does not answer) has the items it did not
        report asked again later, holding no worker meanwhile."""
        reported: set[int] = set()

        def seen(pairs: list) -> None:
            reported.update(item.id for item, _ in pairs)
            report(pairs)
        try:
            many(jobs, keep, seen)
        except Later as e:
            with lock or contextlib.nullcontext():
                back = [item for item, *_ in jobs if item.id not in reported and item.id in batch.held]
                self._later(back, e.delay)
                batch.held.difference_update(item.id for item in back)

    def _one(self, batch: "_Batch", item: queue.Item, report, act: Callable[[], Outcome]) -> None:
        """One item's action. A runner that cannot finish it yet (``Later``: a remote host
        busy or silent) has that item asked again later, holding no worker meanwhile."""
        try:
            outcome = act()
        except Later as e:
            self._later([item], e.delay)
            batch.held.discard(item.id)
            return
        report([(item, outcome)])

    def _mark(self, batch: "_Batch", comps: list[repo.Component], observed: str) -> None:
        """Record a batch's intent (starting, stopping) before doing it, in one transaction."""
        if not comps:
            return
        now = self.clock()
        with self.store.write() as conn:
            app = repo.lock_app(conn, batch.app_id, light=True)
            if not queue.extend_many(conn, sorted(batch.held), self.id,
                                     now + self.settings.lease_seconds):
                raise Lost("lease lost")
            if app is None or (batch.action != "stop" and app.generation > batch.generation):
                raise Superseded()   # a newer intent: this batch's next step is not taken
            repo.set_observed(conn, batch.app_id, [(c.path, observed) for c in comps], now)
        for comp in comps:
            comp.observed = observed
        if observed == states.STOPPING and self.watcher is not None:
            # their ends are the stop's outcomes: the watcher need not report them too
            self.watcher.forget([c.pid for c in comps if c.pid and self._watchable(c.host)])

    def _record(self, batch: "_Batch", pairs: list[tuple[queue.Item, Outcome]]) -> None:
        """Record the outcomes of some of a batch's items, and reconcile once."""
        if not pairs:
            return
        now = self.clock()
        ids = [item.id for item, _ in pairs]
        with self.store.write() as conn:
            app = repo.lock_app(conn, batch.app_id, light=True)
            if not queue.finish_held(conn, ids, self.id):
                raise Lost("lease lost before recording")      # (and nothing is committed)
            if app is not None:
                current = {c.path: c for c in repo.get_components_at(
                    conn, batch.app_id, [item.path for item, _ in pairs])}
                repo.update_components(conn, batch.app_id, [
                    (item.path, self._apply(app, current[item.path], outcome, now))
                    for item, outcome in pairs if item.path in current])
            before = app.event_seq if app else 0
            settle = app is None or self._settles(conn, batch, app, pairs)
            after_app, added = reconcile(conn, batch.app_id, now) if settle else (app, False)
            events = after_app is not None and after_app.event_seq != before
        if settle:
            batch.settled = time.monotonic()
        batch.held.difference_update(ids)
        unwatched = {item.path for item, outcome in pairs
                     if outcome.pid and outcome.event == "running"
                     and self._watchable(batch.hosts.get(item.path))
                     and not self.watcher.watch(outcome.pid, (batch.app_id, item.path))}
        if unwatched:
            self._check(batch.app_id, unwatched)
        self._after(added, events)

    def _settles(self, conn, batch: "_Batch", app: repo.App,
                 pairs: list[tuple[queue.Item, Outcome]]) -> bool:
        """Whether a record must reconcile the application (which reads all its components).
        Not while more of the same action is queued and every outcome is the one the plan
        waits for (deployed, running, stopped): the plan has nothing new to say until the last
        of them (the application's next event needs them all), except that a component
        running in a ``sequence`` lets the next one start. Containers' derived states (where
        there are containers) are brought up to date at least every ``SETTLE_EVERY`` seconds.
        The records of one application are serialised by its lock, so the last one always
        reconciles."""
        quiet = QUIET_OUTCOME.get(batch.action)
        if quiet is None or any(outcome.event not in quiet for _, outcome in pairs):
            return True
        if batch.containers is None:
            batch.containers = any(n.type in states.CONTAINERS for n in self._tree(app)[1].values())
        if batch.containers and time.monotonic() - batch.settled >= SETTLE_EVERY:
            return True
        if batch.action == "start" and any(self._in_sequence(app, item.path) for item, _ in pairs):
            return True
        return not queue.pending(conn, batch.app_id, batch.action)

    def _in_sequence(self, app: repo.App, path: str) -> bool:
        parts = path.split("/")
        for depth in range(1, len(parts)):
            node = self.node(app, "/".join(parts[:depth]))
            if node is not None and node.type == "sequence":
                return True
        return False

    def _after(self, added: bool, events: bool = False) -> None:
        if added:
            self._wake.set()
        if events:
            self._notify_events()

    def _apply(self, app: repo.App, comp: repo.Component, outcome: Outcome,
               now: float) -> dict | None:
        """The new values of a component after a runner's outcome; None if it was stale. Its
        texts (info, the stderr tail, what a host portal said of its failure: its reason and
        its fault) are masked here, the one place component state is recorded: stateInfo,
        terminationInfo, the history and the notifications quote them."""
        values = self._outcome_values(app, comp, outcome, now)
        if values is not None:
            conceal = secrets.of(self.tree(app))
            if conceal and values.get("info"):
                values["info"] = conceal(values["info"])
            for text in ("stderr", "remote"):
                if conceal and values["runtime"].get(text):
                    values["runtime"][text] = conceal.value(values["runtime"][text])
        return values

    def _outcome_values(self, app: repo.App, comp: repo.Component, outcome: Outcome,
                        now: float) -> dict | None:
        event = outcome.event
        attrs = {}
        if event == "failed" and comp.oneshot and outcome.exit_code == 0:
            event = "completed"
        restart = False
        if event == "failed" and comp.type == "process" and app.desired == lifecycle.RUNNING \
                and app.state in (lifecycle.INITIALIZED, lifecycle.RUNNING) and comp.observed in (
                    states.RUNNING, states.STARTING):
            node = self.node(app, comp.path)
            attrs = node.attributes if node else {}
            if attrs.get("restart") == "on-failure" and comp.restarts < int(attrs.get("restart_limit") or 0):
                event, restart = "restart", True
        new = states.component_next(comp.observed, event)
        if new is None:
            return None
        runtime = dict(comp.runtime)
        runtime.update(outcome.runtime)
        values = dict(observed=new, updated=now)
        if outcome.pid is not None:
            values.update(pid=outcome.pid, pid_start=outcome.pid_start)
        if outcome.info is not None or (new == states.STOPPED and app.desired == lifecycle.TERMINATED):
            # stopped by a terminate: its note says why it stopped now, or nothing, not what
            # it was noted while it ran or failed (its host down), which the history keeps
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
        return values

    # -- liveness -----------------------------------------------------------------------------
    def _on_exit(self, keys: list) -> None:
        """Watched processes ended (a burst comes as one list): check them, an application at
        a time, each in one transaction."""
        by_app: dict[str, set[str]] = {}
        for app_id, path in keys:
            by_app.setdefault(app_id, set()).add(path)
        self._check_many(by_app)

    def _check_many(self, by_app: dict[str, set[str]]) -> None:
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

    def check_app(self, app_id: str) -> list[dict]:
        return self._check(app_id)

    def _check(self, app_id: str, paths: set[str] | None = None) -> list[dict]:
        """Check an application's running components (those in ``paths``, or all), reading
        only those (all of them only when a file or probe needs its attributes resolved), and
        record every failure in one transaction. Returns a health entry per component checked."""
        with self.store.read() as conn:
            app = repo.get_app(conn, app_id)
            if app is None:
                return []
            comps = repo.get_components(conn, app_id) if paths is None else \
                repo.get_components_at(conn, app_id, sorted(paths))
            down = repo.down_hosts(conn) if comps else {}
        rows: dict[str, repo.Component] | None = {c.path: c for c in comps} if paths is None else None
        outcomes: dict[str, Outcome] = {}
        for comp in comps:
            if comp.observed != states.RUNNING or comp.type in states.CONTAINERS:
                continue
            runner = self.runner_for(app, comp)
            if comp.host in down:
                where = getattr(runner, "where", None)   # a remote host: name its sub-application
                outcomes[comp.path] = Outcome("failed", "%s%s" % (
                    _down_message(comp.host, down[comp.host]),
                    " (%s)" % where(app_id, comp.path) if where else ""))
                continue
            if runner is None:
                continue
            if comp.type == "process" or getattr(runner, "remote", False):
                # the pid is all it takes; another portal's component is asked for by path
                target = _by_path(app_id, comp)
            else:
                if rows is None:
                    with self.store.read() as conn:
                        rows = {c.path: c for c in repo.get_components(conn, app_id)}
                try:
                    target = self._target(app, rows, comp)
                except CddlmError as e:
                    outcomes[comp.path] = Outcome("failed", str(e))
                    continue
            outcome = runner.check(target, comp.pid, comp.pid_start)
            if outcome is not None:
                outcomes[comp.path] = outcome
            elif comp.type == "process" and comp.pid and self._watchable(comp.host):
                self.watcher.watch(comp.pid, (app_id, comp.path))   # from now on, at once
        recorded: set[str] = set()
        if outcomes:
            now = self.clock()
            with self.store.write() as conn:
                current_app = repo.lock_app(conn, app_id)
                before = current_app.event_seq if current_app else 0
                stops, changes = [], []
                current = {c.path: c for c in repo.get_components_at(conn, app_id, sorted(outcomes))} \
                    if current_app is not None else {}
                for comp in comps:
                    if comp.path not in outcomes or comp.path not in current:
                        continue
                    now_row = current[comp.path]
                    if now_row.observed != comp.observed or now_row.pid != comp.pid:
                        continue   # changed meanwhile: this report is stale
                    changes.append((comp.path, self._apply(current_app, now_row,
                                                           outcomes[comp.path], now)))
                    recorded.add(comp.path)
                    if comp.host in down and comp.pid and comp.host in self.runners:
                        stops.append((comp.path, "stop"))   # failed with its host: stop it too
                repo.update_components(conn, app_id, changes)
                after, added = reconcile(conn, app_id, now) if recorded else (current_app, False)
                if stops and current_app is not None:
                    added = queue.add(conn, app_id, stops, current_app.generation, now) > 0 or added
            self._after(added, after is not None and after.event_seq != before)
        return [_health(c, outcomes.get(c.path) if c.path in recorded else None, self.on_node(c))
                for c in comps]

    def check_all(self, host: str | None = None, hosts: list[str] | None = None) -> None:
        """The scheduled liveness pass: one narrow read of the running components, and a
        check of those the exit watcher does not cover (files, probes, processes it could
        not watch, everything on a host marked down; of one host if given). The processes of
        local hosts, which the watcher covers, are read only when new since the last full read
        and every ``FULL_SWEEP`` passes (to watch those it does not: started by another portal
        on the store, or past a descriptor limit), so an idle pass costs little however many
        run. ``hosts``: a pass over those hosts only, between the scheduled ones (SSH hosts,
        whose exits no watcher reports)."""
        whole = host is None and hosts is None
        if hosts is not None and not hosts:
            return
        if hosts is None:
            self._passes += 1
        query = select(components.c.app_id, components.c.path, components.c.type,
                       components.c.pid, components.c.host).where(
            components.c.observed == states.RUNNING, components.c.type.not_in(list(states.CONTAINERS)))
        if host is not None:
            query = query.where(components.c.host == host)
        if hosts is not None:
            query = query.where(components.c.host.in_(hosts))
        with self.store.read() as conn:
            down = repo.down_hosts(conn)
            watched = [h for h in self.runners if self._watchable(h) and h not in down]
            if whole and watched and self._passes % FULL_SWEEP != 1:
                # and those that came since the last full read (another portal's, perhaps)
                query = query.where(or_(components.c.type != "process",
                                        components.c.host.not_in(watched),
                                        components.c.updated >= self._swept - 5.0))
            elif whole:
                self._swept = self.clock()
            rows = conn.execute(query).all()
        watcher = self.watcher
        by_app: dict[str, set[str]] = {}
        surveys: dict[str, list] = {}
        asks: dict[tuple[str, str], list[str]] = {}
        for app_id, path, kind, pid, on in rows:
            if kind == "process" and on not in down and (
                    on not in self.runners or (self._watchable(on) and watcher.watching(pid))):
                continue
            if on not in down and hasattr(self.runners.get(on), "attention"):
                asks.setdefault((on, app_id), []).append(path)
                continue
            by_app.setdefault(app_id, set()).add(path)
            if kind == "process" and on not in down and hasattr(self.runners[on], "survey"):
                surveys.setdefault(on, []).append((app_id, path, pid))
        for on, procs in surveys.items():
            # a runner of another machine's processes looks at all of them at once (one
            # command per host per pass); the checks below read what it saw
            self.runners[on].survey(procs)
        for (on, app_id), paths in asks.items():
            # another portal's components: only those its answer shows changed are checked
            changed = self.runners[on].attention(app_id, paths)
            if changed:
                by_app.setdefault(app_id, set()).update(changed)
        self._check_many(by_app)

    def _readopt(self) -> None:
        """After a restart: watch the processes recorded as running, so deaths are prompt,
        and keep their logs capped."""
        with self.store.read() as conn:
            rows = conn.execute(select(components.c.app_id, components.c.path, components.c.pid,
                                       components.c.host)
                                .where(components.c.observed == states.RUNNING,
                                       components.c.pid.is_not(None))).all()
        unwatched: dict[str, set[str]] = {}
        for app_id, path, pid, host in rows:
            runner = self.runners.get(host or "")
            if not self._watchable(host):
                continue
            if self.watcher.watch(pid, (app_id, path)):
                logs.CAPPER.watch(runner.app_dir(app_id), path, self.settings.limits.max_log_bytes)
            else:
                unwatched.setdefault(app_id, set()).add(path)
        self._check_many(unwatched)

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
        with self._trees_lock:
            self._trees.forget(app_id)
        # each runner once (one may serve several hosts: a Slurm cluster's)
        for runner in {id(r): r for r in list(self.runners.values())
                       + list(self.delegates.values())}.values():
            runner.remove_app(app_id)


class _Trees:
    """Applications' component trees with their index by path, per generation. Trees used in
    the last ``in_use`` seconds are kept whatever their size (a batch asks for its tree once
    per component); the others go, least recently used first, while all hold more than
    ``nodes`` nodes. (Before: every tree was kept until 512 had been built; each destroyed
    application of 10,000 components left about 30 MB.) Not thread-safe: the engine holds its
    lock."""

    def __init__(self, nodes: int = TREE_NODES, in_use: float = TREE_IN_USE,
                 clock: Callable[[], float] = time.monotonic):
        self.limit, self.in_use, self.clock = nodes, in_use, clock
        self._by_key: OrderedDict[tuple[str, int], list] = OrderedDict()   # -> [found, used]
        self.nodes = 0

    def get(self, app_id: str, generation: int) -> tuple[Deployment, dict] | None:
        entry = self._by_key.get((app_id, generation))
        if entry is None:
            return None
        entry[1] = self.clock()
        self._by_key.move_to_end((app_id, generation))
        return entry[0]

    def put(self, app_id: str, generation: int, found: tuple[Deployment, dict]) -> None:
        self._drop((app_id, generation))
        now = self.clock()
        self._by_key[(app_id, generation)] = [found, now]
        self.nodes += len(found[1])
        while self.nodes > self.limit:
            key, (_, used) = next(iter(self._by_key.items()))
            if now - used < self.in_use:        # (the others were used later still)
                break
            self._drop(key)

    def forget(self, app_id: str) -> None:
        """Every generation of a destroyed application."""
        for key in [k for k in self._by_key if k[0] == app_id]:
            self._drop(key)

    def _drop(self, key: tuple[str, int]) -> None:
        entry = self._by_key.pop(key, None)
        if entry is not None:
            self.nodes -= len(entry[0][1])


class _Rows(dict):
    """An application's components by path: those read with a batch, and any other read on
    first use (``HostValues`` asks for the peers a reference names), so a batch reads what it
    needs, not all the application's components."""

    def __init__(self, store: Store, app_id: str, comps: list[repo.Component]):
        super().__init__((c.path, c) for c in comps)
        self._store, self._app_id = store, app_id

    def get(self, path, default=None):
        if not dict.__contains__(self, path):
            with self._store.read() as conn:
                self[path] = repo.get_component(conn, self._app_id, path)
        found = dict.get(self, path)
        return default if found is None else found


class _Reporter:
    """Outcomes of a batch on their way to the store: recorded together, at most every
    ``REPORT_EVERY`` seconds and never more often than four times the last record took (a
    record may reconcile the whole application, so a large one is recorded in fewer, larger
    transactions); ``flush`` records the rest."""

    def __init__(self, record: Callable[[list], None]):
        self._record = record
        self._pending: list = []
        self._last = float("-inf")      # the first outcomes are recorded at once
        self._gap = REPORT_EVERY

    def add(self, pairs: list) -> None:
        self._pending.extend(pairs)
        if self._pending and time.monotonic() - self._last >= self._gap:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        pairs, self._pending = self._pending, []
        started = time.monotonic()
        self._record(pairs)
        self._last = time.monotonic()
        self._gap = max(REPORT_EVERY, 4 * (self._last - started))


class _Batch:
    """Work items of one application, action and generation, claimed together; ``held``: the
    ids still leased and not yet recorded."""

    def __init__(self, items: list[queue.Item]):
        self.items = items
        self.app_id = items[0].app_id
        self.action = items[0].action
        self.generation = items[0].generation
        self.held = {i.id for i in items}
        self.hosts: dict[str, str | None] = {}     # path -> host, of the items enacted
        self.settled = time.monotonic()             # when its records last reconciled
        self.containers: bool | None = None         # whether its application has containers


def _by_path(app_id: str, comp: repo.Component) -> Target:
    """A target without attributes: enough to check a process by its pid, or for another
    portal, which resolves its component's attributes itself and is asked by path."""
    return Target(app_id, comp.path, comp.type, {}, comp.host or "")


def _down_message(host: str | None, reason: str | None) -> str:
    return "host %s is down%s" % (host, ": " + reason if reason else "")


def _health(comp: repo.Component, outcome: Outcome | None,
            on_node: tuple[int | None, list[int]] | None) -> dict:
    """A component's health as ping reports it; ``outcome`` is a failure just recorded;
    ``on_node``: its pid on its node, where its runner reads that (``Engine.on_node``)."""
    state = states.FAILED if outcome is not None and outcome.event == "failed" else comp.observed
    return {"path": comp.path, "type": comp.type, "host": comp.host, "state": state,
            "healthy": state != states.FAILED,
            "pid": on_node[0] if on_node is not None else comp.pid, "restarts": comp.restarts,
            "detail": (outcome.info if outcome else comp.info) or ""}
