"""A well-behaved client's latency while hostile clients attack, and the portal's memory under
the large-input attacks (issue 16).

    .venv/bin/python benchmarks/hostile_load.py [--requests 300] [--hostile 16]

A portal runs as its own process on a loopback port (``cddlm portal serve``, SQLite), with a
running application. A good client sends GetResourceProperty(api:state) to that application,
one request at a time on a keep-alive connection, and times each; it does so first alone, then
while ``--hostile`` clients send, in a loop, the worst requests of issue 16: QueryResourceProperties
with nested count(//*) predicates (N^5), HOT templates whose merge keys double per level,
nested str_replace, 200,000 attributes on one element, and references to a FIFO.

Printed: the good client's p50/p99/max alone and under attack (targets: under 20 ms alone,
under 500 ms under attack), with the floor (a GET of a static schema file: the HTTP server and
the RSGI bridge, no SOAP); the hostile requests answered, by fault; the portal's peak RSS
(VmHWM) before and after the attacks and the largest resident size of its XPath helpers
(target: the portal under 300 MB). Figures are noisy on a shared machine: the ratio of the
two p99s, measured in one run, is the useful one.

Then the login floods of issue 27 (``--phase logins`` alone), against a second portal with a
users file: a signed-in client (alice, her Basic credentials verified once) sends lookups on a
keep-alive connection alone, then while, in turn, 32 clients send bad Basic logins at alice's
account each from a new 127.x address, 64 clients send guesses at names of no one from 64
places (a scrypt check each, until the check threads are busy), and 16 clients send about a
megabyte of XML without credentials; each line prints her p50/p99/max beside the 500 ms
target, and what the attackers got (HTTP statuses).
"""

from __future__ import annotations

import argparse
import collections
import http.client
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.hostile.conftest import ENVELOPE, HOT, NATIVE, Answer, start_portal  # noqa: E402
from tests.hostile.test_exhaust import merge_bomb, str_replace_bomb  # noqa: E402
from tests.hostile.test_hold import NESTED_COUNT  # noqa: E402

XPATH = "http://www.w3.org/TR/1999/REC-xpath-19991116"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Client:
    """One keep-alive connection posting prebuilt envelopes."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def post(self, path: str, body: bytes) -> tuple[float, bytes]:
        started = time.perf_counter()
        try:
            self.conn.request("POST", path, body, {"Content-Type": "text/xml; charset=utf-8"})
            data = self.conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            raise
        return time.perf_counter() - started, data

    def get(self, path: str) -> float:
        started = time.perf_counter()
        self.conn.request("GET", path)
        self.conn.getresponse().read()
        return time.perf_counter() - started


def good_client(url: str, victim: str, count: int) -> list[float]:
    client = Client(url)
    path = urlsplit(victim).path
    body = (ENVELOPE % ("", "<wsrf-rp:GetResourceProperty>api:state</wsrf-rp:GetResourceProperty>")).encode()
    times = []
    for _ in range(count):
        elapsed, data = client.post(path, body)
        assert b"running" in data, data[:300]
        times.append(elapsed)
    return times


def attacks(portal, fifo: Path) -> list[tuple[str, bytes]]:
    """(path, envelope) of each hostile request (initializes to fresh applications)."""
    def init(app: str, language: str, inner: str) -> tuple[str, bytes]:
        """validate-only: every repetition is resolved in full, and none changes anything."""
        return (urlsplit(app).path, (ENVELOPE % ("", '<api:initializeRequest><api:descriptor language="%s">'
                                                 '%s</api:descriptor><api:options><api:option name='
                                                 '"urn:cddlm:option:validate-only"><api:boolean>true'
                                                 '</api:boolean></api:option></api:options>'
                                                 '</api:initializeRequest>' % (language, inner))).encode())

    def text(template: str) -> str:
        return "<api:text>%s</api:text>" % template.replace("&", "&amp;").replace("<", "&lt;")

    query = (urlsplit(portal.url).path, (ENVELOPE % ("", '<wsrf-rp:QueryResourceProperties>'
             '<wsrf-rp:QueryExpression Dialect="%s">%s</wsrf-rp:QueryExpression>'
             '</wsrf-rp:QueryResourceProperties>' % (XPATH, NESTED_COUNT))).encode())
    attributes = " ".join('a%d=""' % i for i in range(200_000))
    out = [query, query]
    for inner, language in ((text(merge_bomb()), HOT), (text(str_replace_bomb()), HOT),
                            ('<api:body><application xmlns="%s" %s/></api:body>' % (NATIVE, attributes), NATIVE),
                            ("<api:reference>%s</api:reference>" % fifo.as_uri(), NATIVE)):
        out.append(init(portal.create(), language, inner))
    return out


def line(name: str, times: list[float]) -> str:
    return "%-48s p50 %7.1f ms   p99 %7.1f ms   max %7.1f ms" % (
        name, 1000 * percentile(times, 0.5), 1000 * percentile(times, 0.99), 1000 * max(times))


def login_floods(count: int) -> None:
    """The login floods of the module docstring."""
    import base64
    from tests.hostile.test_logins import LOOKUP, Flood, Users, megabyte_envelope
    from tests.security import wire
    from tests.security.conftest import make_users
    tmp = Path(tempfile.mkdtemp(prefix="cddlm-logins-"))
    users = Users(tmp, *make_users(tmp))
    portal = users.portal()
    alice = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-secret-1").decode(),
             "Content-Type": "text/xml; charset=utf-8"}
    lookup = wire.envelope(LOOKUP)

    def bystander() -> list[float]:
        parts = urlsplit(portal.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            conn.request("POST", parts.path, lookup, alice)
            data = conn.getresponse().read()
            times.append(time.perf_counter() - started)
            assert b"NoSuchApplicationFault" in data, data[:300]
        conn.close()
        return times

    def bad_login(i: int, k: int):
        return {"Authorization": "Basic " + base64.b64encode(b"alice:guess-%d-%d" % (i, k)).decode()}, lookup

    def no_one(i: int, k: int):
        return {"Authorization": "Basic " + base64.b64encode(b"nobody-%d-%d:guess" % (i, k)).decode()}, lookup

    megabyte = megabyte_envelope(0, 0)
    floods = [("bad Basic logins, rotating 127.x (32 clients)", 32, "127.100", bad_login, True),
              ("scrypt flood: 64 clients from 64 places", 64, "127.50", no_one, False),
              ("1 MB without credentials (16 clients)", 16, "127.60", lambda i, k: megabyte, False)]
    try:
        bystander()                                   # warm up (and sign alice in)
        print(line("signed-in lookup, alone", bystander()))
        for name, clients, first, make, rotate in floods:
            with Flood(portal, clients, first, make, rotate) as flood:
                time.sleep(1.0)
                times = bystander()
            print(line("signed-in lookup, " + name, times) + "   (target p99 < 500 ms)")
            print("%-48s %s" % ("  the attackers got (HTTP status: count)", dict(sorted(flood.statuses.items()))))
    finally:
        for p in users.portals:
            p.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="good requests per phase")
    parser.add_argument("--hostile", type=int, default=16, help="hostile clients")
    parser.add_argument("--phase", choices=("all", "issue16", "logins"), default="all",
                        help="the attacks of issue 16, the login floods of issue 27, or both")
    args = parser.parse_args()
    if args.phase != "issue16":
        print("machine: %d cores, load average %.1f" % (os.cpu_count(), os.getloadavg()[0]))
        login_floods(args.requests)
        if args.phase == "logins":
            return
    tmp = Path(tempfile.mkdtemp(prefix="cddlm-hostile-"))
    allowed = tmp / "allowed"
    allowed.mkdir()
    fifo = allowed / "fifo.xml"
    os.mkfifo(fifo)
    portal = start_portal(tmp, ["--allow-descriptor-dir", str(allowed)])
    try:
        client = Client(portal.url)
        floor = [client.get("/cddlm/wsdl/api.xsd") for _ in range(args.requests)]
        good_client(portal.url, portal.victim, 50)                     # warm up
        alone = good_client(portal.url, portal.victim, args.requests)
        peak_before = portal.status("VmHWM")
        requests = attacks(portal, fifo)
        stop = threading.Event()
        answered: collections.Counter = collections.Counter()

        def hostile(i: int) -> None:
            c = Client(portal.url)
            k = i
            while not stop.is_set():
                path, body = requests[k % len(requests)]
                k += 1
                try:
                    _, data = c.post(path, body)
                    answered[Answer(200, data, 0).fault() or "accepted"] += 1
                except (OSError, http.client.HTTPException) as e:
                    answered["connection: %s" % type(e).__name__] += 1

        threads = [threading.Thread(target=hostile, args=(i,), daemon=True) for i in range(args.hostile)]
        for t in threads:
            t.start()
        time.sleep(1.0)                          # the attack under way
        helpers = []
        attacked = good_client(portal.url, portal.victim, args.requests)
        children = [c for task in Path("/proc/%d/task" % portal.proc.pid).iterdir()
                    for c in (task / "children").read_text().split()]
        for child in children:
            try:
                status = Path("/proc/%s/status" % child).read_text()
                helpers.append(int(next(l for l in status.splitlines() if l.startswith("VmHWM")).split()[1]))
            except (OSError, StopIteration):
                pass
        stop.set()
        for t in threads:
            t.join(90)
        peak_after = portal.status("VmHWM")

        print("machine: %d cores, load average %.1f at the end" % (os.cpu_count(), os.getloadavg()[0]))
        print(line("floor (GET of a static file)", floor))
        print(line("GetResourceProperty, alone", alone))
        print(line("GetResourceProperty, %d hostile" % args.hostile, attacked))
        print("p99 under attack / alone: %.1f x" % (percentile(attacked, 0.99) / percentile(alone, 0.99)))
        print("hostile requests answered: %s" % dict(answered.most_common()))
        print("portal peak RSS: %.0f MiB before the attacks, %.0f MiB after (target: under 300 MB)"
              % (peak_before / 1024, peak_after / 1024))
        if helpers:
            print("XPath helpers alive at the end: %d, largest peak RSS %.0f MiB"
                  % (len(helpers), max(helpers) / 1024))
    finally:
        portal.stop()


if __name__ == "__main__":
    main()
