"""The HTTP server choice, measured: the portal's server (granian through the RSGI bridge of
``cddlm.httpserver``) beside the other WSGI servers that are installed.

    .venv/bin/python benchmarks/http_servers.py [--seconds 4] [--clients 1,8,64]
    # to compare: .venv/bin/pip install waitress cheroot uvicorn a2wsgi

Each server runs in its own process and serves one small WSGI application that parses the
request envelope with lxml and answers a fixed envelope: what every SOAP request costs the
server, without the portal. Load comes from ``wrk`` when it is on the PATH (a C client: the
fairest floor), otherwise from Python keep-alive clients in separate processes.

Printed per server and client count: requests per second and mean latency. Then, per server,
what a slow client does to a well-behaved one: the time a good request takes while 300
connections send their headers one byte at a time (slowloris), and while 300 connections send
a body one byte at a time. "blocked" means the good request got no answer within 5 s.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

REQUEST = (b'<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/'
           b'envelope/"><soapenv:Body><GetResourceProperty xmlns="http://docs.oasis-open.org/wsrf/'
           b'rp-2" xmlns:api="http://www.gridforum.org/cddlm/deployapi/2005/02">api:state'
           b'</GetResourceProperty></soapenv:Body></soapenv:Envelope>')
ANSWER = (b'<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/'
          b'envelope/"><soapenv:Body><ok/></soapenv:Body></soapenv:Envelope>')


def app(environ, start_response):
    from lxml import etree
    size = int(environ.get("CONTENT_LENGTH") or 0)
    data = environ["wsgi.input"].read(size) if size else b""
    if data:
        etree.fromstring(data)
    start_response("200 OK", [("Content-Type", "text/xml; charset=utf-8"),
                              ("Content-Length", str(len(ANSWER)))])
    return [ANSWER]


# -- servers, each run in a child process: python benchmarks/http_servers.py --serve NAME PORT ----
def serve(name: str, port: int) -> None:
    if name == "cddlm (granian, RSGI bridge)":
        from cddlm import httpserver
        httpserver.serve(app, "127.0.0.1", port, httpserver.ServerOptions(threads=8))
        threading.Event().wait()
    elif name == "waitress":
        from waitress import serve as wserve
        wserve(app, host="127.0.0.1", port=port, threads=8, _quiet=True)
    elif name == "waitress (poll)":
        from waitress import serve as wserve
        wserve(app, host="127.0.0.1", port=port, threads=8, asyncore_use_poll=True, _quiet=True)
    elif name == "cheroot":
        from cheroot import wsgi
        wsgi.Server(("127.0.0.1", port), app, numthreads=8).start()
    elif name == "uvicorn + a2wsgi":
        import uvicorn
        from a2wsgi import WSGIMiddleware
        uvicorn.run(WSGIMiddleware(app, workers=8), host="127.0.0.1", port=port,
                    log_level="error", access_log=False)


CANDIDATES = {"cddlm (granian, RSGI bridge)": "granian", "waitress": "waitress",
              "waitress (poll)": "waitress", "cheroot": "cheroot", "uvicorn + a2wsgi": "a2wsgi"}


def installed(module: str) -> bool:
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(name: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", name, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("%s did not start" % name)


# -- load -------------------------------------------------------------------------------------------
def wrk(port: int, clients: int, seconds: float) -> tuple[float, float]:
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write('wrk.method = "POST"\nwrk.body = [[%s]]\nwrk.headers["Content-Type"] = '
                '"text/xml; charset=utf-8"\n' % REQUEST.decode())
    try:
        out = subprocess.run(["wrk", "-t1", "-c%d" % clients, "-d%ds" % max(1, int(seconds)),
                              "-s", f.name, "http://127.0.0.1:%d/" % port],
                             capture_output=True, text=True, timeout=seconds + 30).stdout
    finally:
        os.unlink(f.name)
    rate = float(next(l for l in out.splitlines() if "Requests/sec" in l).split()[1])
    return rate, clients / rate * 1000 if rate else float("nan")


def _python_client(args) -> int:
    port, seconds = args
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    n, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        conn.request("POST", "/", REQUEST, {"Content-Type": "text/xml"})
        conn.getresponse().read()
        n += 1
    return n


def python_load(port: int, clients: int, seconds: float) -> tuple[float, float]:
    with mp.Pool(clients) as pool:
        total = sum(pool.map(_python_client, [(port, seconds)] * clients))
    rate = total / seconds
    return rate, clients / rate * 1000 if rate else float("nan")


def good_request(port: int) -> str:
    began = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("POST", "/", REQUEST, {"Content-Type": "text/xml"})
        conn.getresponse().read()
        return "%.0f ms" % ((time.monotonic() - began) * 1000)
    except OSError:
        return "blocked"


def slow_clients(port: int, body: bool) -> str:
    head = (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n<" if body
            else b"POST / HTTP/1.1\r\nHost: x\r\n")
    socks = []
    for _ in range(300):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(head)
            socks.append(s)
        except OSError:
            break
    stop = threading.Event()

    def drip():
        while not stop.wait(0.5):
            for s in socks:
                try:
                    s.sendall(b"a")
                except OSError:
                    pass
    threading.Thread(target=drip, daemon=True).start()
    time.sleep(1.0)
    try:
        return good_request(port)
    finally:
        stop.set()
        for s in socks:
            s.close()


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--clients", default="1,8,64")
    args = ap.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    load = wrk if shutil.which("wrk") else python_load
    print("HTTP servers, %s load, %gs per run, %d cores" % (
        "wrk" if load is wrk else "Python client", args.seconds, os.cpu_count() or 0))
    print("%-30s %8s %10s %9s" % ("server", "clients", "req/s", "mean ms"))
    slow = []
    for name, module in CANDIDATES.items():
        if not installed(module):
            print("%-30s (not installed)" % name)
            continue
        proc, port = start(name)
        try:
            for c in counts:
                rate, mean = load(port, c, args.seconds)
                print("%-30s %8d %10.0f %9.2f" % (name, c, rate, mean), flush=True)
            slow.append((name, slow_clients(port, body=False), slow_clients(port, body=True)))
        finally:
            proc.kill()
            proc.wait()
    print("\n%-30s %22s %22s" % ("a good request while:", "300 slow headers", "300 slow bodies"))
    for name, headers, body in slow:
        print("%-30s %22s %22s" % (name, headers, body))


if __name__ == "__main__":
    main()
