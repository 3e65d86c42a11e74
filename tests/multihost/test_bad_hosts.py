"""Host portals that answer garbage or hang: every call is bounded (--agent-timeout), the host is
marked unreachable after the lease with a reason saying what it answered, the application
placed on it fails naming the host, and an application on a good host is not held up."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from cddlm import ns
from cddlm.client import Portal
from tests.conftest import LivePortal
from tests.multihost.test_delegation import spread


class Bad(BaseHTTPRequestHandler):
    mode = "garbage"

    def _answer(self):
        if self.server.mode == "hang":
            self.server.release.wait(60)
            return
        body = b"\x00\x01 this is not XML <<<"
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture(params=["garbage", "hang"])
def bad_server(request):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Bad)
    server.mode = request.param
    server.release = threading.Event()
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield request.param, "http://127.0.0.1:%d/cddlm/portal" % server.server_address[1]
    server.release.set()
    server.shutdown()
    server.server_close()


def test_a_host_portal_answering_garbage_or_hanging_fails_only_its_application(tmp_path, bad_server):
    mode, url = bad_server
    dc = {"resources": ["slots"], "levels": ["host"], "location": [
        {"name": "good", "level": "host", "agent": "local", "capacity": {"slots": 100}},
        {"name": "bad", "level": "host", "agent": url, "capacity": {"slots": 100}}]}
    (tmp_path / "dc.json").write_text(json.dumps(dc))
    state = tmp_path / "front"
    state.mkdir()
    lease = 3.0
    front_lp = LivePortal(state, extra=["--datacenter", str(tmp_path / "dc.json"), "--agent-lease",
                                        str(lease), "--agent-timeout", "1", "--liveness-interval",
                                        "0.5"]).start()
    try:
        front = Portal(front_lp.url, failover=False)
        doomed = front.create(name="doomed")
        started = time.monotonic()
        doomed.initialize(ns.NATIVE, body=spread(1, pinned={"s0": "bad"}))
        doomed.run()
        fine = front.create(name="fine")
        fine.initialize(ns.NATIVE, body=spread(2, pinned={"s0": "good", "s1": "good"}))
        fine.run()
        assert fine.wait_for("running", timeout=30) == "running"
        assert time.monotonic() - started < lease + 5    # not held up by the bad host
        assert doomed.wait_for("failed", timeout=4 * lease) == "failed"
        assert time.monotonic() - started <= 2 * lease + 3
        info = doomed.ping()["terminationInfo"]
        assert "host bad" in info["reason"] and "unreachable" in info["reason"], info
        if mode == "garbage":
            assert "garbage" in info["reason"] or "SOAP" in info["reason"], info
        assert fine.state() == "running"
        for app in (doomed, fine):
            app.terminate()
        assert fine.wait_for("terminated", timeout=30) == "terminated"
        # the bad host never took the share: nothing to stop there, so terminate completes
        assert doomed.wait_for("terminated", timeout=30) == "terminated"
    finally:
        front_lp.stop()
