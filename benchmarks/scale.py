"""Scale: one application of N processes, and many applications of one, under one portal.

    .venv/bin/python benchmarks/scale.py [--sizes 10,100,1000,10000] [--apps 1000]
                                         [--idle 10] [--postgres] [--portals 2] [--repeat 3]

Starts ``cddlm portal serve`` (SQLite in a temporary directory; ``--postgres``: a fresh schema
in the local PostgreSQL, database ``test``; ``--portals 2``: two portals sharing it, the work
created through the first), then for each N:

- the floors: the seconds to spawn N ``sleep`` processes directly, through the same pid-file
  wrapper and in their own sessions (as the local runner does), and to stop them (TERM to each
  process group, then every one reaped), measured in the same run;
- create -> running of one application of N ``sleep`` components (create, initialize, run,
  then ``api:state`` polled), with the ratio to the floor, and create -> initialized (the
  deploy: when ``initialized``, or already ``running``, is first seen on the way);
- the portal's CPU (user + system, from /proc) spent getting there;
- idle CPU, in per cent of one core, over ``--idle`` seconds with the N processes running;
- terminate -> terminated, with the ratio to the stop floor, and the CPU spent;
- with ``--restart``: the portal is SIGKILLed with the N processes running and started again
  on its port: the seconds until it answers, with every process running and re-adopted.

Nothing is deleted until every figure is taken (the terminated applications are destroyed,
and the floors' directories removed, at the end): a file system may pass over the inodes freed
in the last minutes, one by one, whenever it makes a file or directory (ext4 without a journal
does, as on the development VM: ``perf`` showed 40 % of the portal's CPU starting 1,000
processes in ``recently_deleted``, minutes after earlier runs' files were removed), so a
deletion just before a run would charge that run for the one before, and the portal for the
floor's files.

With ``--repeat K`` each size is run K times (the sizes in turn) and the 10,000 / 1,000
ratios are of the medians. Then ``--apps`` applications of one process each: their idle CPU.
The 10,000 row needs ``ulimit -n`` above 10,000 (the portal raises its soft limit to the
hard one) and as many free pids. Figures, not assertions (issue 11's targets: 1,000 running
within 5 s of create and terminated within 5 s; 10,000 within 60 s and no more than 12 x the
1,000 case; idle under 2 % of a core with 1,000 components, under 10 % with 10,000).
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_latency import ROOT, WRAPPER, Conn, descriptor  # noqa: E402

PG_URL = os.environ.get("CDDLM_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, system_only: bool = False) -> float:
    """User and system CPU of a process (or its system CPU alone: the kernel's work for it,
    such as forking, signalling and reaping)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[12]) + (0 if system_only else int(fields[11]))) / TICKS


def floors(n: int, tmp: str) -> tuple[float, float]:
    """Seconds to start n ``sleep`` processes as the runner does (wrapper, own session, logs),
    and to stop them as it does (TERM to each process group, all reaped)."""
    procs = []
    base = os.path.join(tmp, "floor-%d-%s" % (n, uuid.uuid4().hex[:6]))   # (new inodes each run)
    started = time.perf_counter()
    for i in range(n):
        d = os.path.join(base, "c%d" % i)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "stdout.log"), "ab") as out, \
                open(os.path.join(d, "stderr.log"), "ab") as err:
            procs.append(subprocess.Popen(["/bin/sh", "-c", WRAPPER, os.path.join(d, "pid"),
                                           "sleep", "3600"], cwd=d, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=err, start_new_session=True,
                                          close_fds=True))
    spawn = time.perf_counter() - started
    started = time.perf_counter()
    for p in procs:
        os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        p.wait()
    stop = time.perf_counter() - started
    return spawn, stop          # (the directories are removed at the end: see the docstring)


class Portal:
    def __init__(self, tmp: str, name: str, db: str | None, port: int = 0):
        state = os.path.join(tmp, name)
        self.args = (tmp, name, db)
        cmd = [sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", str(port),
               "--state-dir", state] + (["--db", db] if db else [])
        self.log = open(os.path.join(tmp, name + ".log"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("portal ready at "):
            raise SystemExit("portal did not start: %r (see %s)" % (line, self.log.name))
        self.base = line.split("portal ready at ", 1)[1].strip().rsplit("/cddlm/", 1)[0]

    def cpu(self, system_only: bool = False) -> float:
        return cpu_seconds(self.proc.pid, system_only)

    def restart(self) -> tuple["Portal", float]:
        """SIGKILL this portal and start it again on its port and state directory; returns
        the new one and the seconds until it answered."""
        port = int(self.base.rsplit(":", 1)[1])
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        started = time.perf_counter()
        new = Portal(*self.args, port=port)
        return new, time.perf_counter() - started

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def cpu_of(portals: list[Portal], system_only: bool = False) -> float:
    return sum(p.cpu(system_only) for p in portals)


class Client(Conn):
    """A connection that opens again when the portal has closed it (it closes connections
    idle for longer than its header timeout, as the idle measurement leaves this one)."""

    def __init__(self, base: str):
        super().__init__(base)
        self.base = base

    def post(self, path: str, body: str) -> bytes:
        try:
            return super().post(path, body)
        except (ConnectionError, http.client.HTTPException):
            self.http.close()
            Conn.__init__(self, self.base)
            return super().post(path, body)


def idle_percent(portals: list[Portal], seconds: float) -> float:
    before, t0 = cpu_of(portals), time.perf_counter()
    time.sleep(seconds)
    return 100.0 * (cpu_of(portals) - before) / (time.perf_counter() - t0)


def wait_state(c: Conn, path: str, state: str, timeout: float,
               passing: str | None = None) -> float | None:
    """Poll ``api:state`` every 20 ms at first, then gently (up to every 0.1 s after 4 s:
    the polls are the portal's CPU too). Returns the seconds until ``passing`` (a state on
    the way) was first seen, or ``state`` if it was never seen."""
    started = time.perf_counter()
    passed = None
    while True:
        current = c.state(path)
        if passed is None and current in (passing, state):
            passed = time.perf_counter() - started
        if current == state:
            return passed
        waited = time.perf_counter() - started
        if current == "failed" or waited > timeout:
            raise RuntimeError("application is %s, waited for %s" % (current, state))
        time.sleep(min(0.1, 0.02 + waited / 50))


class Profile:
    """``py-spy record`` of the first portal over one phase (``--profile DIR``), raw
    flamegraph text in DIR/NAME.txt; nothing without DIR. Only the thread holding the GIL is
    sampled: where the portal's Python time goes, not threads waiting for it."""

    def __init__(self, portals: list[Portal], folder: str | None, name: str):
        self.cmd = None if not folder else [
            os.path.join(os.path.dirname(sys.executable), "py-spy"), "record", "--gil", "-p",
            str(portals[0].proc.pid), "--nonblocking", "-f", "raw", "-o",
            os.path.join(folder, name + ".txt")]

    def __enter__(self) -> "Profile":
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL) if self.cmd else None
        time.sleep(0.5 if self.proc else 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(30)


def one_app(c: Conn, portals: list[Portal], n: int, tmp: str, idle: float,
            profile: str | None = None, restart: bool = False) -> dict:
    floor, stop_floor = floors(n, tmp)
    body = descriptor(n)
    with Profile(portals, profile, "start-%d" % n):
        cpu0, sys0, t0 = cpu_of(portals), cpu_of(portals, True), time.perf_counter()
        path = c.create("scale-%d-%s" % (n, uuid.uuid4().hex[:6]))
        c.post(path, body)
        c.post(path, "<api:runRequest/>")
        polled = time.perf_counter()
        deployed = polled - t0 + wait_state(c, path, "running", 600, passing="initialized")
        up, up_cpu = time.perf_counter() - t0, cpu_of(portals) - cpu0
        up_sys = cpu_of(portals, True) - sys0
    with Profile(portals, profile, "idle-%d" % n):
        idle_cpu = idle_percent(portals, idle)
    back = None
    if restart:
        # SIGKILL and start again: every process re-adopted (watched), none failed
        portals[0], back = portals[0].restart()
        c = Client(portals[0].base)
        health = c.post(path, "<api:pingRequest/>")
        assert health.count(b'state="running"') >= n, "not every component is running again"
        wait_state(c, path, "running", 5)
    with Profile(portals, profile, "stop-%d" % n):
        cpu0, sys0, t0 = cpu_of(portals), cpu_of(portals, True), time.perf_counter()
        c.post(path, "<api:terminateRequest/>")
        wait_state(c, path, "terminated", 600)
        down, down_cpu = time.perf_counter() - t0, cpu_of(portals) - cpu0
        down_sys = cpu_of(portals, True) - sys0
    return dict(path=path, n=n, floor=floor, stop_floor=stop_floor, deployed=deployed, up=up,
                up_cpu=up_cpu, up_sys=up_sys, idle=idle_cpu, down=down, down_cpu=down_cpu, down_sys=down_sys,
                back=back)


def many_apps(portals: list[Portal], count: int, idle: float, clients: int = 4) -> dict:
    one = descriptor(1)
    paths: list[str] = []
    lock = threading.Lock()

    def client(k: int) -> None:
        c = Client(portals[0].base)
        for i in range(k):
            path = c.create("many-%s" % uuid.uuid4().hex[:10])
            c.post(path, one)
            c.post(path, "<api:runRequest/>")
            with lock:
                paths.append(path)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(count // clients + (i < count % clients),))
               for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c = Client(portals[0].base)
    for path in paths:
        wait_state(c, path, "running", 600)
    up = time.perf_counter() - t0
    idle_cpu = idle_percent(portals, idle)
    t0 = time.perf_counter()
    for path in paths:
        c.post(path, "<api:terminateRequest/>")
    for path in paths:
        wait_state(c, path, "terminated", 600)
    down = time.perf_counter() - t0
    for path in paths:
        c.post(path, "<api:destroyRequest/>")
    return dict(count=count, up=up, idle=idle_cpu, down=down)


def median_row(runs: list[dict]) -> dict:
    """Each figure's median over runs of one size."""
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]
            if isinstance(runs[0][key], (int, float))}


def kill_leftovers(root: str) -> None:
    """KILL the component processes still running from ``root`` (found by their directory)."""
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.readlink("/proc/%s/cwd" % entry).startswith(root + "/"):
                os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass


def pg_schema() -> tuple[str, callable]:
    import psycopg
    schema = "bench_scale_" + uuid.uuid4().hex[:8]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "%s"' % schema)

    def drop() -> None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute('DROP SCHEMA "%s" CASCADE' % schema)
    return PG_URL + "?options=-csearch_path%%3D%s" % schema, drop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--apps", type=int, default=1000, help="applications of one process (0: skip)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds over which idle CPU is measured")
    parser.add_argument("--postgres", action="store_true", help="the local PostgreSQL (database test)")
    parser.add_argument("--portals", type=int, default=1, help="portals sharing the PostgreSQL store")
    parser.add_argument("--profile", metavar="DIR", help="py-spy profiles of each phase into DIR")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each size, the sizes in turn; the ratios are of the "
                             "medians (a run of 1,000 takes seconds: one quick or slow moment "
                             "of the machine moves it)")
    parser.add_argument("--restart", action="store_true",
                        help="SIGKILL the (first) portal with the N processes running, start it "
                             "again and time it until it answers with every process re-adopted")
    args = parser.parse_args()
    if args.portals > 1 and not args.postgres:
        raise SystemExit("--portals needs --postgres (portals share a store through PostgreSQL)")
    tmp = tempfile.mkdtemp(prefix="cddlm-scale-")
    db, drop = pg_schema() if args.postgres else (None, lambda: None)
    portals: list[Portal] = []
    try:
        for i in range(args.portals):
            portals.append(Portal(tmp, "portal-%d" % i, db))
        c = Client(portals[0].base)
        print("scale (%s, %d portal%s, %d cores)" % ("PostgreSQL" if db else "SQLite", len(portals),
                                                    "s" if len(portals) > 1 else "", os.cpu_count()))
        print("%8s %10s %10s %10s %7s %9s %8s %10s %11s %7s %9s" % (
            "N", "floor", "create->", "create->", "ratio", "CPU", "idle", "floor", "terminate->",
            "ratio", "CPU"))
        print("%8s %10s %10s %10s %7s %9s %8s %10s %11s %7s %9s" % (
            "", "(spawn)", "initialized", "running", "", "(start)", "CPU", "(stop)", "terminated",
            "", "(stop)"))
        rows = []
        for _ in range(args.repeat):      # sizes in turn: the machine's moods fall on each
            for n in [int(x) for x in args.sizes.split(",") if x]:
                r = one_app(c, portals, n, tmp, args.idle, args.profile, args.restart)
                c = Client(portals[0].base)
                rows.append(r)
                print("%8d %9.2fs %9.2fs %9.2fs %6.1fx %8.2fs %7.1f%% %9.2fs %10.2fs %6.1fx %8.2fs" % (
                    n, r["floor"], r["deployed"], r["up"], r["up"] / r["floor"], r["up_cpu"], r["idle"],
                    r["stop_floor"], r["down"], r["down"] / r["stop_floor"], r["down_cpu"]) + ("   restart: answering in %.1fs, all re-adopted" % r["back"]
                                      if r["back"] is not None else ""), flush=True)
        by_n = {n: median_row([r for r in rows if r["n"] == n]) for n in {r["n"] for r in rows}}
        if 1000 in by_n and 10000 in by_n:
            a, b = by_n[1000], by_n[10000]
            if args.repeat > 1:
                print("(each figure below: the median of %d runs of each size)" % args.repeat)
            def split(key: str) -> str:     # a CPU ratio, and its user and system parts
                system = key.replace("cpu", "sys")
                return "%.1fx (user %.1fx, system %.1fx)" % (
                    b[key] / a[key], (b[key] - b[system]) / max(a[key] - a[system], 0.01),
                    b[system] / max(a[system], 0.01))
            print("10,000 / 1,000: create->initialized %.1fx, create->running %.1fx (floor "
                  "%.1fx), terminate %.1fx (floor %.1fx), start CPU %s, stop CPU %s, "
                  "idle CPU %.1fx" % (
                      b["deployed"] / a["deployed"], b["up"] / a["up"], b["floor"] / a["floor"],
                      b["down"] / a["down"], b["stop_floor"] / a["stop_floor"],
                      split("up_cpu"), split("down_cpu"), b["idle"] / max(a["idle"], 0.01)))
        if args.apps:
            r = many_apps(portals, args.apps, args.idle)
            print("%d applications of 1 process: all running in %.1fs, idle CPU %.1f%%, "
                  "all terminated in %.1fs" % (r["count"], r["up"], r["idle"], r["down"]))
        for r in rows:          # every figure taken: now the files may go
            c.post(r["path"], "<api:destroyRequest/>")
    except BaseException:
        for p in portals:
            p.log.flush()
            with open(p.log.name, "rb") as f:
                sys.stderr.write("--- %s (its last lines):\n%s\n" % (
                    p.log.name, f.read()[-3000:].decode("utf-8", "replace")))
        raise
    finally:
        for p in portals:
            p.stop()
        kill_leftovers(tmp)      # components outlive a stopped portal (a run that failed)
        drop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
