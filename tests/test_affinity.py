"""``cddlm portal serve --cpu``: the portal's own threads on the CPUs given, the processes it
starts (components, the XPath helper) on every CPU the machine gave it."""

from __future__ import annotations

import os
import time

import pytest
import requests

from cddlm import affinity
from cddlm.client import Portal
from tests.test_scale import NATIVE, _components_running, _many


def _allowed(pid: int, tid: int | None = None) -> set[int]:
    path = "/proc/%d/task/%d/status" % (pid, tid) if tid else "/proc/%d/status" % pid
    for line in open(path):
        if line.startswith("Cpus_allowed_list:"):
            return affinity.parse(line.split(":", 1)[1])
    raise AssertionError("no Cpus_allowed_list in %s" % path)


def test_cpu_lists_parse_as_taskset_writes_them():
    assert affinity.parse("0") == {0}
    assert affinity.parse("0,2") == {0, 2}
    assert affinity.parse("0-3,6") == {0, 1, 2, 3, 6}
    for bad in ("", "a", "1-", "-1", "0;1"):
        with pytest.raises(ValueError):
            affinity.parse(bad)


def test_the_portal_runs_on_the_cpu_given_and_its_components_on_all(live_portal, tmp_path):
    every = affinity.available()
    if len(every) < 2:
        pytest.skip("one CPU only: nothing to pin apart")
    cpu = min(every)
    state = tmp_path / "state"
    state.mkdir()
    lp = live_portal(state_dir=state, extra=["--cpu", str(cpu)])
    portal = Portal(lp.url, timeout=60)
    app = portal.create("pinned")
    app.initialize(NATIVE, body=_many(3, ["sleep", "300"]))
    app.run()
    deadline = time.monotonic() + 30
    while app.state() != "running":
        assert time.monotonic() < deadline, app.state()
        time.sleep(0.2)
    threads = [int(t) for t in os.listdir("/proc/%d/task" % lp.proc.pid)]
    assert len(threads) > 5
    assert {tid: _allowed(lp.proc.pid, tid) for tid in threads} == {tid: {cpu} for tid in threads}
    running = _components_running(state)
    assert len(running) == 3
    for pid in running:
        assert _allowed(pid) == every, pid
    # the XPath helper, started on the first query, is not held to the portal's CPU either
    query = ('<soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/" '
             'xmlns:wsrf-rp="http://docs.oasis-open.org/wsrf/rp-2"><soapenv:Body>'
             '<wsrf-rp:QueryResourceProperties><wsrf-rp:QueryExpression Dialect="http://www.w3.org'
             '/TR/1999/REC-xpath-19991116">count(//*)</wsrf-rp:QueryExpression>'
             '</wsrf-rp:QueryResourceProperties></soapenv:Body></soapenv:Envelope>')
    answer = requests.post(lp.url, data=query.encode(), timeout=30,
                           headers={"Content-Type": "text/xml; charset=utf-8"})
    assert answer.status_code == 200 and b"Fault" not in answer.content, answer.content[:500]
    helpers = [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == lp.proc.pid
               and b"cddlm.xpathsafe" in _cmdline(int(p))]
    assert helpers and all(_allowed(h) == every for h in helpers)
    app.terminate()
    while app.state() != "terminated":
        assert time.monotonic() < deadline + 30
        time.sleep(0.2)


def test_a_cpu_the_portal_may_not_use_is_a_usage_error(tmp_path):
    import subprocess
    import sys
    absent = max(affinity.available()) + 1
    out = subprocess.run([sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", "0",
                          "--state-dir", str(tmp_path / "s"), "--cpu", str(absent)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "--cpu" in out.stderr and "may use" in out.stderr


def _ppid(pid: int) -> int:
    try:
        return int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _cmdline(pid: int) -> bytes:
    try:
        return open("/proc/%d/cmdline" % pid, "rb").read()
    except OSError:
        return b""
