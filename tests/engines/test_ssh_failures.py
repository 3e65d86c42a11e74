"""SSH hosts when things go wrong: the portal SIGKILLed and restarted (every process found
again by pid and start time, nothing duplicated or orphaned), a start repeated after a crash,
a host whose sshd dies (down after the lease, naming the host; up when it answers; its
processes stopped then), a terminate during a partition (completes after it heals), host keys
that are unknown or changed (the host is refused, saying so), and the liveness pass asking
each host once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from cddlm import ns
from cddlm.client import Portal
from tests.cli.helpers import cddlm
from tests.conftest import LivePortal, free_port, make_portal
from tests.engines.sshd import SshHosts
from tests.engines.test_ssh import alive, by_path, deploy, native, process
from tests.netns import wait_until

LEASE = 3.0


@pytest.fixture(scope="module")
def hosts():
    with SshHosts(2) as made:
        yield made


def start_portal(hosts: SshHosts, state: Path, credentials: Path | None = None,
                 port: int = 0, extra: tuple[str, ...] = ()) -> LivePortal:
    state.mkdir(parents=True, exist_ok=True)
    return LivePortal(state, port=port, extra=["--datacenter", str(hosts.datacenter), "--agent-credentials",
                                    str(credentials or hosts.credentials), "--agent-lease", str(LEASE),
                                    "--liveness-interval", "0.5", "--ssh-keepalive", "0.5",
                                    "--ssh-timeout", "2", *extra]).start()


@pytest.fixture
def portal(hosts, tmp_path):
    lp = start_portal(hosts, tmp_path / "state")
    yield lp
    lp.stop()


def processes_of(app_id: str, programs: bool = True) -> list[int]:
    """Every live process (in any namespace) whose environment names a component of ``app_id``:
    the programs (``programs``), or those and the ``sh`` supervising each (its session leader)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as f:
                if ("CDDLM_COMPONENT=%s " % app_id).encode() in f.read() and alive(int(entry)) \
                        and not (programs and os.getsid(int(entry)) == int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def two_sleepers() -> object:
    return native(process("a", "sleep", "600", host="h1") + process("b", "sleep", "600", host="h2"))


def host_state(portal: LivePortal, name: str) -> dict:
    return {h["name"]: h for h in Portal(portal.url, failover=False).hosts()}[name]


def test_a_portal_killed_and_restarted_finds_every_process_again(hosts, tmp_path):
    port = free_port()
    # (a longer lease: the host monitor's first look after a restart may be slow on a busy
    # machine, and its last answer is from before the kill)
    slow = ("--agent-lease", "10", "--ssh-timeout", "5")
    lp = start_portal(hosts, tmp_path / "state", port=port, extra=slow)
    try:
        app = deploy(lp, two_sleepers())
        before = {p: c["pid"] for p, c in by_path(app).items()}
        running = sorted(processes_of(app.id))
        assert len(running) == 2
        lp.stop(signal.SIGKILL)
        lp = start_portal(hosts, tmp_path / "state", port=port, extra=slow)
        app = Portal(lp.url, failover=False).application(app.reference)
        assert app.state() == "running"
        # a liveness pass or two over SSH: still the same processes, and no new ones
        time.sleep(1.5)
        assert {p: c["pid"] for p, c in by_path(app).items()} == before
        assert sorted(processes_of(app.id)) == running
        app.terminate("over")
        assert app.wait_for("terminated", timeout=60) == "terminated"
        assert processes_of(app.id, programs=False) == []
    finally:
        lp.stop()


def test_a_start_repeated_after_a_crash_adopts_instead_of_starting_twice(hosts, tmp_path):
    """The runner's start, repeated with nothing recorded (the portal died between the spawn and
    its commit), finds the process by its pid file and identity."""
    from cddlm.application.enactment.local import Target
    portal = make_portal(tmp_path, datacenter_file=str(hosts.datacenter),
                         agent_credentials_file=str(hosts.credentials))
    try:
        runner = portal.engine.runners["h1"]
        t = Target("urn:uuid:00000000-0000-0000-0000-00000000abcd", "svc", "process",
                   {"argv": ["sleep", "600"]}, "h1")
        assert runner.deploy(t).event == "deployed"
        first = runner.start(t, None, None, lambda: None)
        again = runner.start(t, None, None, lambda: None)
        assert first.event == again.event == "running"
        assert (first.pid, first.pid_start) == (again.pid, again.pid_start)
        assert processes_of(t.app_id) == [first.pid]
        assert runner.stop(t, first.pid, first.pid_start, lambda: None).event == "stopped"
        assert processes_of(t.app_id, programs=False) == []
        runner.remove_app(t.app_id)
        assert not os.path.exists(runner.app_dir(t.app_id))
    finally:
        portal.stop()


def test_the_liveness_pass_asks_each_host_once_over_its_one_connection(hosts, tmp_path):
    """Eight processes on two hosts: one liveness pass is one command per host, and every
    command is a channel of the host's one connection."""
    from cddlm.application.service import DescriptorInput
    portal = make_portal(tmp_path, datacenter_file=str(hosts.datacenter),
                         agent_credentials_file=str(hosts.credentials), liveness_interval=3600,
                         ssh_liveness=3600)
    service = portal.service
    try:
        body = native("".join(process("s%d" % i, "sleep", "600", host="h%d" % (1 + i % 2))
                              for i in range(8)))
        app, _ = service.create("sweep", None, [], portal.url)
        service.initialize(app.id, DescriptorInput(ns.NATIVE, body=body), [], [])
        assert wait_until(lambda: service.get(app.id).state == "initialized", 30)
        service.run(app.id)
        assert wait_until(lambda: service.get(app.id).state == "running", 30)
        links = [portal.engine.runners[h].link for h in ("h1", "h2")]
        before = [link.commands for link in links]
        portal.engine.check_all()
        assert [link.commands - b for link, b in zip(links, before)] == [1, 1]
        # every command so far (deploy, start, surveys) went over one connection per host
        assert [link.connects for link in links] == [1, 1] and min(before) >= 2
        assert service.get(app.id).state == "running"
        service.terminate(app.id, "over")
        assert wait_until(lambda: service.get(app.id).state == "terminated", 30)
        assert processes_of(app.id, programs=False) == []
    finally:
        portal.stop()


def test_a_host_whose_sshd_dies_is_marked_down_after_the_lease_and_up_when_it_answers(hosts, portal):
    app = deploy(portal, two_sleepers())
    pids = {p: c["pid"] for p, c in by_path(app).items()}
    began = time.monotonic()
    hosts.kill_sshd(0)
    try:
        assert app.wait_for("failed", timeout=4 * LEASE) == "failed"
        took = time.monotonic() - began
        reason = app.ping()["terminationInfo"]["reason"]
        assert "h1" in reason and "down" in reason, reason
        assert reason.endswith(" UTC: cannot connect"), reason     # a few words, not the raw error
        assert took < 2 * LEASE + 2, "failed %.1f s after sshd died (lease %.0f s)" % (took, LEASE)
        # `cddlm status` says why on the component's row too, whether it reads failed or
        # stopping (its stop waits for the host)
        row = next(line for line in cddlm("status", app.id, portal=portal.url).stdout.splitlines()
                   if line.startswith("a "))
        assert "host h1 is down: unreachable since " in row, row
        assert host_state(portal, "h1")["down"]
        assert alive(pids["a"]), "nothing can stop it while its host does not answer"
    finally:
        hosts.start_sshd(0)
        hosts.wait_answering(0)
    assert wait_until(lambda: not host_state(portal, "h1")["down"], 4 * LEASE)
    # the failed component's process was stopped once its host answered (nothing orphaned)
    assert wait_until(lambda: not alive(pids["a"]), 15), "the process on h1 was left running"
    app.terminate("over")
    assert app.wait_for("terminated", timeout=30) == "terminated"
    assert processes_of(app.id, programs=False) == []


def test_a_terminate_during_a_partition_completes_after_it_heals(hosts, portal):
    app = deploy(portal, two_sleepers())
    pids = {p: c["pid"] for p, c in by_path(app).items()}
    h2 = hosts.cluster.hosts[1]
    h2.partition()
    try:
        app.terminate("during a partition")
        # the reachable host's process is stopped at once: awaited (a fixed second assumed the
        # stop had gone over SSH by then), the partitioned one's is not
        assert wait_until(lambda: not alive(pids["a"]), 30), "the reachable host's process runs on"
        assert app.state() != "terminated"
        assert alive(pids["b"])
    finally:
        h2.heal()
    assert app.wait_for("terminated", timeout=60) == "terminated"
    assert not alive(pids["b"])
    assert processes_of(app.id, programs=False) == []


@pytest.mark.parametrize("case", ["unknown", "changed"])
def test_a_host_whose_key_is_not_known_is_refused_saying_so(hosts, tmp_path, case):
    known = tmp_path / "known_hosts"
    lines = hosts.known_hosts.read_text().splitlines()
    if case == "unknown":
        known.write_text(lines[1] + "\n")           # h2's key only
    else:                                           # h1's address with h2's key
        known.write_text(lines[0].split()[0] + " " + " ".join(lines[1].split()[1:]) + "\n")
    creds = tmp_path / "agents.toml"
    creds.write_text('[default]\nssh_key = "%s"\nknown_hosts = "%s"\n' % (hosts.key, known))
    lp = start_portal(hosts, tmp_path / "state", creds)
    try:
        front = Portal(lp.url, failover=False)
        app = front.create()
        app.initialize("urn:cddlm:lang:components:1", body=native(process("a", "sleep", "600", host="h1")))
        assert wait_until(lambda: host_state(lp, "h1")["down"], 4 * LEASE)
        assert app.wait_for("failed", timeout=30) == "failed"
        said = app.ping()["terminationInfo"]["reason"]
        word = "is not in" if case == "unknown" else "changed"
        assert "host h1 is down" in said and "host's key %s" % word in said and str(known) in said, said
        assert processes_of(app.id, programs=False) == []
    finally:
        lp.stop()


def test_logs_past_the_cap_are_rotated_on_the_host(hosts, tmp_path):
    lp = start_portal(hosts, tmp_path / "state", extra=("--max-log-bytes", "10000"))
    try:
        app = deploy(lp, native(process(
            "chatty", "sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done; "
            "echo done; exec sleep 600", host="h1",
            extra='<attribute name="readiness"><item name="log">^done$</item></attribute>')))
        log = Path(app.resolve("chatty/workdir")) / "stdout.log"
        assert wait_until(lambda: log.with_suffix(".log.1").exists() and log.stat().st_size <= 10000, 10)
        kept = log.with_suffix(".log.1").read_bytes()
        assert len(kept) == 10000 and kept.endswith(b"line 2999\ndone\n")
        app.terminate("over")
        assert app.wait_for("terminated", timeout=30) == "terminated"
    finally:
        lp.stop()


def test_a_host_an_operator_marked_down_that_does_not_answer_is_given_up_at_terminate(hosts, portal):
    app = deploy(portal, two_sleepers())
    pid = by_path(app)["b"]["pid"]
    h2 = hosts.cluster.hosts[1]
    h2.partition()
    try:
        Portal(portal.url, failover=False).set_host_state("h2", True, "maintenance")
        assert app.wait_for("failed", timeout=30) == "failed"
        app.terminate("over")
        assert app.wait_for("terminated", timeout=30) == "terminated"
        assert "abandoned" in (by_path(app)["b"]["info"] or ""), by_path(app)["b"]
        assert alive(pid), "nothing could reach it"
    finally:
        h2.heal()
        Portal(portal.url, failover=False).set_host_state("h2", False)
        os.killpg(os.getpgid(pid), signal.SIGKILL)      # the operator's to clean up


@pytest.mark.parametrize("agent, creds, says", [
    ("ssh://10.0.0.5", "", "an SSH host is ssh://USER@ADDRESS[:PORT]"),
    ("ssh://u@10.0.0.5", 'ssh_key = "/nonexistent/key"', "the ssh_key file /nonexistent/key cannot be read"),
    ("ssh://u@10.0.0.5", 'known_hosts = "/nonexistent/kh"', "the known_hosts file /nonexistent/kh cannot be read"),
    ("ssh://u@10.0.0.5", 'ssh_keys = "x"', "unknown key(s) ssh_keys"),
])
def test_a_bad_ssh_host_stops_the_portal_at_start_saying_why(tmp_path, agent, creds, says):
    from cddlm.app import Portal as App
    from cddlm.config import Settings
    from cddlm.errors import ConfigurationError
    dc = tmp_path / "dc.yaml"
    dc.write_text("location: [{name: s1, level: host, agent: '%s'}]\nlevels: [host]\n" % agent)
    toml = tmp_path / "agents.toml"
    toml.write_text("[default]\n%s\n" % creds)
    with pytest.raises(ConfigurationError) as e:
        App(Settings(state_dir=str(tmp_path / "state"), datacenter_file=str(dc),
                     agent_credentials_file=str(toml)))
    assert says in str(e.value)
