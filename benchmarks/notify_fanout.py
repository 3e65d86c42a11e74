"""Notification fan-out: many subscribers, many events, every one delivered.

    .venv/bin/python benchmarks/notify_fanout.py [--subscribers 100] [--events 1000]
        [--consumers 4] [--clients 4] [--rate R] [--workers N] [--batch N] [--db URL]

One portal process (SQLite under a temporary state dir by default); ``--consumers`` consumer
processes, each an HTTP server (``cddlm.httpserver``) hosting many subscriber paths (``/s/N``), so the receiving
side does not bottleneck on one interpreter's lock; ``--subscribers`` subscriptions to the
portal's ``api:ApplicationCreated`` topic, spread over the consumers. Then ``--clients``
processes create ``--events`` applications, as fast as the portal takes them or at ``--rate``
per second: each create commits one event, which every subscriber must receive (100 x 1,000 =
100,000 notification messages by default).

Printed: the time from the first create to the last delivery, the creates' own duration,
p50/p99/max delivery latency (from the event's commit timestamp, ``api:timestamp``, to its
arrival at the consumer), Notify requests and messages per request, and duplicates.
Targets: everything delivered within 30 s, p99 under 2 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cddlm.config import Settings  # noqa: E402
from portal_throughput import _post, pct  # noqa: E402  (this folder's raw-envelope client)

API = "http://www.gridforum.org/cddlm/deployapi/2005/02"
WSNT = "http://docs.oasis-open.org/wsn/b-2"
ENV = ('<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" xmlns:api="%s" '
       'xmlns:wsnt="%s" xmlns:wsa="http://www.w3.org/2005/08/addressing"><soapenv:Body>%%s'
       '</soapenv:Body></soapenv:Envelope>' % (API, WSNT))
SUBSCRIBE = ('<wsnt:Subscribe><wsnt:ConsumerReference><wsa:Address>%s</wsa:Address></wsnt:ConsumerReference>'
             '<wsnt:Filter><wsnt:TopicExpression Dialect="http://docs.oasis-open.org/wsn/t-1/TopicExpression/'
             'Simple">api:ApplicationCreated</wsnt:TopicExpression></wsnt:Filter>'
             '<wsnt:InitialTerminationTime>PT1H</wsnt:InitialTerminationTime></wsnt:Subscribe>')


# -- the portal -------------------------------------------------------------------------------------
def serve(state_dir: str, db: str | None, workers: int, batch: int) -> None:
    import logging
    from cddlm.app import Portal
    from cddlm.config import Settings
    logging.basicConfig(level=logging.WARNING)
    portal = Portal(Settings(state_dir=state_dir, db_url=db, port=0, delivery_workers=workers,
                             delivery_batch=batch))
    portal.bind()
    portal.serve_forever(lambda url: print("READY %s" % portal.url, flush=True))


# -- consumers --------------------------------------------------------------------------------------
def consume(index: int, ready, counter, requests, results) -> None:
    """A consumer process: records (event timestamp, arrival) per message, per subscriber."""
    from lxml import etree
    from cddlm import httpserver
    seen: dict[str, set[str]] = {}
    latencies: list[float] = []
    duplicates = [0]
    tag_event = "{%s}applicationCreatedEvent" % API

    def app(environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        now = time.time()
        doc = etree.fromstring(body)
        mine = seen.setdefault(environ["PATH_INFO"], set())
        n = 0
        for event in doc.iter(tag_event):
            rid = event.findtext("{%s}ResourceId" % API)
            if rid in mine:
                duplicates[0] += 1
                continue
            mine.add(rid)
            stamp = event.findtext("{%s}timestamp" % API)
            latencies.append(now - dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
            n += 1
        with counter.get_lock():
            counter.value += n
        with requests.get_lock():
            requests.value += 1
        start_response("202 Accepted", [("Content-Length", "0")])
        return [b""]

    server = httpserver.serve(app, "127.0.0.1", 0, httpserver.ServerOptions(threads=4))
    ready.put((index, server.port))
    results.get()            # the parent asks once everything has arrived (or time is up)
    ready.put((index, latencies, duplicates[0]))


# -- clients ----------------------------------------------------------------------------------------
def create(args) -> float:
    base, ident, count, interval = args
    host = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(host.hostname, host.port, timeout=60)
    start = time.monotonic()
    for n in range(count):
        if interval:
            time.sleep(max(0.0, start + n * interval - time.monotonic()))
        _post(conn, "/cddlm/portal",
              (ENV % "<api:createRequest><api:name>f-%d-%d</api:name></api:createRequest>" % (ident, n)).encode())
    conn.close()
    return time.time()


def scratch_schema(url: str):
    """A PostgreSQL URL whose search_path is a fresh schema (dropped by the returned function),
    so the benchmark leaves the database as it found it."""
    import psycopg
    schema = "bench_notify_%d" % os.getpid()
    plain = url.split("?", 1)[0]
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "%s"' % schema)

    def drop() -> None:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute('DROP SCHEMA "%s" CASCADE' % schema)
    return plain + "?options=-csearch_path%3D" + schema, drop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--consumers", type=int, default=4, help="consumer processes")
    parser.add_argument("--clients", type=int, default=4, help="processes creating applications")
    parser.add_argument("--workers", type=int, default=Settings.delivery_workers,
                        help="the portal's delivery_workers (default: the portal's default)")
    parser.add_argument("--batch", type=int, default=Settings.delivery_batch,
                        help="the portal's delivery_batch (default: the portal's default)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="creates per second in all (default: as fast as the portal takes them)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--db", help="database URL (default SQLite in a temporary directory; with "
                                     "PostgreSQL, a scratch schema is made and dropped)")
    parser.add_argument("--serve", nargs=2, metavar=("STATE", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], None if args.serve[1] == "-" else args.serve[1], args.workers, args.batch)
        return 0
    db, drop = (scratch_schema(args.db) if args.db and args.db.startswith("postgres") else (args.db, None))
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen([sys.executable, __file__, "--workers", str(args.workers),
                                   "--batch", str(args.batch), "--serve", tmp, db or "-"],
                                  stdout=subprocess.PIPE, cwd=ROOT)
        ready, counter, requests = mp.Queue(), mp.Value("l", 0), mp.Value("l", 0)
        asks = [mp.Queue() for _ in range(args.consumers)]
        consumers = [mp.Process(target=consume, args=(i, ready, counter, requests, asks[i]), daemon=True)
                     for i in range(args.consumers)]
        try:
            line = server.stdout.readline().decode()
            if not line.startswith("READY "):
                raise SystemExit("the portal did not start: %r" % line)
            base = line.split()[1]
            for c in consumers:
                c.start()
            ports = dict(ready.get(timeout=30) for _ in consumers)
            host = urllib.parse.urlsplit(base)
            conn = http.client.HTTPConnection(host.hostname, host.port)
            for i in range(args.subscribers):
                url = "http://127.0.0.1:%d/s/%d" % (ports[i % args.consumers], i)
                _post(conn, "/cddlm/portal", (ENV % SUBSCRIBE % url).encode())
            expected = args.subscribers * args.events
            share = [args.events // args.clients + (1 if i < args.events % args.clients else 0)
                     for i in range(args.clients)]
            started = time.time()
            with mp.Pool(args.clients) as pool:
                interval = args.clients / args.rate if args.rate else 0.0
                pending = pool.map_async(create, [(base, i, n, interval) for i, n in enumerate(share)])
                while counter.value < expected and time.time() - started < args.timeout:
                    time.sleep(0.02)
                finished = time.time()
                created = max(pending.get(timeout=args.timeout))
            for q in asks:
                q.put("report")
            latencies, duplicates = [], 0
            for _ in consumers:
                _, lat, dup = ready.get(timeout=60)
                latencies += lat
                duplicates += dup
            print("notification fan-out (%s, %d subscribers on %d consumer processes, %d events, "
                  "delivery_workers %d, delivery_batch %d, %d cores)"
                  % (args.db or "SQLite", args.subscribers, args.consumers, args.events, args.workers,
                     args.batch, os.cpu_count()))
            print("creates:        %d in %.2f s (%.0f/s)" % (args.events, created - started,
                                                               args.events / (created - started)))
            print("delivered:      %d of %d messages%s" % (counter.value, expected,
                                                            "" if counter.value >= expected else "  (TIMED OUT)"))
            print("all delivered:  %.2f s after the first create (target < 30 s)" % (finished - started))
            if latencies:
                print("latency:        p50 %.3f s, p99 %.3f s, max %.3f s (target p99 < 2 s)"
                      % (pct(latencies, 50), pct(latencies, 99), max(latencies)))
            print("Notify requests: %d (%.1f messages each), duplicates %d"
                  % (requests.value, counter.value / max(1, requests.value), duplicates))
        finally:
            server.terminate()
            server.wait(timeout=30)
            for c in consumers:
                if c.is_alive():
                    c.terminate()
            if drop is not None:
                drop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
