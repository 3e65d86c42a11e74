"""Scale (issue 11): thousands of running processes under one portal, and the exit-watcher race.

The cliff: every running component holds a pidfd, so a portal with a thousand processes has
descriptors past 1024, where anything that waits with ``select()`` dies. These tests run a
real portal (a subprocess on a real port) past that line, talk to it over new connections all
the while, kill it with SIGKILL and start it again, and stop everything.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time

import pytest
import requests
from lxml import etree

from cddlm.client import Portal

NATIVE = "urn:cddlm:lang:components:1"
PROCESSES = 2500


def _many(n: int, argv: list[str]) -> etree._Element:
    app = etree.Element("{%s}application" % NATIVE)
    for i in range(n):
        comp = etree.SubElement(app, "{%s}component" % NATIVE, name="p%d" % i, type="process")
        attr = etree.SubElement(comp, "{%s}attribute" % NATIVE, name="argv")
        for word in argv:
            etree.SubElement(attr, "{%s}item" % NATIVE).text = word
    return app


def _components_running(root) -> dict[int, str]:
    """pid -> component of the processes started under ``root`` (by their environment)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if not os.readlink("/proc/%s/cwd" % entry).startswith(str(root)):
                continue
            env = open("/proc/%s/environ" % entry, "rb").read().split(b"\0")
        except OSError:
            continue
        for var in env:
            if var.startswith(b"CDDLM_COMPONENT="):
                found[int(entry)] = var.split(b" ", 1)[-1].decode()
    return found


def _descriptors(pid: int) -> int:
    return len(os.listdir("/proc/%d/fd" % pid))


class Knocker:
    """New connections to the portal, one after the other, while a test does its work: each
    must be answered. Counts those answered while the portal held more than 1024 descriptors."""

    def __init__(self, base: str, pid: int):
        self.base, self.pid = base, pid
        self.answered = self.past_1024 = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Knocker":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                many = _descriptors(self.pid) > 1024
            except OSError:
                many = False
            try:
                with requests.Session() as s:     # a new connection each time
                    # (the 2-core machine is busy spawning thousands: a slow answer is no
                    # refusal, so the wait is long; the failure names what happened)
                    r = s.get(self.base + "/cddlm/portal?wsdl", timeout=30)
                if r.status_code != 200:
                    self.failures.append("HTTP %d" % r.status_code)
                    continue
            except requests.RequestException as e:
                self.failures.append(repr(e)[:200])
                continue
            self.answered += 1
            self.past_1024 += many


@pytest.mark.slow
def test_thousands_of_processes_new_connections_restart_and_terminate(live_portal, tmp_path):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < PROCESSES + 512:
        pytest.skip("the open-file limit (%d) is below %d processes' pidfds" % (hard, PROCESSES))
    state = tmp_path / "state"
    state.mkdir()
    lp = live_portal(state_dir=state)
    base = lp.url.rsplit("/cddlm/", 1)[0]
    portal = Portal(lp.url, timeout=120)
    app = portal.create("many")
    app.initialize(NATIVE, body=_many(PROCESSES, ["sleep", "3600"]))
    started = time.monotonic()
    with Knocker(base, lp.proc.pid) as knock:
        app.run()
        while (state_now := app.state()) != "running":     # one read: it may turn running between two
            assert state_now in ("instantiated", "initialized"), state_now
            assert time.monotonic() - started < 120, "not running 120 s after run"
            time.sleep(0.5)
        up = time.monotonic() - started
        time.sleep(1.0)                  # a few more connections with everything running
    assert not knock.failures, knock.failures[:5]
    assert knock.past_1024 > 0, (knock.answered, _descriptors(lp.proc.pid))
    running = _components_running(state)
    assert len(running) == PROCESSES, len(running)
    print("%d processes running %.1f s after run" % (PROCESSES, up))

    # SIGKILL the portal: the processes live on; a new portal re-adopts every one
    lp.stop(signal.SIGKILL)
    assert set(_components_running(state)) == set(running)
    lp = live_portal(state_dir=state)
    portal = Portal(lp.url, timeout=120)
    app = portal.lookup("many")
    with Knocker(lp.url.rsplit("/cddlm/", 1)[0], lp.proc.pid) as knock:
        assert app.state() == "running", "after the restart: %s" % app.state()
        assert _descriptors(lp.proc.pid) > PROCESSES     # a pidfd per re-adopted process
        time.sleep(3.0)                                  # liveness passes come and go
        assert app.state() == "running", "3 s after the restart: %s, %s" % (
            app.state(), [h for h in app.ping()["health"] if h["state"] != "running"][:3])
        health = app.ping()["health"]
        assert len(health) == PROCESSES and {h["state"] for h in health} == {"running"}, \
            (len(health), [h for h in health if h["state"] != "running"][:3])
        started = time.monotonic()
        app.terminate()
        while app.state() != "terminated":
            assert time.monotonic() - started < 60, "not terminated 60 s after terminate"
            time.sleep(0.2)
        down = time.monotonic() - started
    assert not knock.failures, knock.failures[:5]
    assert knock.answered > 0 and knock.past_1024 > 0
    deadline = time.monotonic() + 10
    while _components_running(state) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _components_running(state), "%d processes left 10 s after terminated" % len(
        _components_running(state))
    print("%d processes terminated in %.1f s" % (PROCESSES, down))


# -- the exit watcher and the liveness pass race for one child ---------------------------------
def test_a_child_that_ended_is_reported_alike_to_every_thread_that_asks(tmp_path):
    """Two threads (the exit watcher, a liveness pass) ask about each ending child at once:
    both learn its exit status; neither hears 'exit status unknown: adopted after a restart'
    (the first to reap it used to take the status with it)."""
    from cddlm.application.enactment.local import LocalRunner, Target
    runner = LocalRunner("h", str(tmp_path))
    children = []
    for i in range(100):
        t = Target("urn:uuid:race", "c%d" % i, "process",
                   {"argv": ["sh", "-c", "sleep 0.%d; exit 3" % (i % 3)]}, "h")
        out = runner.start(t, None, None, lambda: None)
        assert out.event == "running", out.info
        children.append((out.pid, out.pid_start))
    heard: dict[int, list] = {pid: [] for pid, _ in children}
    barrier = threading.Barrier(2)

    def ask() -> None:
        barrier.wait()
        waiting = list(children)
        while waiting:
            for pid, started in list(waiting):
                ended = runner.check_process(pid, started)
                if ended is not None:
                    heard[pid].append(ended)
                    waiting.remove((pid, started))

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for pid, outcomes in heard.items():
        assert len(outcomes) == 2
        for o in outcomes:
            assert o.exit_code == 3 and "unknown" not in (o.info or ""), (pid, o.info)


def test_many_short_lived_applications_each_fail_with_their_exit_status(tmp_path):
    """Hundreds of applications whose process exits with status 3 soon after it starts, with
    liveness passes every 20 ms racing the exit watcher: every one fails saying 'exited with
    status 3', none 'exit status unknown' (2 of 4,000 did on main when the issue was filed)."""
    from tests.conftest import _terminate_all, make_portal
    from tests.test_components import comp, deploy, wait
    portal = make_portal(tmp_path, liveness_interval=0.02)
    try:
        ids = [deploy(portal, comp("p", argv=["sh", "-c", "sleep 0.%d; exit 3" % (i % 4)]))
               for i in range(300)]
        reasons = []
        for app_id in ids:
            assert wait(portal, app_id, "failed", timeout=60) == "failed"
            reasons.append(portal.service.get(app_id).termination_info["reason"])
        wrong = [r for r in reasons if "exited with status 3" not in r]
        assert not wrong, wrong[:3]
    finally:
        _terminate_all(portal)
        portal.stop()


# -- the pieces of batching ----------------------------------------------------------------------
def test_a_batch_is_one_application_action_and_generation_and_a_share_of_it(db_url):
    from cddlm.application import repository as repo
    from cddlm.application.enactment import queue
    from cddlm.application.store import Store
    store = Store(db_url)
    store.migrate()
    pg = not store.is_sqlite
    with store.write() as conn:
        big = repo.create_app(conn, 1.0, id=repo.new_id(), name="big")
        other = repo.create_app(conn, 1.0, id=repo.new_id(), name="other")
        queue.add(conn, big.id, [("c%d" % i, "deploy") for i in range(40)], 1, 0.0)
        queue.add(conn, big.id, [("c0", "start"), ("c1", "start")], 1, 0.0)
        queue.add(conn, big.id, [("c%d" % i, "deploy") for i in range(5)], 2, 0.0)
        queue.add(conn, other.id, [("x", "deploy")], 1, 0.0)
    with store.write() as conn:
        first = queue.claim_batch(conn, "e1", 1.0, 30.0, 8, pg, share=2)
        second = queue.claim_batch(conn, "e2", 1.0, 30.0, 8, pg, share=2)
        third = queue.claim_batch(conn, "e3", 1.0, 30.0, 100, pg)
        fourth = queue.claim_batch(conn, "e4", 1.0, 30.0, 100, pg)
    # the head and more of its application, action and generation: a share of those waiting
    # (half of 40, then half of the 20 left) when that is more than the limit
    assert [len(first), len(second), len(third)] == [20, 10, 10]
    assert {(i.app_id, i.action, i.generation) for i in first + second + third} == {
        (big.id, "deploy", 1)}
    assert len({i.path for i in first + second + third}) == 40
    # c0..c4's starts and newer deploys wait while their deploys are held (one action per
    # component at a time): the other application's item comes next
    assert [(i.app_id, i.path) for i in fourth] == [(other.id, "x")]
    with store.write() as conn:
        assert queue.extend_many(conn, [i.id for i in first], "e1", 60.0)
        assert not queue.extend_many(conn, [first[0].id, second[0].id], "e1", 60.0)
        queue.finish_many(conn, [i.id for i in first])
        fifth = queue.claim_batch(conn, "e1", 1.0, 30.0, 100, pg)
    assert {(i.path, i.action, i.generation) for i in fifth} == {("c0", "start", 1),
                                                                 ("c1", "start", 1)}
    store.dispose()


def test_the_exit_watcher_hands_over_a_burst_of_exits_together(tmp_path):
    import subprocess
    from cddlm.application.enactment.watch import ExitWatcher
    calls: list[list] = []
    done = threading.Event()
    seen: set = set()

    def on_exit(keys: list) -> None:
        calls.append(keys)
        seen.update(keys)
        if len(seen) == 60:
            done.set()

    watcher = ExitWatcher(on_exit)
    procs = [subprocess.Popen(["sleep", "0.5"]) for _ in range(60)]
    try:
        for i, p in enumerate(procs):
            assert watcher.watch(p.pid, ("app", "c%d" % i))
        assert watcher.watching(procs[0].pid) and len(watcher) == 60
        assert done.wait(10), len(seen)
        assert len(calls) < 20, [len(c) for c in calls]    # not one call per exit
        assert not watcher.watching(procs[0].pid) and len(watcher) == 0
    finally:
        for p in procs:
            p.wait()
        watcher.close()


def test_the_exit_watcher_forgets_processes_it_is_told_to_and_reports_the_rest(tmp_path):
    """A stop forgets the processes it stops (their ends are its outcomes); the others are
    still reported, and a forgotten pidfd is closed by the watcher thread, not leaked."""
    import subprocess
    from cddlm.application.enactment.watch import ExitWatcher
    seen: list = []
    done = threading.Event()

    def on_exit(keys: list) -> None:
        seen.extend(keys)
        if any(k == "kept" for k in keys):
            done.set()

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    watcher = ExitWatcher(on_exit)
    forgotten = [subprocess.Popen(["sleep", "0.3"]) for _ in range(20)]
    kept = subprocess.Popen(["sleep", "0.6"])
    try:
        before = open_fds()
        for i, p in enumerate(forgotten):
            assert watcher.watch(p.pid, "forgotten%d" % i)
        assert watcher.watch(kept.pid, "kept")
        assert open_fds() == before + 21
        watcher.forget([p.pid for p in forgotten] + [999999999])   # an unknown pid is ignored
        assert len(watcher) == 1 and not watcher.watching(forgotten[0].pid)
        assert done.wait(10)
        assert seen == ["kept"]
        deadline = time.monotonic() + 5
        while open_fds() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert open_fds() == before
    finally:
        for p in forgotten + [kept]:
            p.wait()
        watcher.close()


def test_an_exit_watcher_stuck_in_its_callback_closes_its_descriptors_itself(tmp_path):
    """``close`` that gives up waiting for a thread still in its callback leaves the
    descriptors open (their numbers must not be reused under its poll); the thread closes
    them when it ends, and nobody closes them twice."""
    import subprocess
    from cddlm.application.enactment.watch import ExitWatcher
    inside, leave = threading.Event(), threading.Event()

    def on_exit(keys: list) -> None:
        inside.set()
        leave.wait(10)

    def open_fds() -> set[str]:
        return set(os.listdir("/proc/self/fd"))

    before = open_fds()
    watcher = ExitWatcher(on_exit)
    ending = subprocess.Popen(["true"])
    waiting = subprocess.Popen(["sleep", "30"])
    try:
        assert watcher.watch(ending.pid, "ending") and watcher.watch(waiting.pid, "waiting")
        assert inside.wait(10)
        mine = open_fds() - before
        watcher.close(timeout=0.2)                  # the thread is still in on_exit
        assert open_fds() - before == mine          # nothing closed under it
        leave.set()
        watcher._thread.join(5)
        assert not watcher._thread.is_alive()
        assert not (open_fds() - before) & mine     # the thread closed them all
    finally:
        leave.set()
        waiting.kill()
        waiting.wait()
        ending.wait()


def test_a_flat_application_is_reconciled_once_per_action_not_per_record(tmp_path, monkeypatch):
    """A reconcile reads every component of the application; the records of a deploy, start
    or stop whose outcomes are all the expected ones reconcile only at the last of them (the
    plan has nothing to say before), so N components cost O(N) reads of the tree per action,
    not O(N) per record. A failure still reconciles at once (tests/test_components.py)."""
    from xml.sax.saxutils import escape
    from cddlm.application.enactment import engine as engine_module
    from tests.conftest import _terminate_all, make_portal
    from tests.test_components import comp, deploy, wait
    calls: list[str] = []
    real = engine_module.reconcile

    def counting(conn, app_id, now):
        calls.append(app_id)
        return real(conn, app_id, now)

    monkeypatch.setattr(engine_module, "reconcile", counting)
    # records come at least every 0.25 s: a slow start and stop make several of each
    monkeypatch.setattr(engine_module, "REPORT_EVERY", 0.0)
    portal = make_portal(tmp_path, liveness_interval=60)
    try:
        # ready one after another over about a second; each takes a while to stop too
        script = ('trap "sleep 0.$((%d %% 8)); exit 0" TERM; sleep 0.$((%d %% 9)); touch ready; '
                  'sleep 300 & wait; wait')
        body = "".join(comp("p%d" % i, argv=["sh", "-c", escape(script % (i, i))],
                            readiness={"file": "ready", "interval": "0.02"})
                       for i in range(200))
        app_id = deploy(portal, body)
        assert wait(portal, app_id, "running", timeout=60) == "running"
        up = calls.count(app_id)
        calls.clear()
        portal.service.terminate(app_id, "done")
        assert wait(portal, app_id, "terminated", timeout=60) == "terminated"
        down = calls.count(app_id)
        # deploy and start: one each (one batch holds these 200 items); stop: one
        assert up <= 3, up          # (8 when each record reconciled)
        assert down <= 2, down      # (3)
    finally:
        _terminate_all(portal)
        portal.stop()


# -- a batch keeps its lease and reports while it spawns and while a failed readiness stops --
def test_a_failed_readiness_stops_its_process_within_the_batch_keeping_the_lease(tmp_path):
    """A component that is never ready and ignores TERM is stopped (KILL after 2 s) as part of
    its batch's wait: the batch goes on reporting its other components and keeping its lease
    meanwhile (the stop used to hold the batch's thread, lease unrenewed, for its grace)."""
    from cddlm.application.enactment import procfs
    from cddlm.application.enactment.local import LocalRunner, Target
    runner = LocalRunner("h", str(tmp_path))
    stubborn = Target("urn:uuid:ready", "stubborn", "process",
                      {"argv": ["sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"],
                       "readiness": {"file": "never-there", "timeout": 0.3}}, "h")
    slow = Target("urn:uuid:ready", "slow", "process",
                  {"argv": ["sh", "-c", "sleep 1; touch there; exec sleep 60"],
                   "readiness": {"file": "there", "timeout": 10}}, "h")
    kept: list[float] = []
    reported: list = []
    began = time.monotonic()
    runner.start_many([("stubborn", stubborn, None, None), ("slow", slow, None, None)],
                      lambda: kept.append(time.monotonic() - began),
                      lambda pairs: reported.extend((time.monotonic() - began, k, o)
                                                    for k, o in pairs))
    at = {k: t for t, k, _ in reported}
    outcome = {k: o for _, k, o in reported}
    assert outcome["stubborn"].event == "failed" and "not ready" in outcome["stubborn"].info
    assert outcome["slow"].event == "running"
    # "slow" became ready while "stubborn" was being stopped, and was reported then, not
    # after the stop's 2 s
    assert at["slow"] < at["stubborn"] - 0.5, reported
    assert at["stubborn"] >= 2.0        # its KILL came after the grace
    assert not procfs.alive(outcome["stubborn"].pid, outcome["stubborn"].pid_start)
    gaps = [b - a for a, b in zip(kept, kept[1:])]
    # kept every round (0.1-0.2 s apart): 1 s allows for a loaded machine's scheduling, where
    # a stop holding the batch's thread left it unkept for the whole 2 s grace
    assert kept[-1] > 2.0 and max(gaps) < 1.0, kept
    runner.stop_many([("slow", slow, outcome["slow"].pid, outcome["slow"].pid_start)], None,
                     lambda pairs: None)


def test_a_batch_keeps_its_lease_and_reports_while_it_spawns(tmp_path):
    """``keep_lease`` is called between spawns, and the outcomes in hand when it raises (the
    lease is lost) have been reported: nothing started goes unrecorded."""
    from cddlm.application.enactment.local import LocalRunner, Target

    class Lost(Exception):
        pass

    runner = LocalRunner("h", str(tmp_path))
    jobs = [(i, Target("urn:uuid:spawn", "c%d" % i, "process", {"argv": ["sleep", "60"]}, "h"),
             None, None) for i in range(20)]
    calls = []
    reported: list = []

    def keep() -> None:
        calls.append(len(reported))
        if len(calls) == 5:
            raise Lost()
    with pytest.raises(Lost):
        runner.start_many(jobs, keep, reported.extend)
    try:
        assert calls == [1, 2, 3, 4, 5]         # called after each spawn, each reported first
        assert [k for k, _ in reported] == [0, 1, 2, 3, 4]
        assert all(o.event == "running" for _, o in reported)
    finally:
        runner.stop_many([(k, jobs[k][1], o.pid, o.pid_start) for k, o in reported], None,
                         lambda pairs: None)


def test_processes_are_started_from_a_descriptor_table_of_their_own(tmp_path):
    """The k-th start of a portal watching k processes copied and closed k descriptors (one
    pidfd each): starts run on the spawner's thread, whose table holds only 0-2 and what it
    opens itself, whatever the portal holds; its errors reach the caller."""
    from cddlm.application.enactment import spawner
    sp = spawner.spawner()
    if not sp.separate:
        pytest.skip("this system cannot give a thread a descriptor table of its own")
    held = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) for _ in range(300)]
    try:
        here = len(os.listdir("/proc/thread-self/fd"))
        there = sp.call(lambda: len(os.listdir("/proc/thread-self/fd")))
        assert here > 300 and there <= 4         # 0-2 and the listing's own
        with pytest.raises(OSError):             # the portal's descriptors are not there
            sp.call(os.fstat, held[-1])
        with pytest.raises(FileNotFoundError):
            sp.call(open, str(tmp_path / "missing"))
    finally:
        for fd in held:
            os.close(fd)


def test_idle_workers_take_turns_looking_at_the_queue(tmp_path, monkeypatch):
    """An idle portal's workers do not each read the queue every second: one looks (when an
    item is due, at least every second), the others sleep until work wakes them; work then
    runs as before."""
    from cddlm.app import Portal as PortalApp
    from cddlm.application.enactment import queue
    from cddlm.application.service import DescriptorInput
    from cddlm.config import Settings
    from cddlm import xmlsafe
    looks: list[float] = []
    real = queue.next_ready

    def counted(conn):
        looks.append(time.monotonic())
        return real(conn)

    monkeypatch.setattr(queue, "next_ready", counted)
    portal = PortalApp(Settings(state_dir=str(tmp_path / "state"), port=0, engine_workers=4))
    portal.url = "http://127.0.0.1:1"
    portal.start()
    try:
        time.sleep(1.0)         # the workers' first looks, then idle
        looks.clear()
        time.sleep(4.0)
        assert 2 <= len(looks) <= 7, len(looks)     # about one a second (each of four: 16)
        svc = portal.service
        app, _ = svc.create(None, None, [], portal.url)
        svc.initialize(app.id, DescriptorInput(NATIVE, body=xmlsafe.parse(etree.tostring(
            _many(12, ["sleep", "30"])))), [], [])
        svc.run(app.id)
        _until(lambda: svc.get(app.id).state == "running", 20)
        svc.terminate(app.id, "done")
        _until(lambda: svc.get(app.id).state == "terminated", 20)
    finally:
        portal.stop()


def _until(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_forked_child_starts_processes_with_a_spawner_of_its_own():
    import multiprocessing
    from cddlm.application.enactment import spawner
    spawner.spawner()                           # the parent's, with its thread
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        # not waiting forever for a thread the child does not have
        assert pool.apply_async(_spawn_in_child).get(timeout=20) == 0


def _spawn_in_child() -> int:
    import subprocess
    from cddlm.application.enactment import spawner
    return spawner.spawner().call(lambda: subprocess.call(["true"]))
