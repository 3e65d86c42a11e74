"""Reading a deployed application from the command line (issue 13): status with listening
ports, logs served by the portal (tail, stderr, -f), resolve, events, --json for scripts, and
host down, against a live portal."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request

import pytest

from tests.cli.helpers import cddlm, descriptor, pid_alive, popen, process


@pytest.fixture(scope="module")
def hello(shared_portal):
    cddlm("deploy", "examples/hello.xml", "--name", "tour", "--settle", "0", portal=shared_portal.url)
    yield shared_portal.url
    cddlm("terminate", "tour", portal=shared_portal.url, check=False)


def test_status_shows_each_components_listening_ports(hello):
    out = cddlm("status", "tour", portal=hello).stdout
    row = re.search(r"^web +process +running +localhost +(\d+) +(\d+)$", out, re.M)
    assert row, out
    port = row.group(2)
    assert cddlm("resolve", "tour", "web/port", portal=hello).stdout.strip() == port
    with urllib.request.urlopen("http://127.0.0.1:%s/" % port, timeout=10) as r:
        assert r.status == 200                   # the port status names is the server's
    assert re.search(r"^worker +process +running +localhost +\d+$", out, re.M)
    assert re.search(r"^#  STATE +TIME$", out, re.M) and re.search(r"^3  running +\S+Z$", out, re.M)


def test_json_for_scripts(hello):
    apps = json.loads(cddlm("ls", "--json", portal=hello).stdout)
    tour = next(a for a in apps if a["name"] == "tour")
    assert tour["state"] == "running" and tour["id"].startswith("urn:uuid:")
    status = json.loads(cddlm("status", "tour", "--json", portal=hello).stdout)
    assert status["id"] == tour["id"] and status["state"] == "running"
    web = next(c for c in status["components"] if c["path"] == "web")
    assert web["ports"] and web["pid"] > 0 and web["host"] == "localhost"
    assert [h["state"] for h in status["history"]] == ["instantiated", "initialized", "running"]
    events = json.loads(cddlm("events", "tour", "--json", portal=hello).stdout)
    assert [(e["sequence"], e["state"]) for e in events] == [
        (1, "instantiated"), (2, "initialized"), (3, "running")]
    assert events == status["history"]
    hosts = json.loads(cddlm("host", "ls", "--json", portal=hello).stdout)
    assert [h["name"] for h in hosts] == ["localhost"] and hosts[0]["down"] is False
    assert json.loads(cddlm("audit", "tour", "--json", portal=hello).stdout) is None  # no policies
    assert json.loads(cddlm("resolve", "tour", "web/argv", portal=hello).stdout)[:3] == [
        "python3", "-u", "-m"]


def test_events_lists_the_history(hello):
    out = cddlm("events", "tour", portal=hello).stdout.splitlines()
    assert out[0].split() == ["#", "STATE", "TIME"]
    assert [l.split()[:2] for l in out[1:]] == [["1", "instantiated"], ["2", "initialized"],
                                               ["3", "running"]]


def test_logs_tail_stderr_and_every_component(shared_portal, tmp_path):
    url = shared_portal.url
    chatty = descriptor(tmp_path / "chatty.xml",
                        process("a", ["sh", "-c", "for i in 1 2 3 4 5; do echo a$i; done; "
                                                  "echo oops >&2; sleep 300"]),
                        process("b", ["sh", "-c", "echo b1; sleep 300"]))
    cddlm("deploy", str(chatty), "--settle", "0.5", portal=url)
    try:
        assert cddlm("logs", "chatty", "a", portal=url).stdout == "a1\na2\na3\na4\na5\n"
        assert cddlm("logs", "chatty", "a", "-n", "2", portal=url).stdout == "a4\na5\n"
        assert cddlm("logs", "chatty", "a", "--stderr", portal=url).stdout == "oops\n"
        every = cddlm("logs", "chatty", portal=url).stdout.splitlines()
        assert every == ["a | a%d" % i for i in range(1, 6)] + ["b | b1"]
        r = cddlm("logs", "chatty", "nope", portal=url, check=False)
        assert r.returncode == 1 and "no component 'nope'" in r.stderr and "cddlm status" in r.stderr
    finally:
        cddlm("terminate", "chatty", portal=url)


def test_logs_follow_prints_new_lines_and_ends_with_the_application(shared_portal, tmp_path):
    url = shared_portal.url
    ticker = descriptor(tmp_path / "ticker.xml", process(
        "t", ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick$i; sleep 0.3; done"]))
    cddlm("deploy", str(ticker), "--settle", "0", portal=url)
    p = popen("logs", "ticker", "t", "-f", "-n", "1", portal=url)
    seen = [p.stdout.readline().strip() for _ in range(6)]
    numbers = [int(s[len("tick"):]) for s in seen]
    assert numbers == list(range(numbers[0], numbers[0] + 6)), seen   # in order, none lost
    cddlm("terminate", "ticker", "--no-wait", portal=url)
    # ends by itself; read on through p.stdout (communicate() would read the pipe past what
    # readline() already buffered, and lose those lines)
    guard = threading.Timer(30, p.kill)
    guard.start()
    try:
        rest = p.stdout.read()
        err = p.stderr.read()
        p.wait()
    finally:
        guard.cancel()
    assert p.returncode == 0 and err == ""
    last = [int(l[len("tick"):]) for l in rest.split()]
    assert last == list(range(numbers[-1] + 1, numbers[-1] + 1 + len(last)))


def test_host_down_stops_the_components_it_fails(live_portal):
    lp = live_portal(extra=["--datacenter", "examples/datacenter.yaml"])
    cddlm("deploy", "examples/hello.xml", "--name", "placed", "--settle", "0", portal=lp.url)
    status = json.loads(cddlm("status", "placed", "--json", portal=lp.url).stdout)
    pids = {c["path"]: (c["host"], c["pid"]) for c in status["components"]}
    host = pids["web"][0]
    assert all(pid_alive(pid) for _, pid in pids.values())
    r = cddlm("host", "down", host, "--reason", "maintenance", portal=lp.url)
    assert "their processes are being stopped" in r.stdout
    deadline = time.monotonic() + 20
    on_host = [pid for h, pid in pids.values() if h == host]
    while any(pid_alive(pid) for pid in on_host) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(pid) for pid in on_host)
    status = json.loads(cddlm("status", "placed", "--json", portal=lp.url).stdout)
    assert status["state"] == "failed" and "maintenance" in status["stateInfo"]
    hosts = {h["name"]: h for h in json.loads(cddlm("host", "ls", "--json", portal=lp.url).stdout)}
    assert hosts[host]["down"] is True and len(hosts) == 4
    cddlm("host", "up", host, portal=lp.url)
    cddlm("terminate", "placed", portal=lp.url)
    assert not any(pid_alive(pid) for _, pid in pids.values())


def test_terminate_waits_and_destroy_explains_the_wrong_state(shared_portal):
    url = shared_portal.url
    cddlm("deploy", "examples/hello.xml", "--name", "short", "--settle", "0", portal=url)
    r = cddlm("destroy", "short", portal=url, check=False)
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "short is running: only a terminated application is destroyed" in r.stderr
    assert "`cddlm destroy short --force`" in r.stderr
    r = cddlm("terminate", "short", "--reason", "done", portal=url)
    assert r.stdout.splitlines()[-1] == "short is terminated"
    assert "termination: normal: done" in cddlm("status", "short", portal=url).stdout
    assert cddlm("destroy", "short", portal=url).stdout == "short destroyed\n"
