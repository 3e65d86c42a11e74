"""Connection exhaustion on plain HTTP (issue 27, item 8): one client holding more idle sockets
than ``--max-connections`` made every other client wait for the header deadline (about 8 s).
The per-address cap closes that client's excess, and the others are answered at once."""

from __future__ import annotations

import socket
import time

from cddlm.httpserver import raise_file_limit
from tests.security import wire

ATTACKER = "127.3.0.1"


def idle_sockets(port: int, count: int, source: str) -> list[socket.socket]:
    socks = []
    for _ in range(count):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(10)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


def closed_by_the_server(socks: list[socket.socket]) -> int:
    gone = 0
    for s in socks:
        try:
            if s.recv(1, socket.MSG_DONTWAIT) == b"":
                gone += 1
        except BlockingIOError:
            pass
        except OSError:        # reset
            gone += 1
    return gone


def test_one_address_holding_idle_sockets_holds_up_no_one_else(own_portal):
    assert raise_file_limit() >= 9000, "the test needs about 4,200 descriptors on each side"
    portal = own_portal(["--max-connections", "4096"], victim=False)
    port = int(portal.base.rsplit(":", 1)[1])
    socks = idle_sockets(port, 4150, ATTACKER)
    try:
        started = time.monotonic()
        reply = wire.request(portal.url + "?wsdl", source="127.0.0.1", timeout=15)
        waited = time.monotonic() - started
        assert reply.status == 200 and b"definitions" in reply.body
        assert waited < 1.0, "another client waited %.2f s" % waited
        # the attacker's excess over the cap (256 by default) was closed, and the log says so
        deadline = time.monotonic() + 5
        while closed_by_the_server(socks) < 4150 - 256 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert closed_by_the_server(socks) >= 4150 - 256
        assert "127.3.0.1 holds" in (portal.state / "portal.log").read_text()
    finally:
        for s in socks:
            s.close()
    assert wire.request(portal.url + "?wsdl", source=ATTACKER).status == 200   # not banned
