"""The per-address connection cap of a listening socket (``--max-connections-per-address``).

The HTTP server (granian) takes a connection only while fewer than ``--max-connections`` are
open, and a connection that never sends a request holds its place until the header deadline:
one client holding more idle sockets than that makes every other client wait in the listen
backlog. granian offers no hook per connection, and a connection that never sends a request
never reaches Python; but its socket is a descriptor of this process. So a ``Warden`` thread
asks the kernel, a few times a second, for this port's connections (``sock_diag``, the netlink
interface ``ss`` uses, filtered to the port by the kernel: a handful of bytes when nothing is
wrong), counts them by client address, and closes (``shutdown``) the excess of an address over
the cap: first those without a request in flight, the newest descriptors first. The server sees
the client go away and takes the next connection in the backlog.

When: every ``interval`` (2 s), and at once (within 0.1 s) when connections wait in the listen
backlog (the server is full: ``TCP_INFO`` of the listening socket, a microsecond). The kernel's
dump walks its whole table of connections (about a millisecond on a 24 GiB machine, however few
are this port's), so it is not made more often than that.

An IPv4-mapped IPv6 client counts as its IPv4 address. Without the kernel's netlink interface
(a kernel built without it) the cap is not enforced and the portal says so once.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import os
import socket
import struct
import threading
from typing import Callable

log = logging.getLogger(__name__)

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_REQ_BYTECODE = 1
BC_S_GE, BC_S_LE = 2, 3
ESTABLISHED, CLOSE_WAIT = 1, 8
_HEADER = struct.Struct("=IHHII")                  # nlmsghdr
_REQUEST = struct.Struct("=BBBxI")                 # inet_diag_req_v2 before its sockid
_SOCKID = struct.Struct(">HH16s16sI8s")            # sport, dport, src, dst, interface, cookie
_MESSAGE = struct.Struct("=BBBB")                  # inet_diag_msg before its sockid
_TAIL = struct.Struct("=IIIII")                    # expires, rqueue, wqueue, uid, inode


def _dump_request(family: int, port: int) -> bytes:
    """A dump of this family's TCP connections whose local port is ``port`` (the kernel's
    filter: sport >= port, then sport <= port; a failed test jumps past the end: refused)."""
    code = struct.pack("=BBH", BC_S_GE, 8, 20) + struct.pack("=BBH", 0, 0, port) + \
        struct.pack("=BBH", BC_S_LE, 8, 12) + struct.pack("=BBH", 0, 0, port)
    attribute = struct.pack("=HH", 4 + len(code), INET_DIAG_REQ_BYTECODE) + code
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, (1 << ESTABLISHED) | (1 << CLOSE_WAIT)) + \
        _SOCKID.pack(0, 0, b"", b"", 0, b"") + attribute
    return _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, 1, 0) + body


def _address(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    ip = ipaddress.IPv6Address(raw)
    return str(ip.ipv4_mapped or ip)


def connections(family: int, port: int) -> list[tuple[str, int, int]]:
    """(client address, client port, socket inode) of each connection open to ``port`` that
    has been accepted (a connection still in the backlog has no inode)."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                       NETLINK_SOCK_DIAG) as nl:
        nl.sendall(_dump_request(family, port))
        found = []
        while True:
            data = nl.recv(1 << 17)
            at = 0
            while at + _HEADER.size <= len(data):
                length, kind = _HEADER.unpack_from(data, at)[:2]
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR:
                    raise OSError(-struct.unpack_from("=i", data, at + _HEADER.size)[0], "sock_diag")
                body = at + _HEADER.size
                fam = _MESSAGE.unpack_from(data, body)[0]
                sockid = _SOCKID.unpack_from(data, body + _MESSAGE.size)
                inode = _TAIL.unpack_from(data, body + _MESSAGE.size + _SOCKID.size)[4]
                if inode:
                    found.append((_address(fam, sockid[3]), sockid[1], inode))
                at += (length + 3) & ~3
            if not data:
                return found


def _close_sockets(inodes: set[int]) -> int:
    """Shut down this process's sockets with these inodes (the server then closes them)."""
    closed = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if not target.startswith("socket:[") or int(target[8:-1]) not in inodes:
            continue
        try:
            fd = os.dup(int(name))
        except OSError:
            continue
        try:
            if os.fstat(fd).st_ino not in inodes:   # the number was reused meanwhile
                os.close(fd)
                continue
            sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            continue
        try:
            sock.shutdown(socket.SHUT_RDWR)
            closed += 1
        except OSError:
            pass
        finally:
            sock.close()
    return closed


class Warden:
    """Keeps each client address within ``cap`` connections to ``port`` (see the module
    docstring); ``busy(address, port)`` says whether a connection has a request in flight."""

    def __init__(self, listener: socket.socket, cap: int, busy: Callable[[str, int], bool],
                 interval: float = 2.0, name: str = "cddlm-connections"):
        self.listener = listener     # a duplicate of the listening socket, closed by ``stop``
        self.family, self.port = listener.family, listener.getsockname()[1]
        self.cap, self.busy = cap, busy
        self.interval = interval
        self.closed = 0       # connections closed so far
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def start(self) -> "Warden":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        self.listener.close()

    def waiting(self) -> int:
        """Connections in the listen backlog (for a listening socket, Linux reports its queue
        as ``tcpi_unacked``)."""
        info = self.listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 32)
        return struct.unpack_from("=I", info, 24)[0]

    def _run(self) -> None:
        due, tick = 0.0, 0.1
        while not self._stop.wait(tick):
            due -= tick
            try:
                if due > 0 and not self.waiting():
                    continue
                due = self.interval
                self.check()
            except OSError as e:
                log.warning("the per-address connection cap (%d) cannot be enforced: the kernel's "
                            "socket diagnostics answer %s", self.cap, e)
                return

    def check(self) -> int:
        """Close the excess of every address over the cap; how many were closed."""
        found = connections(self.family, self.port)
        if len(found) <= self.cap:
            return 0
        by_address: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        for address, port, inode in found:
            by_address[address].append((port, inode))
        excess: set[int] = set()
        for address, held in by_address.items():
            if len(held) > self.cap:
                # idle ones first; among them the newest inodes (made last) first
                held.sort(key=lambda c: (self.busy(address, c[0]), -c[1]))
                excess.update(inode for _, inode in held[:len(held) - self.cap])
                log.warning("%s holds %d connections (at most %d per address): closing %d",
                            address, len(held), self.cap, len(held) - self.cap)
        closed = _close_sockets(excess) if excess else 0
        self.closed += closed
        return closed
