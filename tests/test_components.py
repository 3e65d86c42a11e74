"""The component library enacted for real (issue 4): processes with readiness checks, stop
signals and restart policies; files; probes; sequence, parallel and optional children."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time

import pytest

from cddlm import ns, xmlsafe
from cddlm.application.service import DescriptorInput
from tests.conftest import free_port
from tests.netns import wait_until

HEAD = '<application xmlns="urn:cddlm:lang:components:1">'


def attr(name: str, value) -> str:
    if isinstance(value, list):
        inner = "".join("<item>%s</item>" % v for v in value)
    elif isinstance(value, dict):
        inner = "".join('<item name="%s">%s</item>' % kv for kv in value.items())
    else:
        inner = str(value)
    return '<attribute name="%s">%s</attribute>' % (name, inner)


def comp(name: str, type_: str = "process", children: str = "", **attrs) -> str:
    return '<component name="%s" type="%s">%s%s</component>' % (
        name, type_, "".join(attr(k, v) for k, v in attrs.items()), children)


def deploy(portal, body: str, properties=(), run: bool = True):
    svc = portal.service
    app, _ = svc.create(None, None, [], portal.url)
    svc.initialize(app.id, DescriptorInput(ns.NATIVE, body=xmlsafe.parse((HEAD + body + "</application>").encode())),
                   list(properties), [])
    if run:
        svc.run(app.id)
    return app.id


def wait(portal, app_id: str, *states: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        app = portal.service.get(app_id)
        if app.state in states:
            return app.state
        assert time.monotonic() < deadline, "still %s (%s)" % (app.state, app.state_info)
        time.sleep(0.05)


def component(portal, app_id: str, path: str):
    from cddlm.application import repository as repo
    with portal.store.read() as conn:
        return repo.get_component(conn, app_id, path)


# -- processes --------------------------------------------------------------------------------
def test_env_cwd_and_stdout_under_the_state_dir(portal):
    app_id = deploy(portal, comp("p", argv=["sh", "-c", 'echo "$GREETING from $(pwd)"; exec sleep 300'],
                                 env={"GREETING": "hello"}, cwd="."))
    wait(portal, app_id, "running")
    workdir = portal.service.resolve(app_id, "p")["workdir"]
    assert workdir.startswith(portal.settings.hosts_root)
    deadline = time.monotonic() + 5
    while "hello from" not in open(os.path.join(workdir, "stdout.log")).read():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert open(os.path.join(workdir, "stdout.log")).read().strip() == "hello from " + workdir


@pytest.mark.parametrize("kind", ["tcp", "http", "file", "log"])
def test_readiness_checks_gate_running(portal, kind):
    port = free_port()
    script = {"tcp": "sleep 0.5; exec python3 -m http.server %d --bind 127.0.0.1" % port,
              "http": "sleep 0.5; exec python3 -m http.server %d --bind 127.0.0.1" % port,
              "file": "sleep 0.5; touch up; exec sleep 300",
              "log": "sleep 0.5; echo READY-NOW; exec sleep 300"}[kind]
    check = {"tcp": str(port), "http": "http://127.0.0.1:%d/" % port, "file": "up",
             "log": "READY-NOW"}[kind]
    started = time.monotonic()
    app_id = deploy(portal, comp("p", argv=["sh", "-c", script], readiness={kind: check}))
    wait(portal, app_id, "running")
    assert time.monotonic() - started >= 0.5   # not before the check held


def test_readiness_timeout_fails_and_stops_the_process(portal):
    app_id = deploy(portal, comp("p", argv=["sleep", "300"], readiness={"file": "never", "timeout": "1"}))
    assert wait(portal, app_id, "failed") == "failed"
    c = component(portal, app_id, "p")
    assert "not ready after 1s" in c.info

    def stopped() -> bool:                     # reaped, or a zombie not yet reaped
        try:
            with open("/proc/%d/stat" % c.pid) as f:
                return f.read().split(") ")[1][0] in "ZX"
        except FileNotFoundError:
            return True
    # awaited (a fixed 0.3 s assumed the stop had landed by then); 30 s bound only a failure
    assert wait_until(stopped, 30), "the process that was never ready still runs"


def test_stop_signal_then_kill_after_the_grace_period(portal):
    # ignores TERM: must be killed after the grace period; INT is its polite stop signal
    app_id = deploy(portal, comp("stubborn", argv=["sh", "-c", "trap '' TERM; trap 'exit 0' INT; "
                                                   "while :; do sleep 0.1; done"], grace="0.5") +
                    comp("polite", argv=["sh", "-c", "trap 'exit 0' INT; while :; do sleep 0.1; done"],
                         stop_signal="INT", grace="10"))
    wait(portal, app_id, "running")
    started = time.monotonic()
    portal.service.terminate(app_id)
    wait(portal, app_id, "terminated")
    # polite answered INT well before its 10 s grace (in a second or two: 8 s for a loaded machine)
    assert time.monotonic() - started < 8
    assert component(portal, app_id, "stubborn").exit_signal == "SIGKILL"
    assert component(portal, app_id, "polite").exit_code == 0


def test_restart_on_failure_up_to_the_limit(portal):
    app_id = deploy(portal, comp("crashy", argv=["sh", "-c", "sleep 0.3; exit 2"], restart="on-failure",
                                 restart_limit="2"))
    assert wait(portal, app_id, "failed") == "failed"
    c = component(portal, app_id, "crashy")
    assert c.restarts == 2 and c.exit_code == 2
    info = portal.service.get(app_id).termination_info
    assert info["component"] == "crashy" and info["exitCode"] == 2


def test_missing_executable_fails_at_initialize(portal):
    app_id = deploy(portal, comp("p", argv=["no-such-program-anywhere"]), run=False)
    assert wait(portal, app_id, "failed") == "failed"
    assert "executable not found: no-such-program-anywhere" in portal.service.get(app_id).state_info


# -- files --------------------------------------------------------------------------------------
def test_file_written_with_properties_and_removed_unless_kept(portal):
    app_id = deploy(portal, comp("conf", "file", path="etc/app.ini",
                                 content="port=${port}\nhost=${host.name}\nkeep=${unset}\n", mode="0600") +
                    comp("log", "file", path="var/keep.txt", content="x", keep="true"),
                    properties=[("port", "8080")])
    wait(portal, app_id, "running")
    path = portal.service.resolve(app_id, "conf")["location"]
    assert open(path).read() == "port=8080\nhost=localhost\nkeep=${unset}\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    kept = portal.service.resolve(app_id, "log")["location"]
    portal.service.terminate(app_id)
    wait(portal, app_id, "terminated")
    assert not os.path.exists(path) and os.path.exists(kept)


def test_a_removed_file_is_a_failure(portal):
    app_id = deploy(portal, comp("conf", "file", path="x.txt", content="hi"))
    wait(portal, app_id, "running")
    os.unlink(portal.service.resolve(app_id, "conf")["location"])
    assert wait(portal, app_id, "failed") == "failed"
    assert "file was removed" in portal.service.get(app_id).termination_info["reason"]


def test_file_paths_cannot_leave_the_application_directory(portal):
    app_id = deploy(portal, comp("evil", "file", path="../../escape.txt", content="x"), run=False)
    assert wait(portal, app_id, "failed") == "failed"
    assert "must stay inside" in portal.service.get(app_id).state_info


# -- probes -------------------------------------------------------------------------------------
def test_probes_watch_something_outside(portal):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    app_id = deploy(portal, comp("web", "probe", http="http://127.0.0.1:%d/" % port, timeout="1") +
                    comp("tcp", "probe", tcp="127.0.0.1:%d" % port, timeout="1"))
    wait(portal, app_id, "running")
    server.shutdown()
    server.server_close()
    assert wait(portal, app_id, "failed") == "failed"
    assert "127.0.0.1:%d" % port in portal.service.get(app_id).termination_info["reason"]


def test_a_probe_of_nothing_fails_to_start(portal):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]          # bound, never listening
        app_id = deploy(portal, comp("nothing", "probe", tcp="127.0.0.1:%d" % port, timeout="0.2"))
        assert wait(portal, app_id, "failed", timeout=30) == "failed"


# -- containers -----------------------------------------------------------------------------------
def test_sequence_runs_children_in_order_and_stops_at_a_failed_step(portal):
    ok = deploy(portal, comp("seq", "sequence", children=
                             comp("first", argv=["sh", "-c", "sleep 0.3; touch ../first.done"],
                                  run_to_completion="true") +
                             comp("second", argv=["sh", "-c", "test -f ../first.done &amp;&amp; exec sleep 300"])))
    wait(portal, ok, "running")
    assert component(portal, ok, "seq/first").observed == "completed"
    assert component(portal, ok, "seq/second").observed == "running"
    bad = deploy(portal, comp("seq", "sequence", children=
                              comp("first", argv=["sh", "-c", "exit 4"], run_to_completion="true") +
                              comp("second", argv=["sleep", "300"])))
    assert wait(portal, bad, "failed") == "failed"
    assert component(portal, bad, "seq/second").pid is None   # never started


def test_optional_children_may_fail(portal):
    app_id = deploy(portal, comp("group", "parallel", children=
                                 comp("core", argv=["sleep", "300"]) +
                                 comp("extra", argv=["sh", "-c", "exit 9"], optional="true")))
    assert wait(portal, app_id, "running", "failed") == "running"
    deadline = time.monotonic() + 5
    while component(portal, app_id, "group/extra").observed != "failed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    assert portal.service.get(app_id).state == "running"


def test_all_one_shot_components_finishing_is_a_normal_termination(portal):
    app_id = deploy(portal, comp("job", argv=["sh", "-c", "sleep 0.2"], run_to_completion="true"))
    assert wait(portal, app_id, "terminated") == "terminated"
    info = portal.service.get(app_id).termination_info
    assert info["normal"] is True
    states = [h[1] for h in portal.service.history(app_id)]
    assert states == ["instantiated", "initialized", "running", "terminated"]


def test_a_file_that_cannot_be_removed_still_lets_the_application_terminate(portal):
    app_id = deploy(portal, comp("conf", "file", path="x.txt", content="hi"))
    wait(portal, app_id, "running")
    location = portal.service.resolve(app_id, "conf")["location"]
    os.unlink(location)
    os.mkdir(location)          # unlink() of a directory fails, even for root
    portal.service.terminate(app_id)
    assert wait(portal, app_id, "terminated") == "terminated"
    assert "cannot remove" in component(portal, app_id, "conf").info
