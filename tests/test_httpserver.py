"""The HTTP server (granian through the RSGI bridge): binding, slow clients, many connections,
TLS and mutual TLS. Each test runs a real server on loopback and a well-behaved client beside
whatever misbehaves."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time

import pytest

from cddlm import httpserver
from cddlm.httpserver import HttpServer, ServerOptions, TlsConfigError
from tests.conftest import closed_by_peer


def echo_app(environ, start_response):
    size = int(environ.get("CONTENT_LENGTH") or 0)
    data = environ["wsgi.input"].read(size) if size < 1 << 20 else b""
    body = b"%s %s %d %s" % (environ["REQUEST_METHOD"].encode(), environ["PATH_INFO"].encode(),
                             len(data), environ.get("HTTP_X_TEST", "").encode())
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


@pytest.fixture
def server():
    started = []

    def make(app=echo_app, gate=None, **options) -> HttpServer:
        s = HttpServer(app, "127.0.0.1", 0, ServerOptions(**options), gate=gate)
        s.start()
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


def get(port: int, path: str = "/x", body: bytes | None = None, timeout: float = 5.0,
        headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST" if body is not None else "GET", path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_port_zero_and_a_port_in_use(server):
    s = server()
    assert s.port > 0
    assert get(s.port, "/a%20b", b"hello", headers={"X-Test": "yes"}) == (200, b"POST /a b 5 yes")
    with pytest.raises(OSError) as info:
        HttpServer(echo_app, "127.0.0.1", s.port)   # no silent sharing through SO_REUSEPORT
    assert info.value.errno == 98


def test_stop_frees_the_port_and_start_again(server):
    s = server()
    port = s.port
    s.stop()
    again = HttpServer(echo_app, "127.0.0.1", port)
    again.start()
    try:
        assert get(port)[0] == 200
    finally:
        again.stop()


def test_slow_headers_are_closed_and_cost_no_thread(server):
    s = server(threads=2, header_timeout=1.0)
    slow = []
    for _ in range(300):
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\n")
        slow.append(c)
    connected = time.monotonic()
    stop = threading.Event()

    def drip():
        while not stop.wait(0.2):
            for c in slow:
                try:
                    c.sendall(b"X")
                except OSError:
                    pass
    t = threading.Thread(target=drip, daemon=True)
    t.start()
    try:
        began = time.monotonic()
        assert get(s.port, body=b"ok")[0] == 200
        assert time.monotonic() - began < 1.0
        # closed at the header deadline (1 s after the last connected), still dripping: awaited
        # (a fixed 2 s then half a second each could miss a loaded machine's late closes), up to
        # 5 s after the last connected, well before the default deadline (10 s)
        assert closed_by_peer(slow, connected + 5) == len(slow), \
            "every slowloris connection is closed at the header deadline"
    finally:
        stop.set()
        for c in slow:
            c.close()


def test_slow_bodies_cost_no_thread_and_time_out(server):
    s = server(threads=2, body_timeout=1.0)
    slow = []
    for _ in range(50):
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n<")
        slow.append(c)
    try:
        began = time.monotonic()
        for _ in range(5):
            assert get(s.port, body=b"ok")[0] == 200
        assert time.monotonic() - began < 1.0
        deadline = time.monotonic() + 30     # (bounds a failure only: the 408s come at 1 s)
        for c in slow:      # every one of them, each answered once
            c.settimeout(max(0.01, deadline - time.monotonic()))
            assert c.recv(1024).startswith(b"HTTP/1.1 408 ")
    finally:
        for c in slow:
            c.close()


def sent_in_parts(port: int, *parts: bytes, pause: float = 0.5) -> bytes:
    """What the server answers to a request sent in ``parts``, ``pause`` seconds apart."""
    with socket.create_connection(("127.0.0.1", port)) as c:
        for i, part in enumerate(parts):
            if i:
                time.sleep(pause)
            c.sendall(part)
        c.settimeout(30)      # the answer comes at once, or at a deadline of 1-2 s
        return c.recv(1024)


def test_a_body_in_parts_within_the_deadline_is_answered(server):
    s = server(body_timeout=2.0)
    answer = sent_in_parts(s.port, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
                                   b"01234", b"56789")
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"POST /x 10 ")


def test_a_slow_chunked_body_times_out(server):
    s = server(body_timeout=1.0)
    answer = sent_in_parts(s.port, b"POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                   b"chunked\r\n\r\n1\r\n<\r\n")
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert get(s.port, body=b"ok")[0] == 200


def test_more_connections_than_select_allows(server):
    s = server()
    httpserver.raise_file_limit()
    conns = []
    try:
        for _ in range(1100):
            conns.append(socket.create_connection(("127.0.0.1", s.port)))
        assert max(c.fileno() for c in conns) > 1024
        assert get(s.port)[0] == 200
    finally:
        for c in conns:
            c.close()


def test_declared_body_over_the_cap_is_not_read(server):
    seen = {}

    def app(environ, start_response):
        seen["length"] = environ["CONTENT_LENGTH"]
        seen["read"] = len(environ["wsgi.input"].read())
        start_response("413 Too Large", [("Content-Length", "0")])
        return [b""]
    s = server(app, max_body_bytes=1000)
    status, _ = get(s.port, body=b"x" * 5000)
    assert status == 413 and seen == {"length": "5000", "read": 0}


def test_a_failing_application_is_a_500_and_the_server_goes_on(server):
    def app(environ, start_response):
        raise RuntimeError("boom")
    s = server(app)
    assert get(s.port) == (500, b"internal error\n")
    assert get(s.port)[0] == 500



# -- the worker pool --------------------------------------------------------------------------------
def test_slow_requests_do_not_hold_up_quick_ones(server):
    """Quick requests run at most two at once (``_Pool.lively``); one that takes longer than
    the pool's patience stops counting, so slow ones run side by side, each on its own worker,
    and a quick one behind them is still answered at once."""
    entered, release = [], threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/slow":
            entered.append(environ["PATH_INFO"])
            release.wait(60)             # slow until the quick one has its answer
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode()]
    s = server(app, threads=6)
    answers: list = []
    slow = [threading.Thread(target=lambda: answers.append(get(s.port, "/slow", b"x", timeout=90)))
            for _ in range(4)]
    for t in slow:
        t.start()
    try:
        # all four running at once, side by side (two by two, the last two would never start
        # while the first two are held): awaited, where a fixed 0.3 s assumed their threads
        # had run by then
        deadline = time.monotonic() + 30
        while len(entered) < 4:
            assert time.monotonic() < deadline, "only %d slow requests run at once" % len(entered)
            time.sleep(0.01)
        t0 = time.monotonic()
        assert get(s.port, "/quick", b"x", timeout=30) == (200, b"/quick")
        # not after a slow one (they are held until it is answered): at once, 2 s allowing
        # for a loaded machine
        assert time.monotonic() - t0 < 2.0
    finally:
        release.set()
        for t in slow:
            t.join(60)
    assert answers == [(200, b"/slow")] * 4


def test_the_pool_runs_quick_jobs_at_most_lively_at_once_and_ends_its_workers():
    running, most, lock = [0], [0], threading.Lock()
    done = threading.Semaphore(0)

    def run(job):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        done.release()

    pool = httpserver._Pool(run, 6, "test-pool", lively=2, patience=5.0)
    for i in range(30):
        pool.put(i)
    for _ in range(30):
        assert done.acquire(timeout=5)
    assert most[0] == 2                 # six workers, never more than two at once
    pool.close()
    for t in pool._threads:
        t.join(5)
        assert not t.is_alive()


# -- TLS --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.pki import make_pki
    return make_pki(tmp_path_factory.mktemp("pki"))


def tls_get(port: int, context: ssl.SSLContext) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        conn.request("GET", "/x")
        return conn.getresponse().status
    finally:
        conn.close()


def test_https(server, pki):
    s = server(tls_cert=pki.server_cert, tls_key=pki.server_key)
    assert s.url.startswith("https://")
    assert tls_get(s.port, pki.client_context(cert=False)) == 200
    # a client that does not trust the server's CA refuses it
    with pytest.raises(ssl.SSLError):
        tls_get(s.port, ssl.create_default_context())
    # plain HTTP to the TLS port fails for that client only
    with pytest.raises((http.client.HTTPException, OSError)):
        get(s.port, timeout=2)
    assert tls_get(s.port, pki.client_context(cert=False)) == 200


def test_mutual_tls(server, pki):
    s = server(tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca_cert)
    assert tls_get(s.port, pki.client_context(cert=True)) == 200
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_get(s.port, pki.client_context(cert=False))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_get(s.port, pki.client_context(cert=True, other_ca=True))
    assert tls_get(s.port, pki.client_context(cert=True)) == 200


def test_tls_files_are_checked_before_serving(pki, tmp_path):
    with pytest.raises(TlsConfigError, match="both"):
        HttpServer(echo_app, "127.0.0.1", 0, ServerOptions(tls_cert=pki.server_cert))
    with pytest.raises(TlsConfigError, match="cannot read"):
        HttpServer(echo_app, "127.0.0.1", 0, ServerOptions(tls_cert=str(tmp_path / "none"),
                                                           tls_key=pki.server_key))
    with pytest.raises(TlsConfigError, match="PKCS#8"):
        HttpServer(echo_app, "127.0.0.1", 0, ServerOptions(tls_cert=pki.server_cert,
                                                           tls_key=pki.server_key_pkcs1))
    with pytest.raises(TlsConfigError, match="needs --tls-cert"):
        HttpServer(echo_app, "127.0.0.1", 0, ServerOptions(tls_client_ca=pki.ca_cert))


def test_other_event_loops_in_the_process_still_list_and_end_their_tasks(server):
    """granian's scheduler registers a stand-in task with asyncio; with a server running and
    answering, ``asyncio.all_tasks`` and ``asyncio.run`` of other loops still work (a browser
    driver's clean-up, or any asyncio program embedding a portal, failed on it)."""
    import asyncio
    s = server()
    assert get(s.port, body=b"x")[0] == 200

    async def main() -> int:
        task = asyncio.create_task(asyncio.sleep(30))
        await asyncio.sleep(0)
        return len(asyncio.all_tasks())     # itself and the sleeper

    got: list = []      # on a thread of its own (a test's browser driver may hold this one's)
    t = threading.Thread(target=lambda: got.append(asyncio.run(main())))
    t.start()
    t.join(10)
    assert got == [2]                       # and run's clean-up cancelled the sleeper


def test_a_job_that_raises_leaves_the_pool_its_worker():
    ran = threading.Semaphore(0)

    def run(job):
        if job == "bad":
            raise RuntimeError("boom")
        ran.release()

    pool = httpserver._Pool(run, 1, "test-pool")
    pool.put("bad")
    pool.put("good")
    assert ran.acquire(timeout=5)        # the one worker went on
    pool.close()


def test_a_gate_decides_before_the_body_is_read_and_may_decide_later(server):
    """The portal's authentication runs here (portal/wsgi.py, Router.gate): before a body is
    read it says how much of it to read, after it whether the application runs; either answer
    may come later, from another thread."""
    seen = []

    def gate(environ, body, resume):
        path = environ["PATH_INFO"]
        seen.append((path, body))
        if body is None:
            if path == "/later":
                threading.Timer(0.05, resume, args=(16,)).start()
                return httpserver.LATER
            return {"/free": None, "/nothing": 0}.get(path, 16)
        environ["HTTP_X_TEST"] = "gated"
        if path == "/later":
            threading.Timer(0.05, resume, args=(None,)).start()
            return httpserver.LATER
        return None

    s = server(gate=gate)
    assert get(s.port, "/free", b"x" * 40) == (200, b"POST /free 40 ")       # the server's cap
    assert get(s.port, "/capped", b"hello") == (200, b"POST /capped 5 gated")
    assert get(s.port, "/capped", b"y" * 40) == (200, b"POST /capped 0 gated")   # unread
    assert get(s.port, "/nothing", b"hello") == (200, b"POST /nothing 0 gated")
    assert get(s.port, "/later", b"later") == (200, b"POST /later 5 gated")
    assert ("/capped", b"hello") in seen and ("/free", b"x" * 40) not in seen
    assert ("/later", b"later") in seen


def test_a_body_let_in_late_by_the_gate_still_has_its_deadline(server):
    """A gate that decides later (a password being checked) lets the body be read when nothing
    else is in flight: the server's deadline timer, stopped meanwhile, counts for that body
    too, and a client that then stalls is answered 408 at the deadline, not never."""
    def gate(environ, body, resume):
        if body is None:
            threading.Timer(0.3, resume, args=(None,)).start()    # the timer stops meanwhile
            return httpserver.LATER
        return None

    s = server(gate=gate, body_timeout=1.0)
    with socket.create_connection(("127.0.0.1", s.port)) as c:
        c.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123")
        c.settimeout(10)      # (bounds a failure only: the 408 comes at 1.3 s)
        assert c.recv(1024).startswith(b"HTTP/1.1 408 ")
    assert get(s.port, body=b"ok")[0] == 200


def test_requests_are_answered_while_the_loop_is_held_up(server):
    """A request of declared length starts on the granian thread that read its headers and
    ends on the worker that answered it: the server's event loop (which reads streamed bodies
    and keeps the deadlines) has no part in it, so a loop held up holds no such request up,
    and the thread hand-overs of a request are two, not four."""
    s = server()
    held, release = threading.Event(), threading.Event()
    s._loop.call_soon_threadsafe(lambda: (held.set(), release.wait(10)))
    try:
        assert held.wait(5)
        began = time.monotonic()
        for _ in range(20):
            assert get(s.port, body=b"ok", timeout=5) == (200, b"POST /x 2 ")
        assert time.monotonic() - began < 2.0
    finally:
        release.set()
    assert get(s.port, body=b"ok") == (200, b"POST /x 2 ")
