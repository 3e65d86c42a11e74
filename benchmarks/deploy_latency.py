"""Deployment latency and lifecycle throughput of a portal.

    .venv/bin/python benchmarks/deploy_latency.py [--apps 1000] [--clients 8] [--db URL]

Starts ``cddlm portal serve`` (SQLite in a temporary directory unless ``--db``), then:

1. create -> running for applications of 1, 10 and 100 ``process`` components (``sleep``),
   polling ``api:state`` every 10 ms; the time to spawn the same processes directly (through
   the same pid-file wrapper, in their own sessions) is measured apart, and the portal's
   overhead per component is (create -> running) / n minus that spawn time per process;
2. ``--apps`` one-component applications through their whole lifecycle (create, initialize,
   run, wait running, terminate, wait terminated, destroy) from ``--clients`` concurrent client
   processes: applications per second, p50/p99 per operation, errors.

It prints the portal's peak resident memory (VmHWM) at the end. Targets: the 100-component
application running within 5 s of create; the 1,000-application run with no errors.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
API = "http://www.gridforum.org/cddlm/deployapi/2005/02"
ENV = ('<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" '
       'xmlns:api="%s" xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2"><soapenv:Body>%%s'
       '</soapenv:Body></soapenv:Envelope>' % API)
STATE = ENV % "<wsrf-rp:GetResourceProperty>api:state</wsrf-rp:GetResourceProperty>"
WRAPPER = 'echo $$ > "$0" && exec "$@"'
STATE_RE = re.compile(rb"<api:state[^>]*>([^<]*)<")


def descriptor(n: int) -> str:
    comps = "".join('<component name="c%d" type="process"><attribute name="argv"><item>sleep</item>'
                    '<item>3600</item></attribute></component>' % i for i in range(n))
    return ('<api:initializeRequest><api:descriptor language="urn:cddlm:lang:components:1"><api:body>'
            '<application xmlns="urn:cddlm:lang:components:1">%s</application></api:body>'
            '</api:descriptor></api:initializeRequest>' % comps)


class Conn:
    def __init__(self, base: str):
        u = urllib.parse.urlsplit(base)
        self.http = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def post(self, path: str, body: str) -> bytes:
        self.http.request("POST", path, (ENV % body if not body.startswith("<soapenv") else body).encode(),
                          {"Content-Type": "text/xml; charset=utf-8"})
        r = self.http.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("HTTP %d: %s" % (r.status, data[:300]))
        return data

    def create(self, name: str) -> str:
        data = self.post("/cddlm/portal", "<api:createRequest><api:name>%s</api:name></api:createRequest>" % name)
        address = data.split(b"Address>", 1)[1].split(b"</", 1)[0].decode()
        return "/" + address.split("/", 3)[3]

    def state(self, path: str) -> str:
        found = STATE_RE.search(self.post(path, STATE))
        return found.group(1).decode() if found else "?"

    def wait(self, path: str, state: str, timeout: float = 120.0, interval: float = 0.01) -> None:
        deadline = time.perf_counter() + timeout
        while True:
            current = self.state(path)
            if current == state:
                return
            if current == "failed" or time.perf_counter() > deadline:
                raise RuntimeError("application is %s, waited for %s" % (current, state))
            time.sleep(interval)


def spawn_time(n: int, tmp: str) -> float:
    """Seconds to start n processes directly, as the local runner does (wrapper, session)."""
    procs = []
    started = time.perf_counter()
    for i in range(n):
        d = os.path.join(tmp, "direct-%d" % i)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "out"), "ab") as out:
            procs.append(subprocess.Popen(["/bin/sh", "-c", WRAPPER, os.path.join(d, "pid"), "sleep", "3600"],
                                          cwd=d, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                          start_new_session=True, close_fds=True))
    elapsed = time.perf_counter() - started
    for p in procs:
        p.kill()
        p.wait()
    return elapsed


def lifecycle_client(args) -> dict:
    base, count, ident = args
    c = Conn(base)
    lat: dict[str, list[float]] = {}
    errors = []
    one = descriptor(1)
    for n in range(count):
        try:
            t0 = time.perf_counter()
            path = c.create("life-%d-%d" % (ident, n))
            t1 = time.perf_counter()
            c.post(path, one)
            t2 = time.perf_counter()
            c.post(path, "<api:runRequest/>")
            t3 = time.perf_counter()
            c.wait(path, "running", interval=0.02)
            t4 = time.perf_counter()
            c.post(path, "<api:terminateRequest/>")
            t5 = time.perf_counter()
            c.wait(path, "terminated", interval=0.02)
            t6 = time.perf_counter()
            c.post(path, "<api:destroyRequest/>")
            t7 = time.perf_counter()
            for key, value in (("create", t1 - t0), ("initialize", t2 - t1), ("run", t3 - t2),
                               ("to running", t4 - t0), ("terminate", t5 - t4),
                               ("to terminated", t6 - t4), ("destroy", t7 - t6), ("lifecycle", t7 - t0)):
                lat.setdefault(key, []).append(value)
        except Exception as e:  # noqa: BLE001 - every error is counted and reported
            errors.append(repr(e)[:200])
            c = Conn(base)
    return {"lat": lat, "errors": errors}


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def peak_memory_mib(pid: int) -> float:
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apps", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--db", help="database URL (default SQLite in a temporary directory)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="cddlm-bench-")
    cmd = [sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", "0", "--state-dir",
           os.path.join(tmp, "state")] + (["--db", args.db] if args.db else [])
    portal = subprocess.Popen(cmd, stdout=subprocess.PIPE, cwd=ROOT)
    try:
        line = portal.stdout.readline().decode()
        if not line.startswith("portal ready at "):
            raise SystemExit("portal did not start: %r" % line)
        base = line.split("portal ready at ", 1)[1].strip().rsplit("/cddlm/", 1)[0]
        c = Conn(base)
        print("deploy latency (%s, %d cores)" % (args.db or "SQLite", os.cpu_count()))
        print("%-12s %12s %12s %16s %18s" % ("components", "create->init", "create->run",
                                             "spawn alone", "overhead/component"))
        for n in (1, 10, 100):
            direct = statistics.median(spawn_time(n, tmp) for _ in range(3))
            t0 = time.perf_counter()
            path = c.create("size-%d" % n)
            c.post(path, descriptor(n))
            c.post(path, "<api:runRequest/>")
            c.wait(path, "running")
            total = time.perf_counter() - t0
            hist = c.post(path, ENV % "<wsrf-rp:GetResourceProperty>api:stateHistory</wsrf-rp:GetResourceProperty>")
            times = [t.split(b"</", 1)[0].decode() for t in hist.split(b"<api:time>")[1:]]
            from datetime import datetime
            parsed = [datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in times]
            to_init = parsed[1] - parsed[0]
            overhead = (total - direct) / n
            print("%-12d %11.3fs %11.3fs %15.3fs %17.2fms" % (n, to_init, total, direct, overhead * 1000))
            c.post(path, "<api:terminateRequest/>")
            c.wait(path, "terminated")
            c.post(path, "<api:destroyRequest/>")
        per_client = [args.apps // args.clients + (1 if i < args.apps % args.clients else 0)
                      for i in range(args.clients)]
        started = time.perf_counter()
        with mp.Pool(args.clients) as pool:
            results = pool.map(lifecycle_client, [(base, k, i) for i, k in enumerate(per_client)])
        elapsed = time.perf_counter() - started
        lat: dict[str, list[float]] = {}
        errors = []
        for r in results:
            errors.extend(r["errors"])
            for k, v in r["lat"].items():
                lat.setdefault(k, []).extend(v)
        done = len(lat.get("lifecycle", []))
        print("\n%d one-component applications, whole lifecycle, %d clients: %.1f s, %.1f apps/s, "
              "%d errors" % (done, args.clients, elapsed, done / elapsed, len(errors)))
        print("%-14s %9s %9s" % ("operation", "p50 ms", "p99 ms"))
        for key in ("create", "initialize", "run", "to running", "terminate", "to terminated",
                    "destroy", "lifecycle"):
            if lat.get(key):
                print("%-14s %9.1f %9.1f" % (key, pct(lat[key], 50) * 1000, pct(lat[key], 99) * 1000))
        for e in errors[:5]:
            print("error:", e)
        print("\nportal peak memory (VmHWM): %.1f MiB" % peak_memory_mib(portal.pid))
    finally:
        portal.terminate()
        portal.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
