"""SSH hosts end to end: a portal whose datacenter names hosts by ``ssh://USER@ADDRESS:PORT``
deploys onto real sshds, one per network namespace (tests/engines/sshd.py), as the account
``cddlm-ssh`` whose shell is /bin/sh: placement first, start in an own session identified by
(pid, start time), readiness, logs with offsets, values, exit status and restart policy,
sequence order across hosts, stop with the component's signal and grace."""

from __future__ import annotations

import os
import time

import pytest
from lxml import etree

from cddlm import ns
from cddlm.client import Portal
from tests.conftest import LivePortal
from tests.engines.sshd import ACCOUNT, SshHosts
from tests.netns import wait_until

LEASE = 3.0


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    with SshHosts(3, racks=2) as made:
        yield made


@pytest.fixture(scope="module")
def portal(hosts, tmp_path_factory):
    state = tmp_path_factory.mktemp("ssh-portal")
    lp = LivePortal(state, extra=["--datacenter", str(hosts.datacenter), "--agent-credentials",
                                  str(hosts.credentials), "--agent-lease", str(LEASE),
                                  # the portal's own passes seldom: SSH hosts have theirs
                                  "--liveness-interval", "5", "--ssh-keepalive", "1"]).start()
    yield lp
    lp.stop()


def native(body: str, policies: str = "") -> etree._Element:
    return etree.fromstring('<application xmlns="%s">%s%s</application>' % (ns.NATIVE, body, policies))


def process(name: str, *argv: str, host: str | None = None, extra: str = "") -> str:
    items = "".join("<item>%s</item>" % a.replace("&", "&amp;").replace("<", "&lt;") for a in argv)
    pin = '<attribute name="host">%s</attribute>' % host if host else ""
    return ('<component name="%s" type="process"><attribute name="argv">%s</attribute>%s%s</component>'
            % (name, items, pin, extra))


def deploy(portal: LivePortal, body: etree._Element, state: str = "running", timeout: float = 60):
    front = Portal(portal.url, failover=False)
    app = front.create()
    app.initialize(ns.NATIVE, body=body)
    app.run()
    got = app.wait_for(state, timeout=timeout)
    assert got == state, app.ping()
    return app


def by_path(app) -> dict[str, dict]:
    return {c["path"]: c for c in app.components()}


def proc_env(pid: int) -> list[bytes]:
    with open("/proc/%d/environ" % pid, "rb") as f:
        return f.read().split(b"\0")


def alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def ended(app) -> None:
    app.terminate("test over")
    assert app.wait_for("terminated", timeout=60) == "terminated"


def test_components_run_on_their_ssh_hosts_in_their_own_sessions(hosts, portal):
    """Placement decides the host (a hard anti-collocation: three hosts for three workers);
    each process runs there, as the SSH account, in a session of its own, with its logs in
    its directory there; readiness, logs, values and ports come back through the portal."""
    body = native(
        process("w1", "sh", "-c", "echo hello from $CDDLM_HOST on $WHERE; exec sleep 600", extra=(
            '<attribute name="env"><item name="WHERE"><property name="local.hostname" lazy="true"/>'
            '</item></attribute>')) +
        process("w2", "sh", "-c", "echo hello from $CDDLM_HOST; exec sleep 600") +
        process("web", "python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", "0",
                extra='<attribute name="readiness"><item name="log">Serving HTTP</item></attribute>') +
        '<component name="conf" type="file"><attribute name="path">etc/app.conf</attribute>'
        '<attribute name="content">port=1</attribute></component>',
        '<group name="g"><member>w1</member><member>w2</member><member>web</member></group>'
        '<policy type="anti-collocation" level="host" group="g"/>')
    app = deploy(portal, body)
    comps = by_path(app)
    placed = {comps[p]["host"] for p in ("w1", "w2", "web")}
    assert placed == {"h1", "h2", "h3"}, comps
    for path in ("w1", "w2", "web"):
        pid = comps[path]["pid"]
        host = hosts.cluster.hosts[int(comps[path]["host"][1:]) - 1]
        assert host.runs_here(pid), (path, pid, comps[path]["host"])
        with open("/proc/%d/status" % pid) as f:
            uid = [line.split()[1] for line in f if line.startswith("Uid:")][0]
        assert int(uid) == hosts.uid, "%s runs as uid %s, not %s" % (path, uid, ACCOUNT)
        assert os.getsid(pid) != os.getsid(0) and os.getsid(pid) == os.getpgid(pid)
        assert ("CDDLM_COMPONENT=%s %s" % (app.id, path)).encode() in proc_env(pid)
    # logs, read over the connection (and from an offset on)
    w1 = app.logs("w1")
    where = int(comps["w1"]["host"][1:]) - 1
    assert w1["lines"] == ["hello from %s on %s" % (comps["w1"]["host"], hosts.hostname(where))]
    assert w1["available"]
    again = app.logs("w1", offset=0)
    assert again["lines"] == w1["lines"] and again["offset"] == len(w1["lines"][0]) + 1
    assert app.logs("w1", offset=again["offset"])["lines"] == []
    # values: pid, host, workdir, port (the port the web server listens on there)
    assert int(app.resolve("web/pid")) == comps["web"]["pid"]
    assert app.resolve("web/host") == comps["web"]["host"]
    port = int(app.resolve("web/port"))
    assert comps["web"]["ports"] == [port] and port > 0
    workdir = app.resolve("w1/workdir")
    assert workdir.startswith(hosts.workdir(int(comps["w1"]["host"][1:]) - 1) + "/apps/")
    assert os.stat(workdir).st_uid == hosts.uid
    conf = app.resolve("conf/location")
    assert open(conf).read() == "port=1"
    pids = [comps[p]["pid"] for p in ("w1", "w2", "web")]
    ended(app)
    assert not [p for p in pids if alive(p)]
    assert not os.path.exists(conf), "a file component is removed at terminate"


def test_exit_status_restart_policy_and_sequence_order_across_hosts(portal):
    """A run-to-completion step on one host must succeed before the next step, on another
    host, starts; a process that exits 3 fails the application with its status, after its
    restarts."""
    stamp = "date +%s.%N"
    body = native(
        '<component name="site" type="sequence">' +
        process("migrate", "sh", "-c", "sleep 0.3; %s" % stamp, host="h1",
                extra='<attribute name="run_to_completion">true</attribute>') +
        process("web", "sh", "-c", "%s; exec sleep 600" % stamp, host="h2") +
        '</component>')
    app = deploy(portal, body)
    done_at = float(app.logs("site/migrate")["lines"][-1])
    began_at = float(app.logs("site/web")["lines"][-1])
    assert began_at > done_at, "web started before migrate completed"
    comps = by_path(app)
    assert comps["site/migrate"]["state"] == "completed" and comps["site/migrate"]["exitCode"] == 0
    ended(app)

    # four run-to-completion steps on two hosts: each end is seen by the SSH hosts' own
    # liveness passes (0.5 s), not the portal's (every 5 s here)
    steps = "".join(process("s%d" % i, "sh", "-c", stamp, host="h%d" % (1 + i % 2),
                            extra='<attribute name="run_to_completion">true</attribute>')
                    for i in range(4))
    app = deploy(portal, native('<component name="seq" type="sequence">%s</component>' % steps),
                 "terminated")
    stamps = [float(app.logs("seq/s%d" % i)["lines"][-1]) for i in range(4)]
    assert stamps == sorted(stamps)
    assert stamps[-1] - stamps[0] < 4.5, "three steps took %.1f s" % (stamps[-1] - stamps[0])

    body = native(process("flaky", "sh", "-c", "echo oops >&2; exit 3", host="h3", extra=(
        '<attribute name="restart">on-failure</attribute><attribute name="restart_limit">2</attribute>')))
    app = deploy(portal, body, "failed")
    info = app.ping()["terminationInfo"]
    assert "exited with status 3" in info["reason"], info
    flaky = by_path(app)["flaky"]
    assert flaky["restarts"] == 2 and flaky["exitCode"] == 3, flaky
    assert "oops" in (app.logs("flaky", stream="stderr")["lines"] or [""])[-1]
    assert "oops" in (info.get("stderr") or flaky.get("info") or "oops"), info
    ended(app)


def test_stop_uses_the_components_signal_and_grace(portal):
    """terminate sends each process group its own stop signal; one that ignores it is
    killed after its grace period, not before."""
    body = native(
        process("polite", "sh", "-c", "trap 'echo got USR1; exit 0' USR1; echo up; "
                "while :; do sleep 0.1; done", host="h1",
                extra='<attribute name="stop_signal">USR1</attribute>'
                      '<attribute name="readiness"><item name="log">up</item></attribute>') +
        process("stubborn", "sh", "-c", "trap '' TERM; echo up; while :; do sleep 0.1; done",
                host="h2", extra='<attribute name="grace">1.5</attribute>'
                                 '<attribute name="readiness"><item name="log">up</item></attribute>'))
    app = deploy(portal, body)
    comps = by_path(app)
    began = time.monotonic()
    ended(app)
    took = time.monotonic() - began
    assert 1.5 <= took < 6, "terminate took %.1f s (grace 1.5 s)" % took
    assert app.logs("polite")["lines"][-1] == "got USR1"
    after = by_path(app)
    assert after["polite"]["exitCode"] == 0
    assert after["stubborn"]["exitSignal"] in (None, "SIGKILL")
    assert not alive(comps["polite"]["pid"]) and not alive(comps["stubborn"]["pid"])


def test_readiness_failure_stops_the_process_and_names_the_condition(portal):
    body = native(process("slow", "sleep", "600", host="h3", extra=(
        '<attribute name="readiness"><item name="tcp">1</item><item name="timeout">1</item>'
        '</attribute>')))
    app = deploy(portal, body, "failed", timeout=30)
    reason = app.ping()["terminationInfo"]["reason"]
    assert "not ready after 1s" in reason and "tcp 1" in reason, reason
    pid = by_path(app)["slow"]["pid"] or 0
    ended(app)
    assert not pid or wait_until(lambda: not alive(pid), 5)


def test_hostile_values_reach_the_program_literally_and_run_nothing_else(hosts, portal, tmp_path):
    """Arguments, environment values and file contents pass through the remote shell as data:
    quotes, $(...), backquotes and ; run nothing; an environment name the shell cannot set is
    refused saying so, and the application fails without running anything."""
    canary = tmp_path / "pwned"
    evil = "it's $(touch %s) `touch %s` \"q\" ; touch %s | & \\ \n*" % (canary, canary, canary)
    xml_evil = evil.replace("&", "&amp;").replace("<", "&lt;")
    body = native(
        process("echo", "sh", "-c", 'printf "%s|%s\\n" "$1" "$EVIL"; exec sleep 600', "x", evil,
                host="h1", extra='<attribute name="env"><item name="EVIL">%s</item></attribute>'
                                 '<attribute name="readiness"><item name="log">[|]</item></attribute>' % xml_evil) +
        '<component name="f" type="file"><attribute name="path">f.txt</attribute>'
        '<attribute name="content">%s</attribute><attribute name="host">h2</attribute></component>' % xml_evil)
    app = deploy(portal, body)
    got = "\n".join(app.logs("echo")["lines"])
    assert got == "%s|%s" % (evil, evil), got
    assert open(app.resolve("f/location")).read() == evil
    assert not canary.exists()
    ended(app)
    bad = native(process("bad", "sleep", "600", host="h3",
                         extra='<attribute name="env"><item name="A;touch %s">1</item></attribute>' % canary))
    app = deploy(portal, bad, "failed", timeout=30)
    assert "cannot be set over SSH" in app.ping()["terminationInfo"]["reason"]
    assert not canary.exists()
    ended(app)
