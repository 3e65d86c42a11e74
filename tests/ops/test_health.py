"""/healthz and /readyz (issue 31, Health): 200 or 503 with a short JSON reason in each state,
no secrets, cheap to poll."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import urllib.error
import urllib.request

import pytest

from cddlm.application.health import Readiness, front_renewed
from tests.conftest import postgres_available, pg_schema_url


def get(url: str) -> tuple[int, object, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read())


def base(lp) -> str:
    return lp.url.rsplit("/cddlm/", 1)[0]


def test_a_live_portal_is_healthy_and_ready_and_polling_is_cheap(live_portal):
    lp = live_portal()
    assert get(base(lp) + "/healthz")[0::2] == (200, {"status": "ok"})
    status, headers, body = get(base(lp) + "/readyz")
    assert (status, body) == (200, {"status": "ready"})
    assert headers["Content-Type"] == "application/json"
    # cheap: the portal's CPU time per answer (its wall time is the machine's load's to say)
    started = cpu_seconds(lp.proc.pid)
    for _ in range(50):
        assert get(base(lp) + "/readyz")[0] == 200
    each = (cpu_seconds(lp.proc.pid) - started) / 50
    assert each < 0.005, "a /readyz took %.1f ms of the portal's CPU" % (each * 1000)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time process ``pid`` has used, all its threads."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_store_migrated_past_this_program_is_not_ready(live_portal):
    """A newer portal sharing the store migrated it: this one says so, and serves on."""
    lp = live_portal()
    db = sqlite3.connect(str(lp.state_dir / "portal.db"))
    (revision,), = db.execute("SELECT version_num FROM alembic_version").fetchall()
    with db:
        db.execute("UPDATE alembic_version SET version_num = '9000_from_the_future'")
    deadline = time.monotonic() + 5      # the answer is kept half a second
    while (answer := get(base(lp) + "/readyz"))[0] == 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    status, _, body = answer
    assert status == 503 and body["status"] == "not ready", body
    assert body["problems"] == {"store": "the store's schema (9000_from_the_future) is newer than "
                                         "this program's (%s)" % revision}
    assert get(base(lp) + "/healthz")[0] == 200     # it still serves
    with db:
        db.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    db.close()


@pytest.mark.skipif(not postgres_available(), reason="no PostgreSQL answers on 127.0.0.1:5432")
def test_a_store_that_does_not_answer_makes_it_unready_within_the_deadline(tmp_path):
    """A lock held on the schema's table in PostgreSQL: the readiness read waits on it; the
    answer comes within the deadline anyway, and says what."""
    import psycopg
    from tests.conftest import make_portal
    with pg_schema_url() as url:
        p = make_portal(tmp_path, db_url=url, ready_store_seconds=0.5)
        try:
            client = _client(p)
            assert client("/readyz")[0] == 200
            schema = url.rsplit("%3D", 1)[1]
            with psycopg.connect(url.split("?")[0]) as blocker:
                blocker.execute('LOCK TABLE "%s".alembic_version IN ACCESS EXCLUSIVE MODE' % schema)
                time.sleep(0.6)     # the last answer is kept half a second: let it pass
                started = time.monotonic()
                status, body = client("/readyz")
                took = time.monotonic() - started
                blocker.rollback()
            assert status == 503 and set(body["problems"]) == {"store"}, body
            assert body["problems"]["store"].startswith("the store has not answered for 0.")
            assert took < 1.5, took
            deadline = time.monotonic() + 10
            while client("/readyz")[0] != 200:
                assert time.monotonic() < deadline, "never ready again after the lock went"
                time.sleep(0.1)
        finally:
            p.stop()


def test_a_stopped_engine_makes_it_unready(portal):
    client = _client(portal)
    assert client("/readyz") == (200, {"status": "ready"})
    portal.engine.stop()
    time.sleep(0.6)     # the last answer is kept half a second
    status, body = client("/readyz")
    assert status == 503 and body["problems"] == {"engine": "the engine is not running"}, body


def test_readiness_is_computed_twice_a_second_at_most():
    now = [0.0]
    calls = []
    ready = Readiness({"x": lambda: calls.append(1)}, cache=0.5, clock=lambda: now[0])
    for i in range(100):
        now[0] = i * 0.01
        assert ready.problems() == {}
    assert len(calls) == 2
    boom = Readiness({"y": lambda: 1 / 0})
    assert boom.problems() == {"y": "the check failed: ZeroDivisionError"}
    asked = []
    hung = Readiness({"store": lambda: "the store has not answered for 2.0 s",
                      "front": lambda: asked.append(1)}, after_store=frozenset({"front"}))
    assert hung.problems() == {"store": "the store has not answered for 2.0 s"} and not asked


def test_a_host_portal_is_unready_while_no_front_pings_its_parts():
    now = [1000.0]
    pinged: list[float | None] = [None]
    holds = [False]
    check = front_renewed(lambda: pinged[0], lambda: holds[0], 60, clock=lambda: now[0])
    assert check() is None                  # just started
    now[0] += 61
    assert check() is None                  # nothing delegated to it: nobody needs to ping
    holds[0] = True
    assert check() == ("no front portal has pinged its delegated applications for 61 s (more "
                       "than 60 s)")
    pinged[0] = now[0] - 5
    assert check() is None


def test_a_host_portal_whose_front_stops_pinging_is_unready(tmp_path):
    """--agent: while it holds a part a front portal delegated (its client token says so),
    the part must be pinged within the window; a ping makes it ready again."""
    from cddlm.application.options import CLIENT_TOKEN, Option
    from tests.conftest import make_portal
    p = make_portal(tmp_path, agent_mode=True, ready_front_seconds=1.0)
    try:
        client = _client(p)
        token = [Option(CLIENT_TOKEN, True, "string", "cddlm-front-1", "cddlm-front-1")]
        app, _ = p.service.create("part", None, token, p.url)
        deadline = time.monotonic() + 10
        while (answer := client("/readyz"))[0] == 200:
            assert time.monotonic() < deadline, "still ready with nobody pinging"
            time.sleep(0.1)
        assert set(answer[1]["problems"]) == {"front"}, answer
        assert answer[1]["problems"]["front"].startswith("no front portal has pinged its "
                                                         "delegated applications for ")
        # a ping makes it ready again once the last answer (kept half a second) has gone: pinged
        # on while awaited, as a front pings, since a loaded machine may let a single ping age
        # past the window (1 s) before the answer is computed again
        deadline = time.monotonic() + 30
        while True:
            p.service.ping(app.id)
            if client("/readyz") == (200, {"status": "ready"}):
                break
            assert time.monotonic() < deadline, "not ready again, pinged"
            time.sleep(0.1)
    finally:
        p.stop()


def _client(p):
    from tests.conftest import WsgiClient
    wsgi = WsgiClient(p.wsgi)

    def get_(path: str):
        status, _, body = wsgi.request("GET", path, headers={"Host": "127.0.0.1"})
        return status, json.loads(body)
    return get_

