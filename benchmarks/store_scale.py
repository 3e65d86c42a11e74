"""A portal over a large store: startup time, create latency and `cddlm ls` (issue 11).

    .venv/bin/python benchmarks/store_scale.py [--apps 100000] [--ls-apps 5000] [--creates 400]
                                               [--no-postgres] [--portals 2]

The store is filled by copying, with new ids and times, the rows a real application leaves in
every table (applications, views, history, components, events, audit): one run through its
whole lifecycle (terminated) and one only created (instantiated), made first by a portal of
their own. ``--live`` of the copies are instantiated, the rest terminated.

For an empty store and one of ``--apps`` applications, on SQLite and on the local PostgreSQL
(127.0.0.1:5432, database test, a fresh schema, dropped afterwards):
  - startup: ``cddlm portal serve`` started until it prints ``portal ready at``;
  - create: ``--creates`` sequential creates over HTTP (keep-alive), p50 and p99.
With ``--portals 2`` the PostgreSQL store is also shared by two portals: the second is started
once the first answers (its startup is the one reported), and the creates go to each in turn.
Then `cddlm ls` over ``--ls-apps`` applications (SQLite), the whole command and its one
request. Targets: startup within 5 s, create p99 within 2 x the empty store's, `cddlm ls`
within 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

from deploy_latency import Conn, pct  # noqa: E402
from tests.conftest import pg_schema_url as pg_schema, postgres_available  # noqa: E402

NATIVE = "urn:cddlm:lang:components:1"
ONE = ('<application xmlns="%s"><component name="s" type="process"><attribute name="argv">'
       '<item>sleep</item><item>600</item></attribute></component></application>' % NATIVE)
LIST = ("<ext:listApplicationsRequest xmlns:ext=\"urn:cddlm:ext:1\"><ext:limit>10000</ext:limit>"
        "</ext:listApplicationsRequest>")


# -- the rows of two real applications ------------------------------------------------------------
def template(tmp: str) -> dict:
    """{"terminated": {table: [row]}, "instantiated": {...}, "id": {...}}: what a portal keeps
    of an application run to termination, and of one only created."""
    from lxml import etree
    from sqlalchemy import select

    from cddlm.app import Portal
    from cddlm.application import tables
    from cddlm.application.service import DescriptorInput
    from cddlm.config import Settings
    logging.getLogger("cddlm").setLevel(logging.WARNING)
    portal = Portal(Settings(state_dir=os.path.join(tmp, "template"), port=0, liveness_interval=0.5))
    portal.start()
    try:
        svc = portal.service
        done, _ = svc.create("done", None, [], portal.url)
        svc.initialize(done.id, DescriptorInput(NATIVE, body=etree.fromstring(ONE)), [], [])
        svc.run(done.id)
        _wait(svc, done.id, "running")
        svc.terminate(done.id, "template")
        _wait(svc, done.id, "terminated")
        live, _ = svc.create("live", None, [], portal.url)
        deadline = time.monotonic() + 30    # the outbox marks the events fanned out
        while time.monotonic() < deadline:
            with portal.store.read() as conn:
                if conn.execute(select(tables.events.c.id).where(
                        tables.events.c.fanned_out.is_(False))).first() is None:
                    break
            time.sleep(0.1)
        rows: dict = {}
        with portal.store.read() as conn:
            for kind, app_id in (("terminated", done.id), ("instantiated", live.id)):
                rows[kind] = {
                    "applications": conn.execute(select(tables.applications).where(
                        tables.applications.c.id == app_id)).mappings().all(),
                    **{t.name: conn.execute(select(t).where(t.c.app_id == app_id)).mappings().all()
                       for t in (tables.views, tables.history, tables.components, tables.audit)},
                    "events": conn.execute(select(tables.events).where(
                        tables.events.c.message.contains(app_id))).mappings().all()}
                rows.setdefault("id", {})[kind] = app_id
        return rows
    finally:
        portal.stop()


def _wait(svc, app_id: str, state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while svc.get(app_id).state != state:
        if time.monotonic() > deadline:
            raise SystemExit("the template application did not reach %s" % state)
        time.sleep(0.05)


TIME_COLUMNS = {"created", "started", "terminated", "at", "updated", "not_before"}


def fill(url: str, rows: dict, n: int, live: float) -> float:
    """Migrate the store at ``url`` and add ``n`` applications copied from ``rows``; seconds."""
    from cddlm.application import tables
    from cddlm.application.store import Store
    started = time.perf_counter()
    store = Store(url)
    store.migrate()
    every = max(1, int(round(1 / live))) if live > 0 else n + 1
    base = time.time() - n * 0.01 - 60
    batch: dict[str, list[dict]] = {}
    try:
        for i in range(n):
            kind = "instantiated" if i % every == 0 else "terminated"
            old_id, new_id = rows["id"][kind], "urn:uuid:" + str(uuid.uuid4())
            t0 = rows[kind]["applications"][0]["created"]
            shift = base + i * 0.01 - t0
            for table, found in rows[kind].items():
                for row in found:
                    copy = {}
                    for key, value in row.items():
                        if key == "id" and table in ("events", "audit"):
                            continue                      # autoincrement
                        if isinstance(value, str):
                            value = value.replace(old_id, new_id)
                        elif key in TIME_COLUMNS and isinstance(value, float):
                            value += shift
                        copy[key] = value
                    if table == "applications":
                        copy["name"] = "%s-%d" % (kind[:4], i)
                    elif table == "views":
                        copy["id"] = uuid.uuid4().hex
                    batch.setdefault(table, []).append(copy)
            if len(batch["applications"]) >= 2000 or i == n - 1:
                with store.write() as conn:
                    for t in tables.metadata.sorted_tables:
                        if batch.get(t.name):
                            conn.execute(t.insert(), batch[t.name])
                batch = {}
        if not store.is_sqlite:    # what autovacuum does within a minute of a bulk load
            with store.engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
    finally:
        store.dispose()
    return time.perf_counter() - started


# -- a portal process ---------------------------------------------------------------------------
@contextlib.contextmanager
def serve(state: str, db: str | None):
    """(base URL, seconds until it said ``portal ready at``) of ``cddlm portal serve``."""
    cmd = [sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", "0", "--state-dir",
           state] + (["--db", db] if db else [])
    started = time.perf_counter()
    err = open(os.path.join(state, "serve.err"), "w+b")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
    try:
        line = proc.stdout.readline().decode()
        took = time.perf_counter() - started
        if not line.startswith("portal ready at "):
            err.seek(0)
            raise SystemExit("portal did not start: %r\n%s" % (line, err.read()[-3000:].decode()))
        yield line.split("portal ready at ", 1)[1].strip().rsplit("/cddlm/", 1)[0], took
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()


def creates(bases: list[str], count: int) -> list[float]:
    """Sequential creates, each portal's turn in order."""
    conns = [Conn(base) for base in bases]
    for c in conns:
        c.create("warm-%s" % uuid.uuid4().hex[:8])
    out = []
    for i in range(count):
        t0 = time.perf_counter()
        conns[i % len(conns)].create("bench-%s-%d" % (uuid.uuid4().hex[:6], i))
        out.append(time.perf_counter() - t0)
    return out


def shown(label: str, portals: int) -> str:
    return label if portals == 1 else "%s x%d" % (label, portals)


def measure(tmp: str, label: str, rows: dict, n: int, args, db_factory,
            portals: int = 1) -> tuple[float, float, float]:
    with db_factory() as db:
        state = os.path.join(tmp, "%s-%d-%d" % (label, n, portals))
        url = db or "sqlite:///%s" % os.path.join(state, "portal.db")
        os.makedirs(state, exist_ok=True)
        took_fill = fill(url, rows, n, args.live) if n else 0.0
        with contextlib.ExitStack() as stack:
            bases = []
            for i in range(portals):       # each its own state directory, one store
                own = os.path.join(state, "portal-%d" % i) if portals > 1 else state
                os.makedirs(own, exist_ok=True)
                base, startup = stack.enter_context(serve(own, db))
                bases.append(base)
            lat = creates(bases, args.creates)
        p50, p99 = pct(lat, 50), pct(lat, 99)
        print("%-10s %9d %9.1fs %10.2fs %10.1fms %10.1fms" % (
            shown(label, portals), n, took_fill, startup, p50 * 1000, p99 * 1000), flush=True)
        return startup, p50, p99


def ls_figures(tmp: str, rows: dict, n: int) -> None:
    state = os.path.join(tmp, "ls")
    os.makedirs(state, exist_ok=True)
    fill("sqlite:///%s" % os.path.join(state, "portal.db"), rows, n, 0.5)
    with serve(state, None) as (base, _):
        env = dict(os.environ, CDDLM_PORTAL=base + "/cddlm/portal",
                   XDG_CONFIG_HOME=os.path.join(tmp, "no-config"))
        whole = []
        for _ in range(3):
            t0 = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "cddlm.cli", "ls"], env=env, cwd=ROOT,
                                  capture_output=True, text=True)
            whole.append(time.perf_counter() - t0)
            if done.returncode != 0:
                raise SystemExit("cddlm ls failed: %s" % done.stderr)
            listed = len(done.stdout.splitlines()) - 1
        c = Conn(base)
        one = []
        for _ in range(5):
            t0 = time.perf_counter()
            data = c.post("/cddlm/portal", LIST)
            one.append(time.perf_counter() - t0)
        floor = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import cddlm.cli.apps, cddlm.client"], cwd=ROOT)
            floor.append(time.perf_counter() - t0)
    print("\n`cddlm ls` over %d applications (%d listed, %d bytes in one response):" % (
        n, listed, len(data)))
    print("  the command: %.2f s (median of 3; target 1 s); its listApplications request: %.0f ms"
          % (statistics.median(whole), statistics.median(one) * 1000))
    print("  floor: starting Python and importing the client alone: %.2f s" % statistics.median(floor))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apps", type=int, default=100_000)
    parser.add_argument("--ls-apps", type=int, default=5_000)
    parser.add_argument("--creates", type=int, default=400)
    parser.add_argument("--live", type=float, default=0.05, help="fraction left instantiated")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--only", choices=("sqlite", "postgresql", "ls"), help="one part only")
    parser.add_argument("--portals", type=int, default=1,
                        help="also measure this many portals sharing the PostgreSQL store")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="cddlm-store-scale-")
    try:
        rows = template(tmp)
        print("store scale (%d cores); rows per application copied: %s" % (
            os.cpu_count(), ", ".join("%s %d" % (t, len(r)) for t, r in rows["terminated"].items())))
        print("%-10s %9s %10s %11s %11s %11s" % ("store", "apps", "fill", "startup", "create p50",
                                                 "create p99"))
        stores = [("sqlite", contextlib.nullcontext, 1)]
        if not args.no_postgres:
            if postgres_available():
                stores.append(("postgresql", pg_schema, 1))
            else:
                print("(no PostgreSQL answers on 127.0.0.1:5432: SQLite only)")
        if args.portals > 1 and len(stores) > 1:
            stores.append(("postgresql", pg_schema, args.portals))
        for label, factory, portals in stores:
            if args.only and args.only != label:
                continue
            empty = measure(tmp, label, rows, 0, args, factory, portals)
            full = measure(tmp, label, rows, args.apps, args, factory, portals)
            print("%-10s startup %.2f s (target 5 s); create p99 %.1f ms = %.2f x the empty "
                  "store's %.1f ms (target 2 x); p50 %.2f x" % (
                      shown(label, portals), full[0], full[2] * 1000, full[2] / empty[2], empty[2] * 1000, full[1] / empty[1]),
                  flush=True)
        if args.only in (None, "ls"):
            ls_figures(tmp, rows, args.ls_apps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
