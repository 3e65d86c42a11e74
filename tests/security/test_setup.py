"""Setting a portal up for a network: the users file through ``cddlm user`` and ``cddlm token``
(a running portal follows its changes), the refusal to start exposed, the client config file,
local mode as it was, and the store upgrade that gives existing applications an owner."""

from __future__ import annotations

import os
import stat

import pytest

from cddlm.app import exposure
from cddlm.config import Security, Settings
from cddlm.errors import ConfigurationError
from tests.security import wire
from tests.security.conftest import PASSWORDS, cddlm

LOOKUP = "<api:lookupRequest><api:name>nothing-here</api:name></api:lookupRequest>"


def test_user_and_token_commands_and_a_running_portal_follows_them(network_factory, tmp_path):
    net = network_factory()
    users = net.users_file
    assert stat.S_IMODE(os.stat(users).st_mode) == 0o600
    added = cddlm("user", "add", "dave", "--users", users, stdin="dave-secret-4444\n")
    assert added.returncode == 0 and "user dave added" in added.stdout
    again = cddlm("user", "add", "dave", "--users", users, stdin="dave-secret-4444\n")
    assert again.returncode == 1 and "exists already" in again.stderr
    short = cddlm("user", "add", "erin", "--users", users, stdin="short\n")
    assert short.returncode == 1 and "at least 8" in short.stderr
    listed = cddlm("user", "ls", "--users", users)
    assert listed.returncode == 0 and "dave" in listed.stdout and "admin" in listed.stdout
    assert "dave-secret" not in open(users).read()          # hashes only
    # the running portal knows dave now, without a restart
    r = wire.soap(net.url, LOOKUP, headers=wire.basic("dave", "dave-secret-4444"), source="127.0.0.31")
    assert r.fault[1] == "NoSuchApplicationFault"
    token = cddlm("token", "create", "dave", "--users", users, "--label", "ci").stdout.strip()
    assert wire.soap(net.url, LOOKUP, headers=wire.bearer(token)).fault[1] == "NoSuchApplicationFault"
    token_id = token.split("_")[1]
    assert token_id in cddlm("token", "ls", "dave", "--users", users).stdout
    assert cddlm("token", "rm", "dave", token_id, "--users", users).returncode == 0
    assert wire.soap(net.url, LOOKUP, headers=wire.bearer(token), source="127.0.0.31").status == 401
    assert cddlm("user", "rm", "dave", "--users", users).returncode == 0
    r = wire.soap(net.url, LOOKUP, headers=wire.basic("dave", "dave-secret-4444"), source="127.0.0.31")
    assert r.status == 401
    assert cddlm("user", "rm", "dave", "--users", users).returncode == 1


def test_an_exposed_portal_refuses_to_start(tmp_path):
    users = str(tmp_path / "users.json")
    assert cddlm("user", "add", "ops", "--role", "admin", "--users", users, stdin="ops-secret-1\n").returncode == 0
    state = str(tmp_path / "state")
    done = cddlm("portal", "serve", "--host", "0.0.0.0", "--port", "0", "--state-dir", state, timeout=60)
    assert done.returncode == 1 and "refusing to start" in done.stderr and "--users" in done.stderr
    assert "portal ready" not in done.stdout
    done = cddlm("portal", "serve", "--host", "0.0.0.0", "--port", "0", "--state-dir", state,
                 "--users", users, "--run-as", "nobody", timeout=60)
    assert done.returncode == 1 and "TLS" in done.stderr
    # what --insecure lets through, it says loudly
    warnings = exposure(Settings(host="0.0.0.0", security=Security(insecure=True)))
    assert warnings and "INSECURE" in warnings[0] and "run any command" in warnings[0]
    assert exposure(Settings(host="127.0.0.1")) == []              # local mode, as it was
    if os.geteuid() == 0:
        with pytest.raises(ConfigurationError, match="--run-as"):
            exposure(Settings(security=Security(users_file=users)))
        with pytest.raises(ConfigurationError, match="root"):
            exposure(Settings(security=Security(users_file=users, run_as="root")))


def test_the_client_config_file_must_keep_its_secret(net, tmp_path):
    folder = tmp_path / "cfg" / "cddlm"
    folder.mkdir(parents=True)
    config = folder / "client.toml"
    config.write_text('portal = "%s"\nuser = "alice"\npassword = "%s"\n' % (net.url, PASSWORDS["alice"]))
    config.chmod(0o644)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "cfg"), "CDDLM_PORTAL": "", "CDDLM_USER": "",
           "CDDLM_PASSWORD": ""}
    done = cddlm("ls", env=env)
    assert done.returncode == 1 and "chmod 600" in done.stderr
    config.chmod(0o600)
    done = cddlm("ls", env=env)
    assert done.returncode == 0, done.stderr
    # the environment wins over the file: bob's password with alice's name does not pass
    done = cddlm("ls", env=dict(env, CDDLM_PASSWORD=PASSWORDS["bob"]))
    assert done.returncode == 1 and "FailedAuthentication" in done.stderr


def test_local_mode_needs_no_credentials(live_portal):
    lp = live_portal()
    r = wire.soap(lp.url, "<api:createRequest/>")
    assert r.status == 200
    assert wire.request(lp.url.rsplit("/cddlm/", 1)[0] + "/api/v1/applications").status == 200


def test_upgrade_gives_existing_applications_to_the_local_admin(tmp_path):
    from sqlalchemy import text
    from cddlm.application import repository as repo
    from tests.conftest import schema_at
    with schema_at("sqlite:///%s" % (tmp_path / "old.db"), "0002") as (store, conn):
        conn.execute(text("INSERT INTO applications (id, name, state, desired, generation, created, "
                          "event_seq, client_token) VALUES ('urn:uuid:old', 'old', 'running', "
                          "'running', 0, 1.0, 1, 'tok')"))
    store.migrate()
    with store.read() as conn:
        old = repo.get_app(conn, "urn:uuid:old")
        assert old.owner == "admin" and repo.app_by_token(conn, "tok", "admin").id == old.id
        assert repo.app_by_token(conn, "tok", "bob") is None
    with store.write() as conn:        # names and tokens are per owner now
        repo.create_app(conn, 2.0, id=repo.new_id(), name="old", client_token="tok", owner="bob")
    store.dispose()
