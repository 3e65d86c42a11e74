"""The store's part in security, on SQLite and PostgreSQL: a nonce is accepted once (so portals
sharing a store refuse each other's replays) and forgotten when too old to matter; quotas are
counted in the transaction that would exceed them; names and client tokens are per owner. And
the users file as a running portal reads it: a broken edit keeps the last good version."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from sqlalchemy.exc import IntegrityError

from cddlm.application import repository as repo, tenancy
from cddlm.application.store import Store
from cddlm.application.tenancy import Principal
from cddlm.application.users import Directory, UsersFile
from cddlm.config import Quotas
from cddlm.errors import BadArgument, QuotaExceeded


def make(db_url) -> Store:
    store = Store(db_url)
    store.migrate()
    return store


def test_a_nonce_is_accepted_once_and_forgotten_when_stale(db_url):
    store = make(db_url)
    with store.write() as conn:
        assert repo.remember_nonce(conn, "n1", 100.0) is True
        assert repo.remember_nonce(conn, "n1", 100.0) is False      # the same transaction goes on
        assert repo.remember_nonce(conn, "n2", 300.0) is True
    with store.write() as conn:
        assert repo.remember_nonce(conn, "n1", 100.0) is False
        assert repo.forget_nonces(conn, 200.0) == 1
        assert repo.remember_nonce(conn, "n1", 400.0) is True       # too old to be replayed now
    store.dispose()


def test_quotas_and_names_per_owner(db_url):
    store = make(db_url)
    bob, quotas = Principal("bob"), Quotas(applications=1)
    with store.write() as conn:
        tenancy.check_applications(conn, bob, quotas)
        repo.create_app(conn, 1.0, id=repo.new_id(), name="web", owner="bob", client_token="t")
        repo.create_app(conn, 1.0, id=repo.new_id(), name="web", owner="alice", client_token="t")
    with pytest.raises(QuotaExceeded):
        with store.write() as conn:
            tenancy.check_applications(conn, bob, quotas)
    with store.write() as conn:
        tenancy.check_applications(conn, Principal("carol", admin=True), quotas)
    with pytest.raises(IntegrityError):
        with store.write() as conn:
            repo.create_app(conn, 2.0, id=repo.new_id(), name="web", owner="bob")
    with store.read() as conn:
        assert repo.app_by_name(conn, "web", "alice").owner == "alice"
        assert repo.app_by_token(conn, "t", "bob").owner == "bob"
        assert repo.count_by_state(conn, "bob") == {"instantiated": 1}
    store.dispose()


def test_a_quota_holds_when_creates_race(db_url):
    # several threads (as several portals on one PostgreSQL store would) create at once: the
    # count and the insert are one step per owner, so the quota is never passed, not even by one
    store = make(db_url)
    bob, quotas = Principal("bob"), Quotas(applications=3)
    gate, created, refused = threading.Barrier(8), [], []

    def create() -> None:
        gate.wait()
        try:
            with store.write() as conn:
                tenancy.check_applications(conn, bob, quotas)
                time.sleep(0.05)        # widen the window between the count and the insert
                repo.create_app(conn, 1.0, id=repo.new_id(), name=None, owner="bob")
            created.append(1)
        except QuotaExceeded:
            refused.append(1)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert (len(created), len(refused)) == (3, 5)
    with store.read() as conn:
        assert repo.count_by_state(conn, "bob") == {"instantiated": 3}
    store.dispose()


def test_the_portal_keeps_the_last_good_users_file(tmp_path):
    path = str(tmp_path / "users.json")
    UsersFile(path).add("alice", "alice-secret-1")
    users = Directory(path)
    assert users.check_password("alice", "alice-secret-1") is not None
    assert users.check_password("alice", "wrong-password") is None
    with open(path, "w") as f:
        f.write("{not json")
    os.utime(path, ns=(1, 1))
    assert users.check_password("alice", "alice-secret-1") is not None   # the last good version
    with open(path, "w") as f:
        json.dump({"version": 1, "users": {}}, f)
    assert users.check_password("alice", "alice-secret-1") is None       # a good edit lands
    with pytest.raises(BadArgument):
        Directory(str(tmp_path / "missing.json"))
