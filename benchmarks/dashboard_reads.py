"""What one dashboard poll and one page cost with many applications.

    .venv/bin/python benchmarks/dashboard_reads.py [--apps 5000] [--components 4] [--db URL]

Builds a portal in process (SQLite in a temporary directory unless ``--db``) holding ``--apps``
applications of ``--components`` component rows each (rows only: nothing is enacted), then
calls its WSGI application directly (no sockets) and prints p50/p99 milliseconds for:
the change poll every open page makes (``/api/v1/version``, global and for one application),
the JSON listing (first page, last page, a name filter), and the pages themselves. The floor
printed beside them is one ``SELECT 1`` through the same store: what any read costs at least.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from sqlalchemy import text  # noqa: E402

from cddlm.app import Portal  # noqa: E402
from cddlm.application import repository as repo  # noqa: E402
from cddlm.config import Settings  # noqa: E402


def call(app, path: str, query: str = "") -> int:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query,
               "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8080", "HTTP_HOST": "127.0.0.1:8080",
               "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(b""), "SCRIPT_NAME": ""}
    status = []
    body = b"".join(app(environ, lambda s, h, e=None: status.append(s)))
    assert status[0].startswith("200"), (path, status, body[:300])
    return len(body)


def measure(fn, n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--apps", type=int, default=5000)
    ap.add_argument("--components", type=int, default=4)
    ap.add_argument("--db")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        portal = Portal(Settings(state_dir=tmp, db_url=args.db))
        try:
            t = time.perf_counter()
            ids = []
            for i in range(args.apps):
                app, _ = portal.service.create("app-%05d" % i, None, [], portal.url)
                ids.append(app.id)
            with portal.store.write() as conn:
                rows = [dict(app_id=a, path="c%d" % c, type="process", parent=None, position=c,
                             optional=False, oneshot=False, host="localhost", provider="localhost",
                             desired="deployed", observed="pending", generation=1, restarts=0,
                             updated=time.time()) for a in ids for c in range(args.components)]
                repo.insert_components(conn, rows)
            print("%d applications, %d component rows, built in %.1f s (%s)" % (
                args.apps, len(rows), time.perf_counter() - t, "PostgreSQL" if args.db else "SQLite"))
            web = portal.wsgi

            def floor():
                with portal.store.read() as conn:
                    conn.execute(text("SELECT 1")).scalar()

            cases = [
                ("floor: SELECT 1 through the store", floor),
                ("poll /api/v1/version", lambda: call(web, "/api/v1/version")),
                ("poll /api/v1/version?app=ID", lambda: call(web, "/api/v1/version", "app=" + ids[-1])),
                ("/api/v1/applications (first page)", lambda: call(web, "/api/v1/applications")),
                ("/api/v1/applications (last page)", lambda: call(web, "/api/v1/applications",
                                                                  "offset=%d" % max(0, args.apps - 50))),
                ("/api/v1/applications?name=app-04", lambda: call(web, "/api/v1/applications", "name=app-04")),
                ("page / (50 rows)", lambda: call(web, "/")),
                ("page /applications/ID", lambda: call(web, "/applications/" + ids[-1])),
            ]
            print("%-40s %10s %10s" % ("request", "p50 ms", "p99 ms"))
            for name, fn in cases:
                fn()
                p50, p99 = measure(fn, args.repeat)
                print("%-40s %10.2f %10.2f" % (name, p50, p99))
        finally:
            portal.store.dispose()


if __name__ == "__main__":
    main()
