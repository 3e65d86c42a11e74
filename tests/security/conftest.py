"""A portal as it runs on a network: users (alice and bob, users; carol, an administrator), tokens,
components run as OS accounts of their own (``cddlmt-{user}``, created here when the tests run
as root), on loopback, optionally over TLS."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT, LivePortal, kill_leftovers
from tests.security import wire

PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-22", "carol": "carol-secret-333"}
ACCOUNT_PATTERN = "cddlmt-{user}"


def cddlm(*args: str, stdin: str | None = None, env: dict | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cddlm.cli", *args], input=stdin, text=True,
                          capture_output=True, cwd=ROOT, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def accounts(names) -> str | None:
    """Make sure the accounts ``cddlmt-NAME`` exist (creating them as root with useradd);
    the reason they cannot, or None."""
    if os.geteuid() != 0:
        return "not root: the portal cannot switch accounts (--run-as needs root)"
    if shutil.which("useradd") is None:
        return "useradd is not installed"
    for name in names:
        account = ACCOUNT_PATTERN.replace("{user}", name)
        if subprocess.run(["id", "-u", account], capture_output=True).returncode == 0:
            continue
        done = subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                               "--shell", "/usr/sbin/nologin", account], capture_output=True, text=True)
        if done.returncode != 0:
            return "useradd %s failed: %s" % (account, done.stderr.strip())
    return None


@dataclass
class Network:
    """A portal with users; ``url`` is its endpoint, ``db`` its SQLite file."""
    portal: LivePortal
    users_file: str
    digest: dict[str, str]              # user -> PasswordDigest secret
    tokens: dict[str, str]              # user -> bearer token
    run_as: bool                        # components run as cddlmt-{user}
    folder: Path
    ca: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.portal.url

    @property
    def base(self) -> str:
        return self.url.rsplit("/cddlm/portal", 1)[0]

    @property
    def db(self) -> str:
        return str(self.portal.state_dir / "portal.db")

    def env(self, user: str) -> dict:
        env = {"CDDLM_PORTAL": self.url, "CDDLM_USER": user, "CDDLM_PASSWORD": PASSWORDS[user],
               "XDG_CONFIG_HOME": str(self.folder / "no-config")}
        if self.ca:
            env["CDDLM_CA_FILE"] = self.ca
        return env

    def log(self) -> str:
        self.portal.log.flush()
        return Path(self.portal.log.name).read_text(errors="replace")


def make_users(folder: Path) -> tuple[str, dict, dict]:
    """The users file (test_users_cli.py drives the same through the ``cddlm user`` command)."""
    from cddlm.application.users import UsersFile
    users = UsersFile(str(folder / "users.json"))
    digest, tokens = {}, {}
    for name, role in (("alice", "user"), ("bob", "user"), ("carol", "admin")):
        digest[name] = users.add(name, PASSWORDS[name], role, digest=True)
        tokens[name] = users.new_token(name, "tests")
    return users.path, digest, tokens


@pytest.fixture(scope="module")
def network_factory():
    """Start portals with users; every one stops (and its components die) at the end."""
    made: list[Network] = []
    base = Path(tempfile.mkdtemp(prefix="cddlm-security-"))
    base.chmod(0o711)    # the components' accounts must pass through it (not list it)

    def make(extra_args: list[str] = (), tls=None, client_ca: bool = False) -> Network:
        folder = base / ("portal-%d" % len(made))
        folder.mkdir()
        folder.chmod(0o711)
        users, digest, tokens = make_users(folder)
        why_not = accounts(("alice", "bob", "carol"))
        args = ["--users", users] + list(extra_args)
        if why_not is None:
            args += ["--run-as", ACCOUNT_PATTERN]
        else:       # components run as the portal's own account: refused without it
            args += ["--insecure"]
        ca = None
        if tls is not None:
            args += ["--tls-cert", tls.server_cert, "--tls-key", tls.server_key]
            if client_ca:
                args += ["--tls-client-ca", tls.ca_cert]
            ca = tls.ca_cert
        state = folder / "state"
        state.mkdir()
        lp = LivePortal(state, extra=args).start()
        net = Network(lp, users, digest, tokens, why_not is None, folder, ca)
        made.append(net)
        return net

    yield make
    for net in made:
        net.portal.stop()
    kill_leftovers(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def net(network_factory) -> Network:
    return network_factory()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.pki import make_pki
    folder = tmp_path_factory.mktemp("pki")
    return make_pki(folder)


def auth(user: str) -> dict:
    return wire.basic(user, PASSWORDS[user])
