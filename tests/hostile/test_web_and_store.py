"""A web page must not drive a loopback portal; the store must not be trusted blindly (issue 16)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time

import pytest
import requests

from tests.conftest import ROOT, free_port
from tests.hostile.conftest import ENVELOPE, Portal

CREATE = (ENVELOPE % ("", "<api:createRequest><api:name>from-a-web-page</api:name></api:createRequest>")).encode()


def _apps(p: Portal) -> int:
    return len(p.prop(p.url, "api:applications").doc.xpath("//*[local-name()='Address']"))


def test_cross_site_requests_and_rebound_names_are_refused(live):
    before = _apps(live)
    simple = requests.post(live.url, data=CREATE, headers={"Content-Type": "text/plain"}, timeout=10)
    assert simple.status_code == 415 and b"text/xml" in simple.content
    formless = requests.post(live.url, data=CREATE, headers={"Content-Type": ""}, timeout=10)
    assert formless.status_code == 415
    evil_origin = {"Content-Type": "text/xml", "Origin": "http://evil.example"}
    assert requests.post(live.url, data=CREATE, headers=evil_origin, timeout=10).status_code == 403
    host = "%s:%d" % ("evil.example", live.port)             # DNS rebinding: the page's own name
    rebound = requests.post(live.url, data=CREATE, timeout=10,
                            headers={"Content-Type": "text/xml", "Host": host})
    assert rebound.status_code == 421
    for path in ("/api/v1/applications", "/"):
        assert requests.get(live.base + path, headers={"Host": host}, timeout=10).status_code == 421
        assert requests.get(live.base + path, headers={"Origin": "http://evil.example"},
                            timeout=10).status_code == 403
    assert _apps(live) == before                            # nothing was created
    # the portal's own names and its own origin are served
    own = {"Content-Type": "text/xml", "Host": "localhost:%d" % live.port,
           "Origin": "http://localhost:%d" % live.port}
    assert requests.post(live.url, data=CREATE, headers=own, timeout=10).status_code == 200
    assert _apps(live) == before + 1
    live.after()


def _serve(state, port) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", str(port),
                           "--state-dir", str(state)], cwd=ROOT, capture_output=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def test_a_damaged_store_is_refused_without_being_written(own_portal):
    p = own_portal(victim=False)
    p.deploy()
    p.stop()
    db = p.state / "portal.db"
    with open(db, "r+b") as f:                  # zero the second and third pages
        f.seek(4096)
        f.write(b"\0" * 8192)
    digest, mtime = hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns
    run = _serve(p.state, free_port())
    assert run.returncode == 1 and b"portal ready" not in run.stdout
    message = run.stderr.decode()
    assert str(db) in message and "damaged" in message and "backup" in message
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest and db.stat().st_mtime_ns == mtime


def test_a_state_directory_deleted_under_the_portal_stops_it_loudly(own_portal):
    p = own_portal()
    shutil.rmtree(p.state)
    deadline = time.monotonic() + 30        # (it stops within a second or two: bounds a failure)
    while p.proc.poll() is None:
        assert time.monotonic() < deadline, "the portal went on serving from a deleted store"
        time.sleep(0.1)
    assert p.proc.returncode == 1
    assert "was deleted or replaced under the running portal" in p.log_text()


def test_two_portals_on_one_state_directory(own_portal):
    p = own_portal()
    run = _serve(p.state, free_port())
    assert run.returncode == 1 and b"portal ready" not in run.stdout
    assert b"another portal (pid %d)" % p.proc.pid in run.stderr
    p.after()
    p.stop()
    again = Portal(p.tmp).start()            # the lock went with the first portal
    again.stop()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
