"""Portal request throughput and latency, next to a bare Spyne echo service.

    .venv/bin/python benchmarks/portal_throughput.py [--seconds 5] [--clients 8] [--db URL]
                                                     [--portals 2]

One server process runs, in one HTTP server (``cddlm.httpserver``), the portal (SQLite under a temporary state
dir by default) and a plain Spyne echo service (``/echo``, a string in and out). Client
processes send prebuilt raw envelopes over keep-alive HTTP connections and time each request.

Printed per workload, for one client and then N concurrent clients: requests per second, p50
and p99 latency. Workloads: echo, GetResourceProperty(api:state) on an application, lookup by
name, and create+terminate+destroy cycles (create latency reported on its own), beside the
floor: a raw WSGI endpoint that only parses the envelope with lxml (``http_servers.app``), on
the portal's own server and, where waitress is installed (``pip install waitress``; not a
dependency), on waitress in a process of its own, as the issue that set the targets measured
it. The portal's targets (issue 11): GetResourceProperty at least the echo's throughput and
half the raw lxml-on-waitress endpoint's; create p99 under 50 ms on SQLite.

With ``--portals 2`` (a PostgreSQL ``--db``) a second portal process shares the store, and the
workload ``state2`` reads the same application through it: a portal answering for an
application another one created (its row held, kept current by the store's notices).
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]

API = "http://www.gridforum.org/cddlm/deployapi/2005/02"
ENV = ('<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" '
       'xmlns:api="%s" xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2" '
       'xmlns:e="urn:bench:echo"><soapenv:Body>%%s</soapenv:Body></soapenv:Envelope>' % API)

# the application read and looked up: a name of this run's own (names are unique among live
# applications, and a PostgreSQL store outlives the run); the clients, forked, share it
TARGET = "bench-target-" + uuid.uuid4().hex[:8]
WORKLOADS = ("raw", "waitress", "echo", "state", "state2", "lookup", "cycle")


# -- the server process ---------------------------------------------------------------------------
def serve(state_dir: str, db: str | None, threads: int) -> None:
    import logging
    from spyne import Application, ServiceBase, Unicode, rpc
    from spyne.protocol.soap import Soap11
    from spyne.server.wsgi import WsgiApplication
    from cddlm import httpserver
    from cddlm.app import Portal
    from cddlm.config import Settings
    from http_servers import app as raw     # parses the envelope with lxml, answers a constant

    logging.basicConfig(level=logging.WARNING)

    class Echo(ServiceBase):
        @rpc(Unicode, _returns=Unicode)
        def echo(ctx, text):
            return text

    echo = WsgiApplication(Application([Echo], tns="urn:bench:echo", in_protocol=Soap11(),
                                       out_protocol=Soap11()))
    portal = Portal(Settings(state_dir=state_dir, db_url=db, port=0, server_threads=threads))

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith("/echo"):
            return echo(environ, start_response)
        if path.startswith("/raw"):
            return raw(environ, start_response)
        return portal.wsgi(environ, start_response)

    server = httpserver.HttpServer(app, "127.0.0.1", 0, portal.server_options())
    portal.server = server
    portal.url = server.url
    portal.start()
    server.start()
    print("READY %s" % portal.url, flush=True)
    try:
        while server.alive():
            time.sleep(0.5)
    finally:
        portal.stop()


# -- clients --------------------------------------------------------------------------------------
def _post(conn, path: str, body: bytes) -> bytes:
    conn.request("POST", path, body, {"Content-Type": "text/xml; charset=utf-8"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError("HTTP %d on %s: %s" % (r.status, path, data[:300]))
    return data


def _between(data: bytes, start: bytes, end: bytes) -> str:
    return data.split(start, 1)[1].split(end, 1)[0].decode()


def client(args) -> dict:
    base, workload, seconds, ident, app_path = args
    host = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=30)
    lat: dict[str, list[float]] = {}
    deadline = time.perf_counter() + seconds
    n = 0
    echo = (ENV % "<e:echo><e:text>hello</e:text></e:echo>").encode()
    state = (ENV % "<wsrf-rp:GetResourceProperty>api:state</wsrf-rp:GetResourceProperty>").encode()
    lookup = (ENV % "<api:lookupRequest><api:name>%s</api:name></api:lookupRequest>" % TARGET).encode()
    while time.perf_counter() < deadline:
        if workload == "echo":
            t0 = time.perf_counter()
            _post(conn, "/echo", echo)
            lat.setdefault("echo", []).append(time.perf_counter() - t0)
        elif workload in ("raw", "waitress"):     # (the waitress process answers any path)
            t0 = time.perf_counter()
            _post(conn, "/raw", state)
            lat.setdefault(workload, []).append(time.perf_counter() - t0)
        elif workload in ("state", "state2"):     # (state2: another portal is at ``base``)
            t0 = time.perf_counter()
            data = _post(conn, app_path, state)
            lat.setdefault(workload, []).append(time.perf_counter() - t0)
            assert b">instantiated<" in data
        elif workload == "lookup":
            t0 = time.perf_counter()
            _post(conn, "/cddlm/portal", lookup)
            lat.setdefault("lookup", []).append(time.perf_counter() - t0)
        elif workload == "cycle":
            name = "b-%d-%d" % (ident, n)
            t0 = time.perf_counter()
            data = _post(conn, "/cddlm/portal",
                         (ENV % "<api:createRequest><api:name>%s</api:name></api:createRequest>" % name).encode())
            t1 = time.perf_counter()
            address = _between(data, b"Address>", b"</")
            path = "/" + address.split("/", 3)[3]
            _post(conn, path, (ENV % "<api:terminateRequest/>").encode())
            t2 = time.perf_counter()
            _post(conn, path, (ENV % "<api:destroyRequest/>").encode())
            t3 = time.perf_counter()
            lat.setdefault("create", []).append(t1 - t0)
            lat.setdefault("terminate", []).append(t2 - t1)
            lat.setdefault("destroy", []).append(t3 - t2)
            lat.setdefault("cycle", []).append(t3 - t0)
        n += 1
    conn.close()
    return lat


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))]


def run(base: str, workload: str, clients: int, seconds: float, app_path: str) -> dict:
    """Latencies per measured key of ``clients`` processes running ``workload`` ``seconds``."""
    with mp.Pool(clients) as pool:
        results = pool.map(client, [(base, workload, seconds, i, app_path) for i in range(clients)])
    merged: dict[str, list[float]] = {}
    for r in results:
        for k, v in r.items():
            merged.setdefault(k, []).extend(v)
    return merged


def figures(merged: dict[str, list[float]], seconds: float) -> dict:
    return {k: {"rps": len(v) / seconds, "p50": pct(v, 50) * 1000, "p99": pct(v, 99) * 1000,
                "n": len(v)} for k, v in merged.items()}


def summary(table: dict, counts: tuple[int, int], waitress: bool, portals: int) -> None:
    """Each figure of the targets (issues 11 and 32) beside its target, of what was run."""
    def rps(key: str, clients: int) -> float | None:
        return table[(key, clients)]["rps"] if (key, clients) in table else None

    reads = (("state", "GetResourceProperty"), ("state2", "GetResourceProperty through the "
             "second portal"), ("lookup", "lookup"))
    for clients in counts:
        floor_target = 0.5 if clients == 1 else 0.6
        for key, what in reads:
            mine, echo, raw, wait = (rps(k, clients) for k in (key, "echo", "raw", "waitress"))
            if mine is None:
                continue
            line = "%s, %d client(s):" % (what, clients)
            if echo:
                line += " / echo %.2f (target >= 1.0);" % (mine / echo)
            if raw:
                line += " / raw lxml on this server %.2f;" % (mine / raw)
            if wait:
                line += " / raw lxml on waitress %.2f (target >= %.1f)" % (mine / wait, floor_target)
            print(line.rstrip(";"))
        if (("create", clients)) in table:
            print("create p99, %d client(s): %.1f ms (target < 50 ms)"
                  % (clients, table[("create", clients)]["p99"]))
    if not waitress:
        print("(the raw lxml-on-waitress floor of the targets: pip install waitress)")
    one, many = (rps("create", c) for c in counts)
    if one and many and counts[1] > 1:
        print("create throughput, %d clients / 1 client: %.2f (target >= 4 on PostgreSQL)"
              % (counts[1], many / one))


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url
    return make_url(url).render_as_string(hide_password=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per workload, over all rounds")
    parser.add_argument("--rounds", type=int, default=4, help="turns each workload takes")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8, help="server threads")
    parser.add_argument("--db", help="database URL (default SQLite in a temporary directory)")
    parser.add_argument("--pin", metavar="CPU", help="run the server's threads on these CPUs only, "
                        "as `cddlm portal serve --cpu` does: they then hand the GIL over without "
                        "crossing cores")
    parser.add_argument("--portals", type=int, default=1, choices=(1, 2),
                        help="2: a second portal shares the --db (PostgreSQL) store; the state "
                             "read is also made through it")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help="which to run, of %s (default: all)" % ", ".join(WORKLOADS))
    parser.add_argument("--serve", nargs=2, metavar=("STATE", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        if args.pin:     # as `cddlm portal serve --cpu` does, before any thread starts
            from cddlm import affinity
            affinity.pin(affinity.parse(args.pin))
        serve(args.serve[0], None if args.serve[1] == "-" else args.serve[1], args.threads)
        return 0
    if args.portals > 1 and not (args.db or "").startswith("postgresql"):
        raise SystemExit("--portals 2 needs a PostgreSQL --db (portals share a store through it)")
    import http_servers
    waitress = http_servers.start("waitress") if http_servers.installed("waitress") else None
    with tempfile.TemporaryDirectory() as tmp:
        pin = ["--pin", args.pin] if args.pin else []
        servers = []
        try:
            bases = []
            for i in range(args.portals):
                state = os.path.join(tmp, "portal-%d" % i)
                os.makedirs(state)
                servers.append(subprocess.Popen(
                    [sys.executable, __file__, "--threads", str(args.threads)] + pin
                    + ["--serve", state, args.db or "-"], stdout=subprocess.PIPE, cwd=ROOT))
                line = servers[-1].stdout.readline().decode()
                if not line.startswith("READY "):
                    raise SystemExit("server did not start: %r" % line)
                bases.append(line.split()[1])
            base = bases[0]
            host = urllib.parse.urlsplit(base)
            conn = http.client.HTTPConnection(host.hostname, host.port)
            data = _post(conn, "/cddlm/portal",
                         (ENV % "<api:createRequest><api:name>%s</api:name></api:createRequest>"
                          % TARGET).encode())
            app_path = "/" + _between(data, b"Address>", b"</").split("/", 3)[3]
            print("portal throughput (%s, %gs per run, server threads %d, %s%s)"
                  % (_shown(args.db) if args.db else "SQLite", args.seconds, args.threads, "2 cores" if os.cpu_count() == 2
                     else "%d cores" % os.cpu_count(), ", server on CPU %s" % args.pin if args.pin
                     else "") + (", %d portals" % len(bases) if len(bases) > 1 else ""))
            print("%-10s %-8s %9s %9s %9s %8s" % ("workload", "clients", "req/s", "p50 ms", "p99 ms", "count"))
            table = {}
            for clients in (1, args.clients):
                # the workloads take turns, in rounds, so that another process's load on the
                # machine falls on each of them alike (the ratios are what matter)
                merged: dict[str, list[float]] = {}
                for _ in range(args.rounds):
                    for workload in WORKLOADS:
                        if (workload == "waitress" and waitress is None) or (
                                workload == "state2" and len(bases) < 2) or (
                                workload not in args.workloads.split(",")):
                            continue
                        at = "http://127.0.0.1:%d" % waitress[1] if workload == "waitress" \
                            else bases[-1] if workload == "state2" else base
                        for key, v in run(at, workload, clients, args.seconds / args.rounds,
                                          app_path).items():
                            merged.setdefault(key, []).extend(v)
                for key, r in figures(merged, args.seconds).items():
                    table[(key, clients)] = r
                    print("%-10s %-8d %9.0f %9.2f %9.2f %8d" % (key, clients, r["rps"], r["p50"],
                                                               r["p99"], r["n"]))
            summary(table, (1, args.clients), waitress is not None, len(bases))
            # the target read goes as the cycles' applications went (a PostgreSQL store
            # outlives the run), on a new connection (the server has closed the idle one)
            conn.close()
            conn = http.client.HTTPConnection(host.hostname, host.port)
            _post(conn, app_path, (ENV % "<api:terminateRequest/>").encode())
            _post(conn, app_path, (ENV % "<api:destroyRequest/>").encode())
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=30)
            if waitress is not None:
                waitress[0].terminate()
                waitress[0].wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
