"""Peers that misbehave, for the tests of the portal's outbound calls (cddlm/outbound.py,
cddlm/agents.py): real sockets on loopback, each a listener a test starts and stops.

    with Rogue(trickle(2.0)) as peer:      # answers one byte every 2 s, for ever
        peer.url                           # http://127.0.0.1:PORT/cddlm/portal
        peer.requests                      # each request's (method, path, headers), as received

``trickle``, ``stream``, ``answer`` and ``proxy`` make the behaviours; a behaviour gets the
connection's socket and the request read from it, and may go on until ``stopping`` is set.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from typing import Callable
from urllib.parse import urlsplit

Behaviour = Callable[[socket.socket, "Request", threading.Event], None]
PATH = "/cddlm/portal"


class Request:
    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes):
        self.method, self.path, self.headers, self.body = method, path, headers, body


def read_request(sock: socket.socket) -> Request | None:
    """One HTTP/1.1 request (Content-Length bodies), or None when the client closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    size = int(headers.get("content-length") or 0)
    while len(rest) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Request(method, path, headers, rest[:size])


class Rogue:
    def __init__(self, behaviour: Behaviour, host: str = "127.0.0.1"):
        self.behaviour = behaviour
        self.requests: list[Request] = []
        self.stopping = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(128)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.base = "http://%s:%d" % (host, self.port)
        self.url = self.base + PATH
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []

    def __enter__(self) -> "Rogue":
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        for t in self._threads:
            t.join(timeout=5)
        for c in self._conns:
            c.close()
        self._sock.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            while not self.stopping.is_set():
                request = read_request(conn)
                if request is None:
                    return
                self.requests.append(request)
                if self.behaviour(conn, request, self.stopping) is not True:
                    return      # a behaviour that keeps the connection answers True
        except OSError:
            pass
        except Exception:       # a test's behaviour that broke: shown, not swallowed
            import traceback
            traceback.print_exc()
        finally:
            conn.close()


def trickle(interval: float, status: bytes = b"HTTP/1.1 200 OK\r\n") -> Behaviour:
    """Answer one byte every ``interval`` seconds, for ever: a status line, then a header
    that never ends."""
    def behave(conn: socket.socket, request: Request, stopping: threading.Event) -> None:
        data = status + b"X-Slow: " + b"a" * 10_000_000
        for i in range(len(data)):
            if stopping.wait(interval if i else 0):
                return
            conn.sendall(data[i:i + 1])
    return behave


def stream(total: int, content_type: bytes = b"text/xml") -> Behaviour:
    """A 200 answer with a body of ``total`` bytes (no Content-Length), sent as fast as the
    other side reads it."""
    def behave(conn: socket.socket, request: Request, stopping: threading.Event) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type + b"\r\nConnection: close\r\n\r\n"
                     + b"<a>")
        chunk = b"x" * 65536
        sent = 0
        while sent < total and not stopping.is_set():
            conn.sendall(chunk)
            sent += len(chunk)
    return behave


def answer(status: int = 500, body: bytes = b"", content_type: str = "text/xml") -> Behaviour:
    """The same answer to every request (on a kept-alive connection)."""
    def behave(conn: socket.socket, request: Request, stopping: threading.Event) -> bool:
        conn.sendall(http_answer(status, body, content_type))
        return True
    return behave


class Proxy:
    """Forwards each request to ``target`` (a base URL, set once known) unless ``refuse``
    answers it instead (a behaviour's bytes, or None to forward); keeps connections alive."""

    def __init__(self) -> None:
        self.target: str | Callable[[], str] | None = None     # a base URL, or what gives it
        self.refuse: Callable[[Request], bytes | None] = lambda request: None

    def __call__(self, conn: socket.socket, request: Request, stopping: threading.Event) -> bool:
        instead = self.refuse(request)
        if instead is not None:
            conn.sendall(instead)
            return True
        parts = urlsplit((self.target() if callable(self.target) else self.target) or "")
        upstream = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            headers = {k: v for k, v in request.headers.items() if k not in ("host", "connection")}
            upstream.request(request.method, request.path, body=request.body or None, headers=headers)
            r = upstream.getresponse()
            body = r.read()
            head = "HTTP/1.1 %d %s\r\n" % (r.status, r.reason)
            for name, value in r.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    head += "%s: %s\r\n" % (name, value)
            conn.sendall((head + "Content-Length: %d\r\n\r\n" % len(body)).encode("latin-1") + body)
        finally:
            upstream.close()
        return True


def http_answer(status: int, body: bytes, content_type: str = "text/xml; charset=utf-8") -> bytes:
    return ("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
        status, http.client.responses.get(status, "X"), content_type, len(body))).encode() + body


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
