"""A refused login says what to do at the command line (issue 31): it names --user,
$CDDLM_PASSWORD, $CDDLM_TOKEN and the config file, not the wire's UsernameToken, Basic and
Bearer. Against a live portal with a users file; the commands' stdin is not a terminal."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli.helpers import ROOT, cddlm
from tests.conftest import LivePortal

PASSWORD = "alice-password-1"
BOB = "bob-password-22"


@pytest.fixture(scope="module")
def users_portal(tmp_path_factory):
    root = tmp_path_factory.mktemp("login")
    users = root / "users.json"
    for user, password in (("alice", PASSWORD), ("bob", BOB)):
        subprocess.run([sys.executable, "-m", "cddlm.cli", "user", "add", user, "--users", str(users)],
                       input=password + "\n", text=True, check=True, capture_output=True, cwd=ROOT)
    state = root / "state"
    state.mkdir()
    # --insecure: a root test run has no account to give --run-as; it listens on loopback
    lp = LivePortal(state, extra=["--users", str(users), "--insecure"]).start()
    yield lp, root
    lp.stop()


def ls(users_portal, *args: str, **env):
    lp, root = users_portal
    base = {"CDDLM_USER": None, "CDDLM_PASSWORD": None, "CDDLM_TOKEN": None, "CDDLM_CONFIG": None,
            "XDG_CONFIG_HOME": str(root / "no-config")}
    return cddlm("ls", *args, portal=lp.url, check=False, env={**base, **env})


def test_without_credentials_it_names_every_way_to_give_them(users_portal):
    r = ls(users_portal)
    assert r.returncode == 1
    line = r.stderr.strip()
    assert line.startswith("cddlm: the portal at %s wants to know who you are" % users_portal[0].url)
    for way in ("--user NAME", "$CDDLM_PASSWORD", "$CDDLM_TOKEN", "the config file",
                "~/.config/cddlm/client.toml"):
        assert way in line, line
    assert "WS-Security" not in line and "Bearer" not in line, line


def test_a_user_without_a_password_or_a_terminal_is_told_where_it_goes(users_portal):
    r = ls(users_portal, "--user", "alice")
    assert r.returncode == 1
    line = r.stderr.strip()
    assert line.startswith("cddlm: no password for alice, and no terminal to ask for it on"), line
    for way in ("$CDDLM_PASSWORD", "$CDDLM_TOKEN", "the config file"):
        assert way in line, line
    assert "WS-Security" not in line


def test_a_wrong_password_or_token_says_where_it_came_from(users_portal):
    # bob's: the portal counts failed sign-ins per user and place, and alice signs in below.
    # (One command's requests may spend bob's allowance: the refusal then says "too many";
    # either way the hint names the option and where the password came from.)
    r = ls(users_portal, "--user", "bob", CDDLM_PASSWORD="not-it")
    assert r.returncode == 1
    assert ("wrong password" in r.stderr or "too many failed sign-ins as bob" in r.stderr) and \
        "check --user bob and its password: $CDDLM_PASSWORD" in r.stderr, r.stderr
    r = ls(users_portal, CDDLM_TOKEN="cddlm_not-a-token")
    assert r.returncode == 1
    assert "revoked token" in r.stderr and "`cddlm token create NAME --users FILE`" in r.stderr \
        and "$CDDLM_TOKEN" in r.stderr, r.stderr


def test_the_right_password_lists(users_portal):
    r = ls(users_portal, "--user", "alice", CDDLM_PASSWORD=PASSWORD)
    assert r.returncode == 0 and r.stdout.strip() == "no applications", r.stderr
