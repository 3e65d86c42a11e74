"""The SSH runner's transport: one connection per host, many channels, every call bounded.

A host whose agent is ``ssh://USER@ADDRESS[:PORT]`` is reached through one ``asyncssh``
connection, opened on first use and again after it drops; every command is a channel of that
connection (at most ``Settings.ssh_channels`` at once: sshd's ``MaxSessions`` is 10 by default),
so a command costs a few milliseconds, not a handshake. Keepalives (``ssh_keepalive`` seconds,
three missed) notice a silent host; every call has a deadline (``ssh_timeout``) whatever the
network does. The connections run on one event loop thread for all hosts; callers are the
portal's ordinary threads and wait for their call only.

Host keys are verified against the ``known_hosts`` file of ``--agent-credentials`` (or the
portal's account's ``~/.ssh/known_hosts``): an unknown or changed key refuses the host
(``HostRefused``, naming the key file), it is never learnt. Only the ``ssh_key`` given is
offered (no ssh-agent, no ``~/.ssh/config``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Awaitable, Callable
from urllib.parse import unquote, urlsplit

from cddlm.errors import ConfigurationError, CddlmError

DEFAULT_PORT = 22
HTTP_HEAD_BYTES = 4096      # of an HTTP answer, only the status line is read


class Unreachable(CddlmError):
    """The host did not answer in time, refused the connection or dropped it."""


class HostRefused(Unreachable):
    """The host's key is unknown or changed, or the key was refused: it is not trusted."""


@dataclass(frozen=True)
class Endpoint:
    user: str
    address: str
    port: int = DEFAULT_PORT

    def __str__(self) -> str:
        return "ssh://%s@%s:%d" % (self.user, self.address, self.port)


def parse_agent(agent: str) -> Endpoint:
    """``ssh://USER@ADDRESS[:PORT]`` (``ConfigurationError`` for anything else)."""
    try:
        parts = urlsplit(agent)
        port = parts.port
    except ValueError as e:
        raise ConfigurationError("agent %r: %s" % (agent, e)) from None
    if parts.scheme != "ssh" or not parts.hostname or not parts.username or parts.password \
            or parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigurationError("agent %r: an SSH host is ssh://USER@ADDRESS[:PORT]" % agent)
    return Endpoint(unquote(parts.username), parts.hostname, port or DEFAULT_PORT)


@dataclass
class Result:
    status: int | None          # the command's exit status (None: killed by a signal)
    stdout: bytes
    stderr: bytes


class Loop:
    """The event loop every SSH connection of a portal runs on (one daemon thread)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="cddlm-ssh", daemon=True)
        self.thread.start()

    def call(self, coro: Awaitable, timeout: float) -> Any:
        """Run ``coro`` on the loop; ``Unreachable`` after ``timeout`` seconds (it is cancelled)."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise Unreachable("no answer within %.1f s" % timeout) from None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Link:
    """One SSH host: its connection (made on demand) and the calls over it."""

    def __init__(self, endpoint: Endpoint, loop: Loop, *, key: str | None, known_hosts: str | None,
                 timeout: float, keepalive: float, channels: int):
        self.endpoint = endpoint
        self.loop = loop
        self.key = key
        self.known_hosts = known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        self.timeout = timeout
        self.keepalive = keepalive
        self._conn: Any = None
        self._connecting: asyncio.Lock | None = None
        self._channels: asyncio.Semaphore | None = None
        self._channel_count = max(1, channels)
        self.connects = 0           # connections made (tests count them)
        self.commands = 0           # commands run
        self.silent_since: float | None = None     # since when calls fail (None: they work)

    # -- the connection (on the loop) -----------------------------------------------------------
    async def _connection(self) -> Any:
        import asyncssh
        if self._connecting is None:
            self._connecting = asyncio.Lock()
            self._channels = asyncio.Semaphore(self._channel_count)
        async with self._connecting:
            conn = self._conn
            if conn is not None and not conn.is_closed():
                return conn
            self._conn = None
            if self.key is not None and not os.access(self.key, os.R_OK):
                raise HostRefused("the ssh_key %s cannot be read" % self.key)
            try:
                conn = await asyncssh.connect(
                    self.endpoint.address, port=self.endpoint.port, username=self.endpoint.user,
                    client_keys=[self.key] if self.key else None, known_hosts=self.known_hosts,
                    agent_path=None, config=[], password=None, kbdint_auth=False,
                    connect_timeout=self.timeout, login_timeout=self.timeout,
                    keepalive_interval=self.keepalive, keepalive_count_max=3)
            except asyncssh.HostKeyNotVerifiable as e:
                raise HostRefused(self._key_problem(e)) from None
            except asyncssh.PermissionDenied as e:
                raise HostRefused("%s refused the key %s: %s" % (self.endpoint, self.key, e)) from None
            except (OSError, asyncssh.Error, asyncio.TimeoutError) as e:
                raise Unreachable("%s: %s" % (self.endpoint, _words(e))) from None
            self._conn = conn
            self.connects += 1
            return conn

    def _key_problem(self, e: Exception) -> str:
        """Whether the key is unknown or changed, and where the portal looked."""
        import asyncssh
        known = False
        try:
            keys = asyncssh.read_known_hosts(self.known_hosts)
            found = keys.match(self.endpoint.address, self.endpoint.address, self.endpoint.port)
            known = any(found[:3])
        except (OSError, ValueError, asyncssh.Error):
            pass
        return ("%s: the host's key %s (%s): the host is refused; put its key in that file "
                "(ssh-keyscan -p %d %s, checked by hand)" % (
                    self.endpoint, "changed: it is not the one in" if known else "is not in",
                    self.known_hosts, self.endpoint.port, self.endpoint.address))

    async def _run(self, command: str, stdin: bytes | None) -> Result:
        import asyncssh
        conn = await self._connection()
        assert self._channels is not None
        async with self._channels:
            try:
                done = await conn.run(command, input=stdin, check=False, encoding=None)
            except (OSError, asyncssh.Error) as e:
                raise Unreachable("%s: %s" % (self.endpoint, _words(e))) from None
        return Result(done.exit_status if done.exit_signal is None else None,
                      done.stdout or b"", done.stderr or b"")

    async def _tcp(self, host: str, port: int, request: bytes | None) -> bytes:
        """Connect from the host to ``host:port`` (a direct-tcpip channel); send ``request``
        and read the start of the answer. ``OSError`` when the connection is refused there."""
        import asyncssh
        conn = await self._connection()
        assert self._channels is not None
        async with self._channels:
            try:
                reader, writer = await conn.open_connection(host, port)
            except asyncssh.ChannelOpenError as e:
                raise OSError(e.reason) from None
            try:
                if request is None:
                    return b""
                writer.write(request)
                return await reader.read(HTTP_HEAD_BYTES)
            finally:
                writer.close()

    # -- the calls (any thread) -----------------------------------------------------------------
    def run(self, script: str, timeout: float | None = None) -> Result:
        """Run a POSIX ``sh`` script on the host (sent on its standard input, so it may be
        long); ``Unreachable`` when the host does not answer within the deadline."""
        self.commands += 1
        return self._call(lambda: self._run("sh -s", script.encode("utf-8")), timeout)

    def tcp(self, host: str, port: int, request: bytes | None = None,
            timeout: float | None = None) -> bytes:
        """Whether the host can connect to ``host:port`` (``OSError`` if not), and the start
        of the answer to ``request`` if one is given."""
        return self._call(lambda: self._tcp(host, port, request), timeout)

    def probe(self) -> None:
        """The host answers a command now (for the host monitor)."""
        got = self.run(":")
        if got.status != 0:
            raise Unreachable("%s: a command failed: %s" % (self.endpoint, got.stderr[-200:]))

    def silent(self) -> bool:
        """Whether the last call failed (the host monitor's probe finds out when it answers)."""
        return self.silent_since is not None

    def _call(self, make: Callable[[], Awaitable], timeout: float | None) -> Any:
        try:
            out = self.loop.call(make(), timeout or self.timeout)
        except Unreachable as e:
            self.silent_since = self.silent_since or time.monotonic()
            if not isinstance(e, HostRefused) and "no answer within" in str(e):
                self.drop()     # a half-dead connection is made anew at the next call
                raise Unreachable("%s: %s" % (self.endpoint, e)) from None
            raise
        self.silent_since = None
        return out

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.loop.loop.call_soon_threadsafe(conn.close)


def _words(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return text if len(text) < 300 else text[:300] + "..."
