"""A component on a host portal is as visible through the front portal as a local one: its
logs (tail, offsets, follow), its runtime values (pid, port) equal to the host portal's own
answer and to the process in that host's network namespace, the PID and PORTS of ``cddlm
status``, the hosts as the host monitor sees them, the page in a browser; and a host portal
that stops answering gives one short line naming the host, never a 500."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import time

import pytest
import requests

from cddlm import ns
from cddlm.client import Portal, PortalFault
from tests.conftest import ROOT
from tests.multihost.cluster import MultiHost
from tests.multihost.test_delegation import host_portal_client
from tests.netns import wait_until

APP = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="web" type="process">
    <attribute name="argv"><item>python3</item><item>-u</item><item>-m</item><item>http.server</item><item>0</item></attribute>
    <attribute name="readiness"><item name="log">Serving HTTP</item></attribute>
    <attribute name="demand"><item name="slots">1</item></attribute>
    <attribute name="host">h1</attribute>
  </component>
  <component name="talker" type="process">
    <attribute name="argv"><item>sh</item><item>-c</item><item>for i in $(seq 1 60); do echo "line $i"; done; echo oops >&amp;2; i=0; while [ $i -lt 3000 ]; do i=$((i+1)); echo "tick $i"; sleep 0.2; done; exec sleep 600</item></attribute>
    <attribute name="host">h2</attribute>
  </component>
  <component name="worker" type="process">
    <attribute name="argv"><item>sleep</item><item>600</item></attribute>
    <attribute name="host">h3</attribute>
  </component>
</application>"""


def cli(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cddlm.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout,
                          env=dict(os.environ, CDDLM_PORTAL=url, XDG_CONFIG_HOME="/nonexistent"))


def readline_within(proc: subprocess.Popen, seconds: float, stream: str = "stdout") -> str:
    """The next line ``proc`` prints (on ``stream``), waiting at most ``seconds`` for it."""
    out = getattr(proc, stream)
    ready, _, _ = select.select([out], [], [], seconds)
    assert ready, "nothing printed on %s within %g s" % (stream, seconds)
    return out.readline().strip()


def follow_logs(cluster, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cddlm.cli", "logs", "-f", "seen", "talker", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, CDDLM_PORTAL=cluster.front.url,
                                     XDG_CONFIG_HOME="/nonexistent"))


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with MultiHost(tmp_path_factory.mktemp("visible")) as mh:
        front = Portal(mh.front.url, failover=False)
        app = front.create(name="seen")
        app.initialize(ns.NATIVE, text=APP)
        app.run()
        assert app.wait_for("running", timeout=90) == "running", app.ping()
        mh.app = app
        yield mh


def base(cluster) -> str:
    return cluster.front.url.rsplit("/cddlm/", 1)[0]


def host(cluster, name: str):
    return {h.name: h for h in cluster.hosts}[name]


def sub_application(cluster, name: str):
    (sub,) = host_portal_client(host(cluster, name)).applications()
    return sub


def test_logs_are_read_by_the_host_portal_that_runs_the_component(cluster):
    app = cluster.app
    assert wait_until(lambda: "tick 5" in app.logs("talker", lines=100)["lines"], 30)
    sub = sub_application(cluster, "h2")
    # from an offset: the same lines and the same next offset as the host portal's own answer
    front, there = app.logs("talker", offset=0), sub.logs("talker", offset=0)
    assert front["lines"][:60] == ["line %d" % i for i in range(1, 61)]
    assert front["lines"][:60] == there["lines"][:60] and front["available"] and front["host"] == "h2"
    after = app.logs("talker", offset=front["offset"])
    assert after["offset"] >= front["offset"]
    assert not after["lines"] or after["lines"][0].startswith("tick ")       # only what came next
    assert all(not line.startswith("line ") for line in after["lines"])
    # the tail, and stderr
    tail = app.logs("talker", lines=5)
    assert len(tail["lines"]) == 5 and all(line.startswith("tick ") for line in tail["lines"])
    assert app.logs("talker", "stderr")["lines"] == ["oops"]
    # the command line, its follow mode, the page and the JSON API
    done = cli(cluster.front.url, "logs", "seen", "talker", "-n", "3")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 3 and done.stdout.startswith("tick ")
    follow = follow_logs(cluster, "-n", "1")
    try:
        seen = [readline_within(follow, 30) for _ in range(4)]     # the tail, then new lines
        numbers = [int(line.split()[1]) for line in seen]
        assert all(line.startswith("tick ") for line in seen), seen
        assert numbers == sorted(numbers) and numbers[-1] - numbers[0] == 3, seen   # none lost
    finally:
        stop(follow)
    r = requests.get(base(cluster) + "/api/v1/applications/%s/logs" % app.id,
                     params={"path": "talker"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["available"] and r.json()["stdout"][-1].startswith("tick ")
    assert r.json()["stderr"] == ["oops"]
    for query in ({}, {"component": "talker"}):
        page = requests.get(base(cluster) + "/applications/" + app.id, params=query, timeout=30)
        assert page.status_code == 200, page.text[-500:]
    assert "tick " in page.text and "oops" in page.text


def test_pid_and_port_resolve_to_the_host_portals_values(cluster):
    app, h1 = cluster.app, host(cluster, "h1")
    sub = sub_application(cluster, "h1")
    pid = app.resolve("web/pid")
    assert int(pid) == int(sub.resolve("web/pid"))
    assert h1.runs_here(int(pid))           # /proc/PID/ns/net is h1's namespace
    for other in cluster.hosts:
        if other is not h1 and other.netns is not None:
            assert not other.runs_here(int(pid))
    port = app.resolve("web/port")
    assert int(port) == int(sub.resolve("web/port")) and int(port) > 0
    # it is the port the process listens on, there
    r = requests.get("http://%s:%s/" % (h1.address, port), timeout=10)
    assert r.status_code == 200
    # a whole component, and a value that is not there
    whole = app.resolve("web")
    assert int(whole["pid"]) == int(pid) and whole["host"]
    with pytest.raises(PortalFault) as e:
        app.resolve("web/no-such-value")
    assert e.value.fault == "ResolutionFault"
    # the tour's `kill $(cddlm resolve APP worker/pid)` works on a cluster
    done = cli(cluster.front.url, "resolve", "seen", "worker/pid")
    assert done.returncode == 0, done.stderr
    assert host(cluster, "h3").runs_here(int(done.stdout.strip()))


def test_status_shows_the_pid_and_ports_of_remote_components(cluster):
    app = cluster.app
    comps = {c["path"]: c for c in app.components()}
    sub = {c["path"]: c for c in sub_application(cluster, "h1").components()}
    assert comps["web"]["pid"] == sub["web"]["pid"] and comps["web"]["ports"] == sub["web"]["ports"]
    assert comps["web"]["host"] == "h1" and comps["web"]["ports"]
    assert comps["worker"]["pid"] and host(cluster, "h3").runs_here(comps["worker"]["pid"])
    done = cli(cluster.front.url, "status", "seen")
    assert done.returncode == 0, done.stderr
    row = [line for line in done.stdout.splitlines() if line.startswith("web ")][0].split()
    assert row[:3] == ["web", "process", "running"] and row[3] == "h1"
    assert row[4] == str(sub["web"]["pid"]) and row[5] == ",".join(map(str, sub["web"]["ports"]))
    # deploymentInfo: each running component's pid and ports on its host
    (info,) = app.property("deploymentInfo")
    placed = {c.get("path"): c for c in info.iterfind("{%s}placement/{%s}component" % (ns.API, ns.API))}
    assert placed["web"].get("host") == "h1" and placed["web"].get("pid") == str(sub["web"]["pid"])
    assert placed["web"].get("ports") == " ".join(map(str, sub["web"]["ports"]))
    assert placed["worker"].get("pid") == str(comps["worker"]["pid"])
    comps_json = requests.get(base(cluster) + "/api/v1/applications/%s/components" % app.id,
                              timeout=30).json()["components"]
    assert {c["path"]: c["pid"] for c in comps_json}["talker"] == \
        {c["path"]: c["pid"] for c in sub_application(cluster, "h2").components()}["talker"]


def test_hosts_are_shown_as_the_host_monitor_sees_them(cluster):
    hosts = requests.get(base(cluster) + "/api/v1/hosts", timeout=30).json()["hosts"]
    for h in hosts:
        assert h["reachable"] is True and h["down"] is False, h
        assert h["lastOk"] and h["lease"] == cluster.lease and not h["unreachable"]
    page = requests.get(base(cluster) + "/hosts", timeout=30).text
    for name in ("h1", "h2", "h3"):
        row = re.search(r'<tr data-host="%s" class="(\w+)"' % name, page)
        assert row and row.group(1) == "up", page
    dc = requests.get(base(cluster) + "/datacenter", timeout=30).text
    assert "UNREACHABLE" not in dc
    listed = cli(cluster.front.url, "host", "ls")
    assert listed.returncode == 0 and listed.stdout.count(" up ") == 3, listed.stdout
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    # what is placed there, remote as local: one component each, web holding one slot of h1
    assert [rows[h][3] for h in ("h1", "h2", "h3")] == ["1", "1", "1"], listed.stdout
    assert rows["h1"][4:] == ["slots", "%g" % (cluster.slots - 1)], listed.stdout
    assert rows["h2"][4:] == ["slots", "%g" % cluster.slots], listed.stdout


def test_the_page_in_a_browser_shows_remote_logs_and_reachable_hosts(cluster, browser, tmp_path):
    page = browser.new_page()
    try:
        page.goto(base(cluster) + "/applications/%s?component=talker" % cluster.app.id)
        logs = page.locator("#logs pre.log").first
        assert "tick " in logs.inner_text()
        assert "on h2" in page.locator("#logs-h").inner_text()
        shot = tmp_path / "remote-logs.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 0
        page.goto(base(cluster) + "/hosts")
        for name in ("h1", "h2", "h3"):
            row = page.locator('tr[data-host="%s"]' % name)
            assert "up" in row.inner_text() and "unreachable" not in row.inner_text()
        page.screenshot(path=str(tmp_path / "hosts.png"), full_page=True)
        if os.environ.get("CDDLM_KEEP_SCREENSHOTS"):
            for name in ("remote-logs.png", "hosts.png"):
                os.replace(tmp_path / name, os.path.join(os.environ["CDDLM_KEEP_SCREENSHOTS"], name))
    finally:
        page.close()


def test_a_host_portal_that_stops_answering_is_named_in_one_short_line(cluster):
    app, h2 = cluster.app, host(cluster, "h2")
    h2.kill()
    killed = time.time()
    # logs: a clear fault naming the host, the page and the JSON API answer with the reason
    with pytest.raises(PortalFault) as e:
        app.logs("talker")
    assert e.value.fault == "ResourceUnavailableFault" and "host h2 unreachable" in e.value.message
    assert len(e.value.message) < 100, e.value.message
    page = requests.get(base(cluster) + "/applications/" + app.id, params={"component": "talker"},
                        timeout=30)
    assert page.status_code == 200 and "host h2 unreachable" in page.text
    r = requests.get(base(cluster) + "/api/v1/applications/%s/logs" % app.id,
                     params={"path": "talker"}, timeout=30)
    assert r.status_code == 200 and r.json()["available"] is False
    assert r.json()["reason"].startswith("host h2 unreachable")
    done = cli(cluster.front.url, "logs", "seen", "talker")
    assert done.returncode != 0 and "host h2 unreachable" in done.stderr and "Traceback" not in done.stderr
    # the host monitor marks it down within two leases; the reason says since when, once
    assert wait_until(lambda: app.state() == "failed", 2 * cluster.lease + 10), app.ping()
    marked = time.time() - killed
    (h,) = [x for x in requests.get(base(cluster) + "/api/v1/hosts", timeout=30).json()["hosts"]
            if x["name"] == "h2"]
    assert h["down"] and h["reachable"] is False
    assert re.fullmatch(r"unreachable since \d\d:\d\d:\d\d UTC: [a-z ]+", h["reason"]), h["reason"]
    since = time.strptime(h["reason"].split()[2], "%H:%M:%S")
    gap = (since.tm_hour * 3600 + since.tm_min * 60 + since.tm_sec - killed) % 86400
    assert gap < cluster.lease / 4 + 2 or gap > 86400 - 2, (h["reason"], killed)
    assert marked < 2 * cluster.lease + 5
    status = cli(cluster.front.url, "status", "seen")
    assert status.returncode == 0, status.stderr
    (row,) = [line for line in status.stdout.splitlines() if line.startswith("talker ")]
    assert row.count("unreachable") == 1 and "HTTPConnectionPool" not in row
    assert max(len(line) for line in status.stdout.splitlines()) < 240, status.stdout
    print(status.stdout)


def test_a_follow_outlives_its_host(cluster):
    """``logs -f`` goes on through a host portal's absence: said once on stderr, and the log
    goes on from where it was when the host portal is back (its components ran on)."""
    app, h2 = cluster.app, host(cluster, "h2")
    if h2.proc is None or h2.proc.poll() is not None:      # the test before left it dead
        h2.start()
    assert wait_until(lambda: _readable(app), 60)
    follow = follow_logs(cluster, "-n", "1")
    try:
        before = int(readline_within(follow, 30).split()[1])
        h2.kill()
        said = readline_within(follow, 30, "stderr")
        assert said.startswith("cddlm: talker: host h2 unreachable") and "still following" in said, said
        assert follow.poll() is None
        h2.start()
        assert readline_within(follow, 60, "stderr") == "cddlm: talker: its host answers again"
        ticks = [int(readline_within(follow, 30).split()[1]) for _ in range(3)]
        assert ticks == sorted(ticks) and ticks[0] > before and ticks[-1] - ticks[0] == 2, (before, ticks)
        assert follow.poll() is None
    finally:
        stop(follow)


def _readable(app) -> bool:
    try:
        return bool(app.logs("talker", lines=1)["lines"])
    except PortalFault:
        return False
