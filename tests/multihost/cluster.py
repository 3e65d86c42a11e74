"""A small real cluster for the multi-host tests and the benchmark: host portals
(``cddlm portal serve --agent``) each in a network namespace of its own (tests/netns.py), or on
loopback addresses 127.0.0.N where namespaces cannot be made, and a front portal whose
datacenter names them as agents, signing in with ``--agent-credentials``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import ROOT, LivePortal, ready_url
from tests.netns import Cluster, unavailable_reason

FRONT_USER, FRONT_PASSWORD = "front", "front-secret-123"
AGENT_PORT = 18480


@dataclass
class HostPortal:
    name: str
    address: str
    state: Path
    netns: object | None           # tests.netns.Host, or None on loopback
    proc: subprocess.Popen | None = None
    url: str = ""
    log: object = None
    extra: list[str] = field(default_factory=list)

    def start(self, timeout: float = 60.0) -> "HostPortal":
        return self.spawn().ready(timeout)

    def spawn(self) -> "HostPortal":
        """Start the portal without waiting for it (``ready`` waits): a cluster's host portals
        start side by side."""
        users = self.state.parent / ("%s-users.json" % self.name)
        if not users.exists():
            from cddlm.application.users import UsersFile
            UsersFile(str(users)).add(FRONT_USER, FRONT_PASSWORD, "user", digest=True)
        self.state.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "cddlm.cli", "portal", "serve", "--agent",
                "--host", self.address, "--port", str(AGENT_PORT), "--state-dir", str(self.state),
                "--users", str(users), "--insecure", "--liveness-interval", "0.5"] + self.extra
        self.log = open(self.state.parent / ("%s-%d.log" % (self.name, time.time_ns())), "wb")
        kwargs = dict(stdout=subprocess.PIPE, stderr=self.log, cwd=ROOT)
        self.proc = self.netns.popen(argv, **kwargs) if self.netns else subprocess.Popen(argv, **kwargs)
        return self

    def ready(self, timeout: float = 60.0) -> "HostPortal":
        try:
            self.url = ready_url(self.proc, timeout)
        except RuntimeError:
            raise RuntimeError("host portal %s did not start (see %s)" % (self.name, self.log.name)) from None
        return self

    def kill(self) -> None:
        """SIGKILL the portal only: its components keep running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()   # `ip netns exec` execs the portal: this is its pid
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()
        self.proc = None

    def runs_here(self, pid: int) -> bool:
        if self.netns is None:
            return True
        return self.netns.runs_here(pid)


@dataclass
class MultiHost:
    folder: Path
    n: int = 3
    front_args: list[str] = field(default_factory=list)
    lease: float = 3.0
    db: str | None = None
    racks: int = 1
    slots: int = 100000             # each host's capacity
    host_args: list[str] = field(default_factory=list)
    local: list[str] = field(default_factory=list)     # hosts the front enacts itself (agent local)
    hosts: list[HostPortal] = field(default_factory=list)
    front: LivePortal | None = None
    netns: Cluster | None = None
    others: list[LivePortal] = field(default_factory=list)

    def __enter__(self) -> "MultiHost":
        try:
            # CDDLM_TEST_LOOPBACK_HOSTS=1: host portals on 127.0.0.N even where namespaces work
            if unavailable_reason() is None and not os.environ.get("CDDLM_TEST_LOOPBACK_HOSTS"):
                self.netns = Cluster(self.n).__enter__()
                places = [(h.name, h.address, h) for h in self.netns.hosts]
            else:
                places = [("lo%d" % i, "127.0.0.%d" % (i + 1), None) for i in range(1, self.n + 1)]
            for i, (ns_name, address, netns) in enumerate(places, 1):
                self.hosts.append(HostPortal("h%d" % i, address, self.folder / ("h%d" % i), netns,
                                             extra=list(self.host_args)))
            for h in self.hosts:
                h.spawn()
            for h in self.hosts:
                h.ready()
            self.write_config()
            self.start_front()
        except BaseException:
            self.close()
            raise
        return self

    def write_config(self) -> None:
        per_rack = -(-self.n // self.racks)
        racks = []
        for r in range(self.racks):
            members = self.hosts[r * per_rack:(r + 1) * per_rack]
            racks.append({"name": "rack%d" % (r + 1), "level": "rack", "children": [
                {"name": h.name, "level": "host", "agent": h.url,
                 "capacity": {"slots": self.slots}} for h in members]})
        racks[0]["children"] += [{"name": name, "level": "host", "agent": "local",
                                  "capacity": {"slots": self.slots}} for name in self.local]
        dc = {"resources": ["slots"], "levels": ["site", "rack", "host"],
              "location": [{"name": "site", "level": "site", "children": racks}]}
        (self.folder / "datacenter.json").write_text(json.dumps(dc))
        creds = self.folder / "agents.toml"
        creds.write_text('[default]\nuser = "%s"\npassword = "%s"\n' % (FRONT_USER, FRONT_PASSWORD))
        os.chmod(creds, 0o600)

    def start_front(self, name: str = "front") -> LivePortal:
        """The front portal (another with ``name``: a second front on the same store)."""
        state = self.folder / name
        state.mkdir(exist_ok=True)
        # in namespaces the front listens on the bridge, where host portals can notify it
        where = ["--host", self.netns.gateway, "--insecure"] if self.netns else []
        lp = LivePortal(state, db=self.db, extra=where + [
            "--datacenter", str(self.folder / "datacenter.json"),
            "--agent-credentials", str(self.folder / "agents.toml"),
            "--agent-lease", str(self.lease), "--agent-timeout", "3",
            "--liveness-interval", "0.5"] + self.front_args).start()
        if name == "front":
            self.front = lp
        else:
            self.others.append(lp)
        return lp

    def close(self) -> None:
        for lp in [self.front] + self.others:
            if lp is not None:
                lp.stop()
        for h in self.hosts:
            h.stop()
        if self.netns is not None:
            self.netns.close()
        else:
            for h in self.hosts:
                kill_components(h.state)
        if self.local:      # what the front ran on its own hosts, should a test have left it
            for lp in [self.front] + self.others:
                if lp is not None:
                    kill_components(lp.state_dir)

    def __exit__(self, *exc) -> None:
        self.close()


def kill_components(state: Path) -> None:
    """Kill what a loopback host portal left running (its components' pid files)."""
    for pidfile in state.glob("hosts/*/apps/*/**/pid"):
        try:
            os.killpg(int(pidfile.read_text().strip()), signal.SIGKILL)
        except (OSError, ValueError):
            pass
