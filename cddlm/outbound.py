"""The one way the portal speaks HTTP to other machines (DESIGN §9): host portals, the portals
``delegate`` components name, notification consumers, descriptor URLs and readiness checks.

An exchange goes to an address the caller has already checked (``netsafe.vet`` gives a
``Target``: the name as written, every address it resolved to, each one allowed), never to a
second lookup of the name; it follows no redirect, reads no proxy variable and asks for no
compression. It has:

- an **absolute deadline**: a watchdog thread shuts the socket down when it passes, so a peer
  that sends one byte every two seconds (each read well within a per-read timeout) is cut off
  on time, in the TLS handshake, the request, the headers or the body alike. ``within(s)``
  bounds every exchange a thread makes inside it by one deadline for them all (a request
  thread that makes several calls to other portals waits on them no longer than that).
- a **size cap** on the answer: a larger ``Content-Length`` is not read at all, a longer body
  is read up to the cap, dropped with its connection, and not kept (``Answer.complete`` is
  then False and ``body`` empty: the caller says whether that is an error).

Connections are kept alive and reused (``keep_alive=True``) per exact destination: scheme,
name, port, the address connected to and the TLS context (its client certificate), never
shared between destinations. A pooled connection that the other side has closed or written to
unasked is dropped, not used.

What went wrong is told in coarse classes (``Unreachable``): a refused connection and a silent
port read the same, and never a byte of what the other side sent. ``sent`` is False when the
request certainly never left (no connection, no TLS session).
"""

from __future__ import annotations

import contextlib
import heapq
import http.client
import itertools
import mmap
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Iterator

IDLE_SECONDS = 20.0      # a kept-alive connection unused this long is closed, not reused
IDLE_PER_PEER = 8        # kept-alive connections kept per destination
IDLE_TOTAL = 256         # kept-alive connections kept in all
READ_SIZE = 64 * 1024


class Unreachable(Exception):
    """Connecting, sending or reading failed, or took past the deadline; ``sent`` is False
    when the request certainly never reached the other side."""

    def __init__(self, message: str, sent: bool = True, expired: bool = False):
        super().__init__(message)
        self.sent = sent
        self.expired = expired      # the deadline passed (rather than a refusal or a cut)


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str                 # as written (the HTTP Host and the TLS server name)
    port: int
    addresses: tuple[str, ...]  # every address of host, each one allowed
    target: str               # path and query, what the request line asks for


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage     # .get() is case-insensitive
    body: bytes
    complete: bool = True                # False: the body passed the cap and was cut
    reason: str = ""                     # the status line's words


# -- the deadline ---------------------------------------------------------------------------------
class _Watch:
    """One exchange's socket under the watchdog until ``done``; ``expired`` once it was shut."""

    def __init__(self, fd: int, deadline: float):
        self.fd = fd
        self.deadline = deadline
        self.expired = False
        self._done = False
        self._lock = threading.Lock()

    def expire(self) -> None:
        with self._lock:        # never after done: the descriptor may be another socket's by then
            if self._done:
                return
            self.expired = True
            try:    # a duplicate of the descriptor: shutting it down shuts the connection
                with socket.socket(fileno=socket.dup(self.fd)) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def done(self) -> None:
        with self._lock:
            self._done = True


class Watchdog:
    """One thread that shuts sockets down at their deadlines."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Watch]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, sock: socket.socket, deadline: float) -> _Watch:
        w = _Watch(sock.fileno(), deadline)
        with self._wake:
            heapq.heappush(self._heap, (deadline, next(self._order), w))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="cddlm-outbound-watchdog",
                                                daemon=True)
                self._thread.start()
            self._wake.notify()
        return w

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                deadline, _, w = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                heapq.heappop(self._heap)
            w.expire()      # (a watch already done costs one lock)


WATCHDOG = Watchdog()
_bound = threading.local()


@contextlib.contextmanager
def within(seconds: float) -> Iterator[float]:
    """Every exchange this thread makes inside ends by ``seconds`` from now (or an earlier
    bound already in force); yields that deadline (time.monotonic)."""
    outer = getattr(_bound, "deadline", None)
    deadline = time.monotonic() + seconds
    _bound.deadline = deadline if outer is None else min(outer, deadline)
    try:
        yield _bound.deadline
    finally:
        _bound.deadline = outer


def deadline_after(timeout: float) -> float:
    """``timeout`` from now, or the thread's bound (``within``) if that comes first."""
    deadline = time.monotonic() + timeout
    outer = getattr(_bound, "deadline", None)
    return deadline if outer is None else min(outer, deadline)


# -- connections ----------------------------------------------------------------------------------
class _Pool:
    def __init__(self) -> None:
        self._idle: dict[tuple, list[tuple[float, http.client.HTTPConnection]]] = {}
        self._lock = threading.Lock()

    def take(self, key: tuple) -> http.client.HTTPConnection | None:
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                since, conn = idle.pop()
            if time.monotonic() - since < IDLE_SECONDS and _quiet(conn.sock):
                return conn
            conn.close()

    def give(self, key: tuple, conn: http.client.HTTPConnection) -> None:
        now = time.monotonic()
        stale: list[http.client.HTTPConnection] = []
        with self._lock:
            if sum(map(len, self._idle.values())) >= IDLE_TOTAL:     # make room: the stale go
                for k in list(self._idle):
                    stale += [c for since, c in self._idle[k] if now - since >= IDLE_SECONDS]
                    self._idle[k] = [(since, c) for since, c in self._idle[k] if now - since < IDLE_SECONDS]
                    if not self._idle[k]:
                        del self._idle[k]
            idle = self._idle.setdefault(key, [])
            kept = len(idle) < IDLE_PER_PEER and sum(map(len, self._idle.values())) < IDLE_TOTAL
            if kept:
                idle.append((now, conn))
        for c in stale + ([] if kept else [conn]):
            c.close()

    def close_idle(self) -> None:
        """Close every kept-alive connection (a portal stopping)."""
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for _, c in conns:
                c.close()


POOL = _Pool()


def _quiet(sock: socket.socket | None) -> bool:
    """Whether a kept-alive socket is still open with nothing unasked to read."""
    if sock is None:
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return False
    return not readable


def _connect(t: Target, context: ssl.SSLContext | None, deadline: float,
             connect_timeout: float) -> http.client.HTTPConnection:
    """A connection to the first checked address that answers, speaking to the name (Host
    header, TLS server name and certificate check) as written."""
    last: BaseException | None = None
    for address in t.addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            sock = socket.create_connection((address, t.port), timeout=min(connect_timeout, remaining))
        except OSError as e:
            last = e
            continue
        if t.scheme == "https":
            watch = WATCHDOG.watch(sock, deadline)
            try:
                sock = (context or ssl.create_default_context()).wrap_socket(sock, server_hostname=t.host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise Unreachable("TLS with %s failed: %s" % (t.host, coarse(e)), sent=False) from None
            finally:
                watch.done()
        conn = http.client.HTTPConnection(t.host, t.port)
        conn.sock = sock
        conn.auto_open = 0      # never a connection of its own (its own lookup of the name)
        return conn
    raise Unreachable("cannot connect to %s port %d: %s" % (t.host, t.port, coarse(last)), sent=False)


def coarse(e: BaseException | None) -> str:
    """What went wrong, in classes that tell nothing about the other side's network: a refused
    connection and a timeout both read "unreachable"."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return "certificate not trusted"
    if isinstance(e, ssl.SSLError):
        return "TLS error"
    return "unreachable or too slow"


# -- one exchange ---------------------------------------------------------------------------------
def _read(r: http.client.HTTPResponse, max_bytes: int, declared: int | None) -> bytes | None:
    """The body, or None past ``max_bytes``. A small declared body is read at once; any other
    into an anonymous mapping of the cap's size: its pages are taken only as they fill, and
    all go back to the system when it is closed (freed heap memory stays with the process:
    eight peers streaming 8 MiB each left a portal 110 MiB larger for good)."""
    if declared is not None and declared <= READ_SIZE:
        data = r.read(declared)
        if len(data) != declared:
            raise http.client.IncompleteRead(data, declared - len(data))
        return data
    with mmap.mmap(-1, max_bytes + 1) as buf, memoryview(buf) as view:
        size = 0
        while size <= max_bytes:
            n = r.readinto(view[size:size + READ_SIZE])
            if not n:
                break
            size += n
        return bytes(view[:size]) if size <= max_bytes else None


def exchange(t: Target, method: str, body: bytes | None = None, headers: dict[str, str] | None = None,
             *, timeout: float, max_bytes: int, connect_timeout: float | None = None,
             read_timeout: float | None = None, context: ssl.SSLContext | None = None,
             keep_alive: bool = False) -> Answer:
    """Send one request to ``t`` and read its answer, all within ``timeout`` seconds (and the
    thread's ``within`` bound), reading at most ``max_bytes`` of the body; ``connect_timeout``
    and ``read_timeout`` bound the connection and each wait for the other side, within that."""
    deadline = deadline_after(timeout)
    key = (t.scheme, t.host, t.port, t.addresses, id(context))
    conn = POOL.take(key) if keep_alive else None
    if conn is None:
        conn = _connect(t, context, deadline, connect_timeout or timeout)
    watch = WATCHDOG.watch(conn.sock, deadline)
    reusable = False
    try:
        conn.sock.settimeout(max(0.001, min(read_timeout or timeout, deadline - time.monotonic())))
        conn.putrequest(method, t.target, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.putheader("Connection", "keep-alive" if keep_alive else "close")
        conn.endheaders(body)
        r = conn.getresponse()
        declared = r.getheader("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > max_bytes:
            return Answer(r.status, r.headers, b"", False, r.reason)
        body = _read(r, max_bytes, int(declared) if declared and declared.strip().isdigit() else None)
        if body is None:
            return Answer(r.status, r.headers, b"", False, r.reason)
        reusable = keep_alive and not r.will_close
        return Answer(r.status, r.headers, body, True, r.reason)
    except (OSError, http.client.HTTPException) as e:
        # the same words for a deadline passed and a connection cut (no port scanner)
        expired = watch.expired or time.monotonic() >= deadline
        raise Unreachable("no complete answer: %s" % coarse(e), expired=expired) from None
    finally:
        watch.done()
        if reusable and not watch.expired:
            POOL.give(key, conn)
        else:
            conn.close()
