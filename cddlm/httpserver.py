"""The HTTP server every cddlm process uses: granian embedded in this process, with a bridge
from its RSGI interface to the portal's WSGI application.

Why granian (see docs/http-server.md for the measurements): one well-kept server that does, by
itself, what a portal on a network needs: TLS and mutual TLS (rustls), an event loop on epoll
(tokio: no ``select()`` descriptor limit), an absolute deadline for reading request headers
(hyper: a slowloris client is closed, it does not hold a thread), a bound on the requests
in flight (backpressure), and speed.

Why the RSGI bridge rather than granian's WSGI interface: under WSGI a handler thread reads the
body itself, so a client that sends its body one byte a second holds a thread. Here the body is
read by granian's I/O threads, under a deadline and a size cap, and only a complete request is
handed to a worker thread that runs the WSGI application. A slow client costs a socket, never a
thread.

Binding: the listening socket is made here (so ``port=0`` picks a free port that we can read,
and a port in use fails with ``EADDRINUSE`` instead of being shared through ``SO_REUSEPORT``)
and handed to granian.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import io
import logging
import resource
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import unquote_to_bytes

from granian import _futures
from granian._granian import SocketHolder
from granian.constants import HTTPModes, Interfaces, SSLProtocols, TaskImpl
from granian.http import HTTP1Settings
from granian.server import embed as _embed
from granian.server.embed import Server as _EmbeddedServer

from cddlm.connections import Warden

log = logging.getLogger(__name__)
logging.getLogger("granian").setLevel(logging.ERROR)   # "embedded server is experimental" etc.


MiB = 1024 * 1024


@dataclass(frozen=True)
class ServerOptions:
    """How one server treats its clients; every field is a documented portal setting."""

    threads: int = 8                  # worker threads running the WSGI application
    max_connections: int = 4096       # connections being read or answered at once (granian's
                                      # backpressure); more wait in the listen backlog
    max_connections_per_address: int = 256   # of one client address; its excess is closed
                                      # (``connections.Warden``); 0: no cap
    header_timeout: float = 10.0      # seconds a client has to send the request line and headers
    body_timeout: float = 30.0        # seconds a client has to send the whole body
    max_body_bytes: int = 40 * MiB    # bodies are read up to this (+1 byte) and no further
    backlog: int = 1024
    tls_cert: str | None = None       # PEM certificate chain: serve HTTPS
    tls_key: str | None = None        # PEM private key
    tls_client_ca: str | None = None  # PEM CA bundle: require client certificates it signed
    tls_min_version: str = "tls1.2"


def _path(name: str | None) -> Path | None:
    return Path(name) if name else None


class TlsConfigError(ValueError):
    """The TLS files cannot be used (missing, unreadable, or the wrong kind)."""


def raise_file_limit() -> int:
    """Raise this process's open-file limit to its hard limit (every running component holds a
    pidfd; every client a socket). Returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def _check_tls(options: ServerOptions) -> None:
    if bool(options.tls_cert) != bool(options.tls_key):
        raise TlsConfigError("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
    if options.tls_client_ca and not options.tls_cert:
        raise TlsConfigError("--tls-client-ca needs --tls-cert and --tls-key (client certificates "
                             "are asked for only over TLS)")
    for what, path in (("certificate", options.tls_cert), ("key", options.tls_key),
                       ("client CA", options.tls_client_ca)):
        if not path:
            continue
        try:
            with open(path, "rb") as f:
                head = f.read(64 * 1024)
        except OSError as e:
            raise TlsConfigError("cannot read the TLS %s %s: %s" % (what, path, e.strerror)) from None
        if b"-----BEGIN " not in head:
            raise TlsConfigError("the TLS %s %s is not a PEM file" % (what, path))
        if what == "key" and b"-----BEGIN PRIVATE KEY-----" not in head:
            raise TlsConfigError(
                "the TLS key %s is not an unencrypted PKCS#8 key (BEGIN PRIVATE KEY); convert it "
                "with: openssl pkcs8 -topk8 -nocrypt -in OLD.key -out NEW.key" % path)


class _Granian(_EmbeddedServer):
    """granian's embedded server, serving on a socket bound by us."""

    def __init__(self, sock: socket.socket, *args: Any, **kwargs: Any):
        self._own_socket = sock
        super().__init__(*args, **kwargs)

    def _init_shared_socket(self):
        self._ssp = None
        self._shd = SocketHolder(self._own_socket.detach(), False, self.backlog)


class _Direct:
    """A callback that may run on whichever thread completes what it waits for (see
    ``_Loop``); run on the loop, it behaves as any other callback."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args: Any) -> None:
        self.fn(*args)


class _Loop(asyncio.SelectorEventLoop):
    """The server's event loop. granian completes a future (a request body read) on one of its
    own threads, holding the interpreter lock, then asks the loop to run the future's callbacks
    (``call_soon_threadsafe``), which wakes the loop's thread only for it to hand the request
    on to a worker. A ``_Direct`` callback runs at once, on the thread that completed the
    future: one thread wake-up less per request. Any other callback is scheduled as usual."""

    def call_soon_threadsafe(self, callback, *args, context=None):   # noqa: D102
        if type(callback) is _Direct:
            callback(*args)
            return None
        return super().call_soon_threadsafe(callback, *args, context=context)

    def call_soon(self, callback, *args, context=None):   # noqa: D102
        if type(callback) is _Direct:   # a future done before its callback was added
            callback(*args)
            return None
        return super().call_soon(callback, *args, context=context)


class _Scheduler(_futures._BaseCBScheduler):
    """granian's scheduler of request coroutines (``task_impl=rust``), but starting each
    coroutine at once on the granian thread that has the request, not on the server's loop:
    one thread wake-up less per request, and the loop's thread has no part in a request that
    declares its length (``Bridge``). A coroutine it runs is no asyncio task (``_no_task``):
    ``Bridge.__call__`` calls nothing that needs one, nor anything bound to the loop's thread.
    The first step of granian's own scheduler is ``loop.call_soon_threadsafe(run, coro)``."""

    __slots__ = []

    def __init__(self, loop, cb, aio_task, aio_tenter, aio_texit):
        super().__init__()
        run = self._run
        self._schedule_fn = lambda watcher: run(cb(watcher))


def _no_task(task) -> None:
    """A request's coroutine steps on any thread: no task of the loop's is entered or left."""


_granian_scheduler = _embed._new_cbscheduler


def _new_scheduler(loop, cb, impl_asyncio: bool = False):
    if type(loop) is not _Loop or impl_asyncio:
        return _granian_scheduler(loop, cb, impl_asyncio)
    return _Scheduler(loop, cb, None, _no_task, _no_task)


_embed._new_cbscheduler = _new_scheduler


class _Answered:
    """What a request's coroutine awaits until its answer is sent; ``set`` (from any thread,
    once the response is handed to granian, or on the loop for a 408) steps the coroutine to
    its end on that thread, without waking the loop. The coroutine's scheduler registers its
    waker after the coroutine yields this, on its own thread, which may be after ``set``: the
    lock makes exactly one of the two call it."""

    __slots__ = ("_asyncio_future_blocking", "_lock", "_set", "_waker")

    def __init__(self):
        self._asyncio_future_blocking = False
        self._lock = threading.Lock()
        self._set = False
        self._waker = None

    def __await__(self):
        if not self._set:
            self._asyncio_future_blocking = True
            yield self

    def add_done_callback(self, waker, context=None) -> None:   # (called by the scheduler)
        with self._lock:
            if not self._set:
                self._waker = waker
                return
        waker(self)

    def result(self) -> None:
        return None

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set = True
            waker, self._waker = self._waker, None
        if waker is not None:
            waker(self)


class _Pool:
    """The worker threads that run requests, at most ``lively`` of them at once while they are
    quick: a request waits in the backlog for one of those rather than waking another thread.
    Under the interpreter lock more threads at once only take turns, and each turn is a thread
    switch (8 clients reading state: 2,900 answers a second from 8 workers at once, 4,600 from
    2). A request running longer than ``patience`` (a deployment, a database that is slow to
    answer) stops counting, and another worker takes the backlog, up to all of them.

    A worker that finishes takes the next request itself; idle workers wait each on its own
    lock, and the most recently idle one is woken first (its memory is the warmest). ``check``
    (called while requests are in flight, see ``Bridge._tick``) wakes workers when those
    running have grown slow with a backlog waiting."""

    def __init__(self, run: Callable[[Any], None], threads: int, name: str,
                 lively: int = 2, patience: float = 0.02):
        self._run = run
        self.lively, self.patience = lively, patience
        self._lock = threading.Lock()
        self._backlog: collections.deque = collections.deque()
        self._idle: list[list] = []      # [wake lock, job] of idle workers, the newest last
        self._since: dict[int, float] = {}   # id of a running worker's slot -> when its job began
        self._closed = False
        self._threads = [threading.Thread(target=self._work, daemon=True, name="%s-%d" % (name, i))
                         for i in range(threads)]
        for t in self._threads:
            t.start()

    def put(self, job: Any) -> None:
        with self._lock:
            self._backlog.append(job)
            self._dispatch()

    def check(self) -> bool:
        """Wake workers for a backlog the running ones are too slow to take; whether any
        request is still running or waiting."""
        with self._lock:
            self._dispatch()
            return bool(self._since or self._backlog)

    def close(self) -> None:
        """Each worker ends once the backlog is empty."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for slot in idle:
            slot[0].release()       # with no job: end

    def _dispatch(self) -> None:    # under the lock
        if not self._backlog or not self._idle:
            return
        now = time.monotonic()
        quick = sum(1 for t in self._since.values() if now - t < self.patience)
        while self._backlog and self._idle and quick < self.lively:
            slot = self._idle.pop()
            slot[1] = self._backlog.popleft()
            self._since[id(slot)] = now
            slot[0].release()
            quick += 1

    def _work(self) -> None:
        slot: list = [threading.Lock(), None]
        slot[0].acquire()
        while True:
            with self._lock:
                if self._backlog:
                    job = self._backlog.popleft()
                    self._since[id(slot)] = time.monotonic()
                else:
                    self._since.pop(id(slot), None)
                    if self._closed:
                        return
                    self._idle.append(slot)
                    job = slot      # none waiting: sleep until handed one (None: closing)
            if job is slot:
                slot[0].acquire()
                job, slot[1] = slot[1], None
                if job is None:
                    return
            try:
                self._run(job)
            except Exception:   # noqa: BLE001 - the pool keeps its worker
                log.exception("a worker's job failed")


LATER = "later"     # a gate's answer: it calls ``resume`` once it has decided


class _Request:
    """One request on its way through the bridge."""

    __slots__ = ("scope", "proto", "done", "size", "env", "body", "gated")

    def __init__(self, scope, proto, done, size: int | None):
        self.scope, self.proto, self.done, self.size = scope, proto, done, size
        self.env: dict | None = None      # built before the body is read when there is a gate
        self.body = b""
        self.gated = False                # the gate asked to see the body before the application


class Bridge:
    """RSGI in, WSGI out: read the whole body (deadline, cap), then hand the request to a
    worker thread, which runs the WSGI application and sends its response itself.

    A request's coroutine starts on the granian thread that has its headers (``_Scheduler``),
    not on the loop. A body of declared length is read in one piece; whoever comes first, the
    body (a ``_Direct`` callback on the thread that read it) or its deadline (``_tick`` on the
    loop), takes the request out of ``_pending`` and answers it: the worker's job, or 408. The
    loop's thread reads only streamed (chunked) bodies and keeps the deadlines.

    ``gate`` (optional) decides, before a body is read, how much of it to read and whether the
    request goes on: ``gate(environ, body, resume)`` is called with the request's environ
    (headers, no body yet) and ``body`` None as soon as the headers are in, on a granian
    thread: it must not block. It answers None (read the body within ``max_body_bytes``, then run
    the application), an int N (read at most N bytes, then call the gate again, on a worker
    thread, with the body: there it answers None to run the application) or ``LATER``: it
    calls ``resume(answer)`` once, from any thread, when it has decided. What it decided it
    leaves in the environ for the application (the portal: who sends the request, or why it is
    refused: ``portal/wsgi.py``)."""

    def __init__(self, app: Callable, options: ServerOptions, name: str,
                 gate: Callable[[dict, bytes | None, Callable], Any] | None = None):
        self.app = app
        self.gate = gate
        self.options = options
        self.base = {"wsgi.version": (1, 0), "wsgi.errors": sys.stderr, "wsgi.multithread": True,
                     "wsgi.multiprocess": False, "wsgi.run_once": False, "SCRIPT_NAME": ""}
        self._pool = _Pool(self._answer, options.threads, name)
        self.loop: asyncio.AbstractEventLoop | None = None     # the server's (``HttpServer.start``)
        self._ticking = False       # whether ``_tick`` is due (under ``_tick_lock``)
        self._tick_lock = threading.Lock()
        # bodies being read, oldest first: key -> (deadline, proto, body future, done); one
        # deadline for all, so the oldest expire first. The reader's thread and the loop's
        # take a request out under the lock: exactly one of them answers it.
        self._pending: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()
        self._pending_lock = threading.Lock()
        self.active: set[str] = set()   # "address:port" of the connections with a request in flight

    def close(self) -> None:
        self._pool.close()

    async def __call__(self, scope, proto) -> None:
        if scope.proto != "http":
            return
        declared = scope.headers.get("content-length")
        try:
            size = int(declared) if declared is not None else None
        except ValueError:
            proto.response_bytes(400, [("content-type", "text/plain"), ("connection", "close")],
                                 b"bad Content-Length\n")
            return
        request = _Request(scope, proto, _Answered(), size)
        client = scope.client
        self.active.add(client)
        try:
            if self.gate is None:
                self._receive(request, self.options.max_body_bytes)
            else:
                request.env = self._environ(scope)
                try:
                    answer = self.gate(request.env, None, lambda answer: self._resumed(request, answer))
                except Exception:   # noqa: BLE001 - the application still decides for itself
                    log.exception("the request gate failed")
                    answer = None
                self._decided(request, answer)
            await request.done   # the request holds its place in the server's limit until answered
        finally:
            self.active.discard(client)

    def _decided(self, request: _Request, answer) -> None:
        """What the gate said before the body was read."""
        if answer is LATER:
            return
        if answer is None:
            self._receive(request, self.options.max_body_bytes)
        else:
            request.gated = True
            self._receive(request, min(int(answer), self.options.max_body_bytes))

    def _resumed(self, request: _Request, answer) -> None:
        """The gate has decided (on any thread): before the body, read it; after it, to a
        worker."""
        if request.gated:
            request.gated = False
            self._put(request)
            return
        self._decided(request, answer)

    def _receive(self, request: _Request, cap: int) -> None:
        """Read the body within ``cap``, then hand the request to a worker."""
        size = request.size
        if size is not None and size > cap:
            # the application sees the declared length and refuses it unread
            self._put(request)
        elif size is not None:
            self._read_whole(request)
        else:
            # a stream (chunked): read by a task of its own on the loop, cancelled at the deadline
            try:
                self.loop.call_soon_threadsafe(self._stream, request, cap)
            except RuntimeError:   # the server's loop has closed
                request.done.set()

    def _stream(self, request: _Request, cap: int) -> None:
        self.loop.create_task(self._read_stream(request, cap))

    async def _read_stream(self, request: _Request, cap: int) -> None:
        loop = self.loop
        reading = loop.create_task(self._read(request.proto, cap))
        timer = loop.call_later(self.options.body_timeout, reading.cancel)
        try:
            request.body = await reading
        except asyncio.CancelledError:
            self._late(request.proto)
            request.done.set()
            return
        except Exception:   # the client went away mid-body
            request.done.set()
            return
        finally:
            timer.cancel()
        self._put(request)

    def _read_whole(self, request: _Request) -> None:
        """Ask for the body; whoever wins ``_pending`` answers."""
        key = id(request)
        fut = request.proto()
        done = request.done
        with self._pending_lock:
            self._pending[key] = (time.monotonic() + self.options.body_timeout, request.proto, fut, done)
        self._keep_time()

        def arrived(f) -> None:
            with self._pending_lock:
                if self._pending.pop(key, None) is None:
                    return      # the deadline came first and has answered
            try:
                request.body = f.result()
            except Exception:   # the client went away mid-body: nothing to answer
                done.set()
                return
            self._put(request)

        fut.add_done_callback(_Direct(arrived))

    def _put(self, request: _Request) -> None:
        """To a worker (any thread)."""
        self._pool.put(request)
        self._keep_time()

    def _keep_time(self) -> None:
        """(Any thread, after a request is pending or put) make sure ``_tick`` runs."""
        with self._tick_lock:
            if self._ticking:
                return
            self._ticking = True
        loop = self.loop
        try:
            loop.call_soon_threadsafe(loop.call_later, self._pool.patience, self._tick, loop)
        except RuntimeError:   # the server's loop has closed
            pass

    def _tick(self, loop) -> None:
        """While requests are in flight (every ``patience`` seconds): answer the bodies past
        their deadline with 408, and let the pool see whether its workers have grown slow."""
        now, late = time.monotonic(), []
        with self._pending_lock:
            pending = self._pending
            while pending:
                key, entry = next(iter(pending.items()))
                if entry[0] > now:
                    break
                late.append(pending.pop(key))
        for _, proto, fut, done in late:
            fut.cancel()
            self._late(proto)
            done.set()
        with self._tick_lock:   # a request pending or put after this finds it stopped
            busy = self._pool.check() or bool(self._pending)
            self._ticking = busy
        if busy:
            loop.call_later(self._pool.patience, self._tick, loop)

    @staticmethod
    def _late(proto) -> None:
        proto.response_bytes(408, [("content-type", "text/plain"), ("connection", "close")],
                             b"the request body did not arrive in time\n")

    @staticmethod
    async def _read(proto, cap: int) -> bytes:
        chunks, total = [], 0
        async for chunk in proto:
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:     # one byte past the cap is enough to say "too large"
                break
        return b"".join(chunks)

    def _environ(self, scope) -> dict:
        """The request's environ but for its body."""
        server_host, _, server_port = (scope.server or "").rpartition(":")
        client_host, _, client_port = (scope.client or "").rpartition(":")
        env = dict(self.base)
        env.update({
            "REQUEST_METHOD": scope.method,
            "PATH_INFO": unquote_to_bytes(scope.path).decode("latin-1"),
            "QUERY_STRING": scope.query_string,
            "SERVER_NAME": server_host.strip("[]") or "localhost",
            "SERVER_PORT": server_port or "0",
            "SERVER_PROTOCOL": "HTTP/" + scope.http_version,
            "REMOTE_ADDR": client_host.strip("[]"),
            "REMOTE_PORT": client_port,
            "wsgi.url_scheme": scope.scheme,
        })
        for key, value in scope.headers.items():
            name = key.upper().replace("-", "_")
            if name == "CONTENT_TYPE":
                env[name] = value
            elif name != "CONTENT_LENGTH":
                name = "HTTP_" + name
                env[name] = env[name] + "," + value if name in env else value
        return env

    def _answer(self, request: _Request) -> None:     # on a worker
        env = request.env if request.env is not None else self._environ(request.scope)
        body, declared = request.body, request.size
        env["wsgi.input"] = io.BytesIO(body)
        env["CONTENT_LENGTH"] = str(declared if declared is not None and declared > len(body)
                                    else len(body))
        if request.gated:   # the gate reads the body first
            try:
                answer = self.gate(env, body, lambda answer: self._resumed(request, answer))
            except Exception:   # noqa: BLE001 - the application answers what is left
                log.exception("the request gate failed")
                answer = None
            if answer is LATER:
                return
            request.gated = False
        try:
            request.proto.response_bytes(*self._run(env))
        except Exception:   # the client has gone: nothing to answer
            pass
        request.done.set()

    def _run(self, environ: dict) -> tuple[int, list[tuple[str, str]], bytes]:
        out: dict[str, Any] = {}

        def start_response(status: str, headers, exc_info=None):
            out["status"] = int(status.split(" ", 1)[0])
            out["headers"] = [(str(k), str(v)) for k, v in headers]

        try:
            result = self.app(environ, start_response)
            try:
                data = b"".join(result)
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()
            return out["status"], out["headers"], data
        except Exception:
            log.exception("the application failed on %s %s", environ.get("REQUEST_METHOD"),
                          environ.get("PATH_INFO"))
            return 500, [("content-type", "text/plain")], b"internal error\n"


class HttpServer:
    """One server on one address. The socket is bound at construction (``port`` is then the
    real port); ``start()`` serves on a background thread until ``stop()``."""

    def __init__(self, app: Callable, host: str = "127.0.0.1", port: int = 0,
                 options: ServerOptions | None = None, name: str = "cddlm-http",
                 gate: Callable | None = None):
        self.options = options or ServerOptions()
        _check_tls(self.options)
        self.name = name
        self.host = host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(self.options.backlog)
        except OSError:
            self._sock.close()
            raise
        self.port = self._sock.getsockname()[1]
        self.scheme = "https" if self.options.tls_cert else "http"
        self._bridge = Bridge(app, self.options, name, gate)
        self._warden: Warden | None = None
        if self.options.max_connections_per_address > 0:
            active = self._bridge.active
            self._warden = Warden(self._sock.dup(), self.options.max_connections_per_address,
                                  lambda a, p: "%s:%d" % (a, p) in active or "[%s]:%d" % (a, p) in active,
                                  name=name + "-connections")
        self._server = _Granian(
            self._sock, self._bridge, address=host, port=self.port,
            interface=Interfaces.RSGI, http=HTTPModes.http1, websockets=False,
            task_impl=TaskImpl.rust,    # a request's coroutine is stepped by granian, not made
                                        # an asyncio Task (raw lxml at one client: 2,440 ->
                                        # 2,950 req/s, waitress 3,180)
            backlog=self.options.backlog, backpressure=self.options.max_connections,
            http1_settings=HTTP1Settings(
                header_read_timeout=max(1, min(60_000, int(self.options.header_timeout * 1000)))),
            log_enabled=False,
            ssl_cert=_path(self.options.tls_cert), ssl_key=_path(self.options.tls_key),
            ssl_protocol_min=SSLProtocols(self.options.tls_min_version),
            ssl_ca=_path(self.options.tls_client_ca),
            ssl_client_verify=bool(self.options.tls_client_ca))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None
        self._started = threading.Event()

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::") else "127.0.0.1"
        return "%s://%s:%d" % (self.scheme, host if ":" not in host else "[%s]" % host, self.port)

    def start(self) -> threading.Thread:
        if self._warden is not None:
            self._warden.start()
        self._loop = self._bridge.loop = _Loop()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        _running.add(self)
        self._started.wait(10)
        if self._failed is not None:
            raise self._failed
        return self._thread

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.call_soon(self._started.set)
            self._loop.run_until_complete(self._server.serve())
        except BaseException as e:   # noqa: BLE001 - reported to start() and the log
            self._failed = e
            self._started.set()
            log.error("the HTTP server %s stopped: %s", self.name, e)
        finally:
            self._loop.close()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        if self._warden is not None:    # its copy of the listening socket would keep it open
            self._warden.stop()
            self._warden = None
        if self._thread is None:
            self._sock.close()
            self._bridge.close()
            return
        loop, thread = self._loop, self._thread
        self._thread = None
        if loop is not None and thread.is_alive():
            try:
                loop.call_soon_threadsafe(self._server.stop)
            except RuntimeError:   # the loop has already closed
                pass
        if thread is not threading.current_thread():
            thread.join(timeout)
            self._wait_released(timeout)
        self._bridge.close()
        _running.discard(self)

    def _wait_released(self, timeout: float) -> None:
        """granian's Rust side winds down after its loop has returned: wait until the port
        refuses connections, then a moment more, so that no Rust thread still serves while this
        process goes on to exit (it would call into a finalizing interpreter and panic)."""
        host = self.host if self.host not in ("0.0.0.0", "::") else "127.0.0.1"
        deadline = time.monotonic() + min(timeout, 2.0)
        while time.monotonic() < deadline:
            try:
                socket.create_connection((host, self.port), timeout=0.2).close()
            except OSError:
                break
            time.sleep(0.01)
        time.sleep(0.05)


_running: "set[HttpServer]" = set()


@atexit.register
def _stop_all() -> None:
    """Servers a program forgot to stop are stopped before the interpreter finalizes."""
    for server in list(_running):
        server.stop(timeout=2.0)


def serve(app: Callable, host: str = "127.0.0.1", port: int = 0,
          options: ServerOptions | None = None, name: str = "cddlm-http",
          gate: Callable | None = None) -> HttpServer:
    """Bind, start and return a server (stop it with ``.stop()``)."""
    server = HttpServer(app, host, port, options, name, gate)
    server.start()
    return server


__all__ = ["LATER", "HttpServer", "ServerOptions", "TlsConfigError", "raise_file_limit", "serve"]
