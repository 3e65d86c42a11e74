"""Test hosts as Linux network namespaces: a bridge the test makes, one namespace per host joined
to it by a veth pair, each with its own address. Processes started in a host (``Host.popen``)
run in that namespace; ``Host.partition()`` takes its link down (a real partition) and
``Host.heal()`` brings it back; ``Host.kill_all()`` kills what ``ip netns pids`` lists.

    with Cluster(3) as cluster:          # skips the test with a reason where it cannot be made
        h1 = cluster.hosts[0]            # h1.address == "10.213.X.11"
        proc = h1.popen([...])
        cluster.gateway                  # the root namespace's address on the bridge

Everything is removed on exit: processes in the namespaces, the namespaces, the veths and the
bridge. Names carry a random tag, so concurrent tests do not collide; only the addresses made
here (and loopback) are ever contacted.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field

import pytest

LOCK = "/tmp/cddlm-test-subnets.lock"      # see Cluster._bridge


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = "cddlm-probe-%s" % uuid.uuid4().hex[:6]
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return "cannot create a network namespace: %s" % made.stderr.strip()
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Host:
    name: str            # also the namespace's name
    address: str
    veth: str            # the root-namespace end of its link
    procs: list[subprocess.Popen] = field(default_factory=list)

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], **kwargs)
        self.procs.append(proc)
        return proc

    def run(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.name, *argv], **kwargs)

    def pids(self) -> list[int]:
        out = _ip("netns", "pids", self.name, check=False).stdout
        return [int(p) for p in out.split()]

    def netns_inode(self) -> int:
        return os.stat("/run/netns/%s" % self.name).st_ino

    def runs_here(self, pid: int) -> bool:
        """Whether process ``pid`` runs in this host's network namespace."""
        try:
            return os.stat("/proc/%d/ns/net" % pid).st_ino == self.netns_inode()
        except OSError:
            return False

    def partition(self) -> None:
        _ip("link", "set", self.veth, "down")

    def heal(self) -> None:
        _ip("link", "set", self.veth, "up")

    def kill_all(self, sig: int = signal.SIGKILL) -> list[int]:
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.wait(5)
        return pids


class Cluster:
    """``n`` hosts on a bridge of their own; the root namespace is ``gateway`` on it."""

    def __init__(self, n: int, prefix: str = "h"):
        self.n = n
        self.prefix = prefix
        self.tag = uuid.uuid4().hex[:5]
        self.subnet = self.gateway = ""     # drawn when the bridge is made (``_bridge``)
        self.bridge = "cbr%s" % self.tag
        self.hosts: list[Host] = []

    def _bridge(self) -> None:
        """Make the bridge on a subnet no other bridge of this machine has: drawn and taken under
        a file lock, so that suites running side by side on one machine do not share one."""
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            taken = set(re.findall(r"inet 10\.213\.(\d+)\.", _ip("-4", "addr", "show").stdout))
            free = [n for n in range(1, 255) if str(n) not in taken]
            if not free:
                raise RuntimeError("every subnet 10.213.1-254.0/24 is taken by another test's bridge")
            self.subnet = "10.213.%d" % random.choice(free)
            self.gateway = self.subnet + ".1"
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", self.gateway + "/24", "dev", self.bridge)

    def __enter__(self) -> "Cluster":
        reason = unavailable_reason()
        if reason:
            pytest.skip("test hosts need network namespaces: %s" % reason)
        try:
            self._bridge()
            _ip("link", "set", self.bridge, "up")
            for i in range(1, self.n + 1):
                name = "cddlm-%s-%s%d" % (self.tag, self.prefix, i)
                outer, inner = "cv%s%d" % (self.tag, i), "ci%s%d" % (self.tag, i)
                address = "%s.%d" % (self.subnet, 10 + i)
                _ip("netns", "add", name)
                host = Host(name, address, outer)
                self.hosts.append(host)
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", name)
                _ip("link", "set", outer, "master", self.bridge)
                _ip("link", "set", outer, "up")
                _ip("-n", name, "addr", "add", address + "/24", "dev", inner)
                _ip("-n", name, "link", "set", inner, "up")
                _ip("-n", name, "link", "set", "lo", "up")
                _ip("-n", name, "route", "add", "default", "via", self.gateway)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for host in self.hosts:
            host.kill_all()
            for proc in host.procs:
                with contextlib.suppress(Exception):
                    proc.kill()
                    proc.wait(5)
            _ip("link", "del", host.veth, check=False)
            _ip("netns", "del", host.name, check=False)
        self.hosts.clear()
        _ip("link", "del", self.bridge, check=False)


def leftover_namespaces() -> list[str]:
    """Namespaces this module made that still exist (a test that leaks one fails a check)."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("cddlm-")]


def wait_until(predicate, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()
