"""Crash safety of the enactment engine (issue 4), on SQLite and on PostgreSQL.

A portal (a real subprocess) deploys, starts and terminates applications of 20 processes and
is killed with SIGKILL at seeded random moments: during deployment and start, again during
its own recovery, and during termination. After each restart the application must settle in
the state last asked for, and then:

- every component has at most one live process (none when terminated);
- each running component's recorded pid is that one process;
- the state history is a legal path through the lifecycle table, and the events in the
  outbox match it one for one, with sequences 1..n;
- after destroy no process and no working directory of the application is left.

The seed is printed, so a failing run can be replayed with CDDLM_CRASH_SEED.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from cddlm.application import lifecycle
from cddlm.application import repository as repo
from cddlm.application.store import Store
from cddlm.application.tables import engines, events, work
from cddlm.client import Portal
from tests.conftest import LivePortal, free_port, kill_leftovers, pg_schema_url, postgres_available

APPS = 7            # three kill points each: 21 per database
COMPONENTS = 20
TUNING = ["--lease-seconds", "3", "--heartbeat", "1", "--liveness-interval", "0.5"]


def descriptor(n: int = COMPONENTS, slow: bool = False) -> bytes:
    argv = ("<item>sh</item><item>-c</item><item>sleep 2; touch ready; exec sleep 300</item>"
            if slow else "<item>sleep</item><item>300</item>")
    ready = '<attribute name="readiness"><item name="file">ready</item></attribute>' if slow else ""
    comps = "".join('<component name="p%02d" type="process"><attribute name="argv">%s</attribute>%s'
                    '</component>' % (i, argv, ready) for i in range(n))
    return ('<application xmlns="urn:cddlm:lang:components:1">%s</application>' % comps).encode()


def live_processes(app_id: str) -> dict[str, list[int]]:
    """Component path -> pids of live (non-zombie) processes that belong to it."""
    out: dict[str, list[int]] = {}
    marker = ("CDDLM_COMPONENT=%s " % app_id).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = open("/proc/%s/environ" % entry, "rb").read().split(b"\0")
            stat = open("/proc/%s/stat" % entry).read()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] in "ZX":
            continue
        for item in env:
            if item.startswith(marker):
                out.setdefault(item[len(marker):].decode(), []).append(int(entry))
    return out


class Harness:
    def __init__(self, root: Path, db: str | None):
        self.root = root
        self.port = free_port()
        self.db = db
        self.state = root / "state"
        self.state.mkdir()
        self.portal: LivePortal | None = None
        self.store = Store(db or "sqlite:///%s" % (self.state / "portal.db"))

    def start(self) -> Portal:
        extra = TUNING + ["--hosts-dir", str(self.root / "hosts")]
        self.portal = LivePortal(self.state, self.port, self.db, extra).start()
        return Portal(self.portal.url)

    def kill(self) -> None:
        self.portal.stop(signal.SIGKILL)

    def restart_after(self, delay: float) -> Portal:
        time.sleep(delay)
        self.kill()
        return self.start()

    def check(self, app_id: str, expected: str) -> None:
        with self.store.read() as conn:
            app = repo.get_app(conn, app_id)
            comps = [c for c in repo.get_components(conn, app_id) if c.type == "process"]
            history = [h[1] for h in repo.get_history(conn, app_id)]
            outbox = [(r.seq, r.message) for r in conn.execute(
                select(events.c.seq, events.c.message).where(events.c.producer == app_id)
                .order_by(events.c.seq))]
        assert app.state == expected, (app.state, app.state_info)
        assert lifecycle.is_legal_history(history), history
        assert [s for s, _ in outbox] == list(range(1, len(history) + 1))
        assert [repo.json.loads(m)["state"] for _, m in outbox] == history
        live = live_processes(app_id)
        assert all(len(pids) == 1 for pids in live.values()), live
        if expected == lifecycle.RUNNING:
            assert len(comps) == COMPONENTS
            for c in comps:
                assert c.observed == "running", (c.path, c.observed)
                assert live.get(c.path) == [c.pid], (c.path, c.pid, live.get(c.path))
        else:
            assert live == {}, live

    def close(self) -> None:
        if self.portal is not None:
            self.portal.stop()
        self.store.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def harness(request, tmp_path):
    if request.param == "sqlite":
        h = Harness(tmp_path, None)
        yield h
        h.close()
    else:
        if not postgres_available():
            pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 (database test, trust auth)")
        with pg_schema_url() as url:
            h = Harness(tmp_path, url)
            yield h
            h.close()
    kill_leftovers(tmp_path)


def test_sigkill_at_random_moments_never_corrupts_or_duplicates(harness):
    seed = int(os.environ.get("CDDLM_CRASH_SEED", random.randrange(1 << 30)))
    print("crash seed", seed)
    rng = random.Random(seed)
    portal = harness.start()
    kills = 0
    for n in range(APPS):
        app = portal.create(name="crash-%d" % n)
        app.initialize("urn:cddlm:lang:components:1", body=_element(descriptor()))
        app.run()
        portal = harness.restart_after(rng.uniform(0.0, 0.6))    # while deploying/starting
        portal = harness.restart_after(rng.uniform(0.0, 0.3))    # while recovering
        kills += 2
        app = portal.application(app.reference)
        assert app.wait_for("running", timeout=60) == "running"
        harness.check(app.id, lifecycle.RUNNING)
        app.terminate("crash test")
        portal = harness.restart_after(rng.uniform(0.0, 0.4))    # while terminating
        kills += 1
        app = portal.application(app.reference)
        assert app.wait_for("terminated", timeout=60) == "terminated"
        harness.check(app.id, lifecycle.TERMINATED)
        app.destroy()
        assert not (harness.root / "hosts" / "localhost" / "apps" / app.id.split(":")[-1]).exists()
        assert live_processes(app.id) == {}
    assert kills >= 20


def test_components_outlive_the_portal_and_deaths_meanwhile_are_failures(harness):
    portal = harness.start()
    app = portal.create(name="outlive")
    app.initialize("urn:cddlm:lang:components:1", body=_element(descriptor(3)))
    app.run()
    app.wait_for("running", timeout=30)
    with harness.store.read() as conn:
        pids = {c.path: c.pid for c in repo.get_components(conn, app.id)}
    harness.kill()
    for pid in pids.values():
        os.kill(pid, 0)                          # still running without their portal
    os.kill(pids["p01"], signal.SIGKILL)         # one dies while the portal is down
    portal = harness.start()
    app = portal.application(app.reference)
    assert app.wait_for("failed", timeout=30) == "failed"
    info = app.ping()
    assert info["terminationInfo"]["component"] == "p01"
    assert {h["path"]: h["state"] for h in info["health"]}["p00"] == "running"
    assert live_processes(app.id)["p00"] == [pids["p00"]]   # re-adopted, not restarted
    app.terminate()
    app.wait_for("terminated", timeout=30)
    assert live_processes(app.id) == {}


def test_two_portals_share_the_work_and_survive_each_other(tmp_path):
    if not postgres_available():
        pytest.skip("no PostgreSQL answers on 127.0.0.1:5432 (database test, trust auth)")
    with pg_schema_url() as url:
        hosts = tmp_path / "hosts"
        common = TUNING + ["--hosts-dir", str(hosts), "--db", url]
        a = LivePortal(_mk(tmp_path / "a"), free_port(), None, common).start()
        b = LivePortal(_mk(tmp_path / "b"), free_port(), None, common).start()
        store = Store(url)
        try:
            app = Portal(a.url).create(name="shared")
            app.initialize("urn:cddlm:lang:components:1", body=_element(descriptor(12, slow=True)))
            app.run()
            deadline = time.monotonic() + 20
            held = 0
            while time.monotonic() < deadline and not held:   # until A holds started work
                with store.read() as conn:
                    a_id = conn.execute(select(engines.c.id).where(engines.c.url == a.url.rsplit("/cddlm", 1)[0])).scalar()
                    held = len(conn.execute(select(work.c.id).where(
                        work.c.owner == a_id, work.c.action == "start")).all())
                time.sleep(0.05)
            assert held, "portal A never held a start item"
            time.sleep(0.3)
            a.stop(signal.SIGKILL)                    # dies holding leases on started work
            via_b = Portal(b.url).rebind(app.reference)
            assert via_b.reference.address.startswith(b.url.rsplit("/cddlm", 1)[0])
            assert via_b.wait_for("running", timeout=60) == "running"
            live = live_processes(app.id)
            assert len(live) == 12 and all(len(p) == 1 for p in live.values()), live
            with store.read() as conn:
                assert not conn.execute(select(work.c.id).where(work.c.owner == a_id)).all()
            via_b.terminate()
            assert via_b.wait_for("terminated", timeout=60) == "terminated"
            assert live_processes(app.id) == {}
        finally:
            a.stop()
            b.stop()
            store.dispose()
            kill_leftovers(tmp_path)


def _mk(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _element(data: bytes):
    from cddlm import xmlsafe
    return xmlsafe.parse(data)
