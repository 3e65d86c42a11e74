"""SSH test hosts: one ``sshd`` per network namespace (tests/netns.py), an account whose login
shell is ``/bin/sh``, a client key, the hosts' keys in a ``known_hosts`` file, and the datacenter
and ``--agent-credentials`` files that name them, so a portal deploys onto them over SSH as it
would onto any machine that runs only sshd.

    with SshHosts(3) as hosts:       # skips the test with a reason where it cannot be made
        hosts.datacenter             # a datacenter file: h1..h3 with agent ssh://cddlm-ssh@ADDR:2222
        hosts.credentials            # a TOML file with ssh_key and known_hosts
        hosts.kill_sshd(0)           # a host's sshd gone (its processes stay)

Daemons are started with ``nsenter --net`` (not ``ip netns exec``, which remounts /sys: see
../shared/notes/engines.md) and stopped on exit with everything else the namespaces hold. Run as
a program, it starts hosts and a portal for the tour of docs/engines.md (``make ssh-cluster``).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.debian import ensure_package
from tests.netns import Cluster, unavailable_reason

ACCOUNT = "cddlm-ssh"
PORT = 2222
SSHD = "/usr/sbin/sshd"
SSHD_CONFIG = """Port {port}
ListenAddress {address}
HostKey {key}
PidFile none
AuthorizedKeysFile {authorized}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin no
AllowUsers {account}
MaxSessions 200
MaxStartups 200
UseDNS no
LogLevel ERROR
ClientAliveInterval 0
"""


def unavailable() -> str | None:
    """Why SSH test hosts cannot be made here, or None (installing openssh-server if needed)."""
    reason = unavailable_reason()
    if reason:
        return "SSH test hosts need network namespaces: %s" % reason
    if shutil.which("nsenter") is None:
        return "util-linux's nsenter is missing"
    return ensure_package("openssh-server", lambda: os.access(SSHD, os.X_OK), "sshd")


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


class SshHosts:
    """``n`` namespaces, each with an sshd on ``ADDRESS:2222`` that lets ``cddlm-ssh`` in with
    the client key; ``prefix`` names the hosts (h1, h2 ...)."""

    def __init__(self, n: int, prefix: str = "h", racks: int = 1):
        self.n, self.prefix, self.racks = n, prefix, racks
        self.cluster = Cluster(n, prefix)
        self.dir = Path(tempfile.mkdtemp(prefix="cddlm-ssh-"))
        self.sshd: list[subprocess.Popen] = []
        self.made_account = False

    # -- set-up ---------------------------------------------------------------------------------
    def __enter__(self) -> "SshHosts":
        reason = unavailable()
        if reason:
            shutil.rmtree(self.dir, ignore_errors=True)
            pytest.skip(reason)
        try:
            self.cluster.__enter__()
            self._account()
            os.chmod(self.dir, 0o755)
            self.key = self.dir / "client_key"
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "cddlm-test", "-f", str(self.key)])
            authorized = self.dir / "authorized_keys"
            shutil.copy(str(self.key) + ".pub", authorized)
            os.chmod(authorized, 0o644)
            self.known_hosts = self.dir / "known_hosts"
            lines = []
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # sshd's privilege separation
            for i, host in enumerate(self.cluster.hosts):
                hostkey = self.dir / ("host%d_key" % i)
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)])
                public = Path(str(hostkey) + ".pub").read_text().split()[:2]
                lines.append("[%s]:%d %s" % (host.address, PORT, " ".join(public)))
                config = self.dir / ("sshd%d.conf" % i)
                config.write_text(SSHD_CONFIG.format(port=PORT, address=host.address, key=hostkey,
                                                     authorized=authorized, account=ACCOUNT))
                self.start_sshd(i)
                (self.dir / ("work-" + self.name(i))).mkdir()
                os.chown(self.dir / ("work-" + self.name(i)), self.uid, self.gid)
            self.known_hosts.write_text("\n".join(lines) + "\n")
            self.credentials = self.dir / "agents.toml"
            self.credentials.write_text('[default]\nssh_key = "%s"\nknown_hosts = "%s"\n'
                                        % (self.key, self.known_hosts))
            self.datacenter = self.dir / "datacenter.yaml"
            self.datacenter.write_text(self.datacenter_text())
            for i in range(self.n):
                self.wait_answering(i)
        except BaseException:
            self.close()
            raise
        return self

    def _account(self) -> None:
        try:
            entry = pwd.getpwnam(ACCOUNT)
        except KeyError:
            home = "/var/lib/" + ACCOUNT
            _run(["useradd", "--system", "--home-dir", home, "--create-home", "--shell", "/bin/sh",
                  ACCOUNT])
            self.made_account = True
            entry = pwd.getpwnam(ACCOUNT)
        # a locked password ("!") makes sshd refuse the account without PAM; "*" is no password
        _run(["usermod", "-p", "*", "-s", "/bin/sh", ACCOUNT])
        self.uid, self.gid = entry.pw_uid, entry.pw_gid

    def name(self, i: int) -> str:
        return "%s%d" % (self.prefix, i + 1)

    def hostname(self, i: int) -> str:
        return "ssh-%s-%s" % (self.cluster.tag, self.name(i))

    def agent(self, i: int) -> str:
        return "ssh://%s@%s:%d" % (ACCOUNT, self.cluster.hosts[i].address, PORT)

    def workdir(self, i: int) -> str:
        return str(self.dir / ("work-" + self.name(i)))

    def datacenter_text(self, slots: int = 1000) -> str:
        """Hosts in ``racks`` racks, each host's agent its sshd, on one network."""
        out = ["resources: [slots]", "levels: [rack, host]", "location:"]
        per = -(-self.n // self.racks)
        for r in range(self.racks):
            out.append("  - {name: rack%d, level: rack, children: [" % (r + 1))
            members = range(r * per, min(self.n, (r + 1) * per))
            out.append(",\n".join("      {name: %s, level: host, agent: '%s', workdir: '%s', "
                                  "capacity: {slots: %d}}" % (self.name(i), self.agent(i),
                                                              self.workdir(i), slots)
                                  for i in members))
            out.append("    ]}")
        out.append("network: {name: lan, children: [%s]}"
                   % ", ".join("{host: %s}" % self.name(i) for i in range(self.n)))
        return "\n".join(out) + "\n"

    # -- daemons --------------------------------------------------------------------------------
    def start_sshd(self, i: int) -> subprocess.Popen:
        host = self.cluster.hosts[i]
        # a machine name of its own too (a UTS namespace): what `uname -n` says there
        proc = subprocess.Popen(["nsenter", "--net=/run/netns/%s" % host.name, "unshare", "--uts",
                                 "sh", "-c", 'hostname "$0" && exec "$@"', self.hostname(i),
                                 SSHD, "-D", "-e", "-f", str(self.dir / ("sshd%d.conf" % i))],
                                stdout=subprocess.DEVNULL,
                                stderr=open(self.dir / ("sshd%d.log" % i), "ab"))
        host.procs.append(proc)
        if i < len(self.sshd):
            self.sshd[i] = proc
        else:
            self.sshd.append(proc)
        return proc

    def wait_answering(self, i: int, timeout: float = 30.0) -> None:
        """Until host ``i``'s sshd accepts connections (its banner); ``timeout`` bounds only a
        failure (an sshd starting on a loaded machine may take seconds)."""
        import socket
        deadline = time.monotonic() + timeout
        address = self.cluster.hosts[i].address
        while True:
            try:
                with socket.create_connection((address, PORT), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.sshd[i].poll() is not None:
                raise RuntimeError("sshd of %s did not answer (see %s)"
                                   % (self.name(i), self.dir / ("sshd%d.log" % i)))
            time.sleep(0.02)

    def kill_sshd(self, i: int) -> None:
        """The listening sshd and every session it runs for the portal go (the components,
        in their own sessions, stay)."""
        proc = self.sshd[i]
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(5)
        # the per-connection sshd processes: children of the listener, now orphans
        for pid in self.cluster.hosts[i].pids():
            with contextlib.suppress(OSError):
                if os.readlink("/proc/%d/exe" % pid) == SSHD:
                    os.kill(pid, signal.SIGKILL)

    # -- clean-up -------------------------------------------------------------------------------
    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for proc in self.sshd:
            with contextlib.suppress(Exception):
                proc.kill()
                proc.wait(5)
        # the account's processes started in the namespaces (kill_all) and outside (setsid -f
        # keeps the namespace: all of them are in it)
        self.cluster.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.made_account:
            subprocess.run(["userdel", "--remove", ACCOUNT], capture_output=True, check=False)


def main() -> int:
    """``make ssh-cluster``: SSH hosts in namespaces and a portal deploying onto them."""
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--racks", type=int, default=1)
    parser.add_argument("--port", type=int, default=int(os.environ.get("FRONT_PORT", "8080")))
    args, rest = parser.parse_known_args()
    try:
        hosts = SshHosts(args.hosts, racks=args.racks).__enter__()
    except pytest.skip.Exception as e:
        print("cannot start SSH hosts: %s" % e, file=sys.stderr)
        return 1
    state = hosts.dir / "portal"
    print("SSH hosts: %s" % ", ".join("%s %s" % (hosts.name(i), hosts.agent(i)) for i in range(args.hosts)),
          file=sys.stderr)
    print("datacenter: %s\ncredentials: %s" % (hosts.datacenter, hosts.credentials), file=sys.stderr)
    from tests.engines.tour import serve
    return serve(["--port", str(args.port), "--state-dir", str(state), "--datacenter",
                  str(hosts.datacenter), "--agent-credentials", str(hosts.credentials), *rest],
                 hosts.close)

if __name__ == "__main__":
    sys.exit(main())
