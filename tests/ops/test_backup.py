"""Backup and upgrade (issue 31): ``cddlm portal backup`` copies a running portal's SQLite store,
``cddlm portal restore`` puts it back, a portal started on it serves its applications;
a store of an older schema is migrated at start, one of a newer program is refused saying
what to do."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys

from tests.cli.helpers import ROOT, cddlm, descriptor, env_for, process
from tests.conftest import LivePortal, kill_leftovers, schema_at


def serve(state, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", "0",
                           "--state-dir", str(state), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env_for(None), timeout=timeout)


def test_a_backup_taken_while_serving_is_restored_and_served(live_portal, tmp_path):
    lp = live_portal()
    cddlm("deploy", "examples/hello.xml", "--name", "kept-running", portal=lp.url)
    once = descriptor(tmp_path / "once.xml", process("job", ["sleep", "600"]))
    cddlm("deploy", str(once), "--name", "done-and-gone", portal=lp.url)
    cddlm("terminate", "done-and-gone", portal=lp.url)
    before = cddlm("ls", portal=lp.url).stdout
    copy = tmp_path / "backup" / "portal-backup.db"
    copy.parent.mkdir()
    made = cddlm("portal", "backup", "--state-dir", str(lp.state_dir), "--to", str(copy))
    assert made.stdout.startswith("backed up %s to %s: 2 applications, " % (
        lp.state_dir / "portal.db", copy)), made.stdout
    assert copy.stat().st_mode & 0o777 == 0o600
    again = cddlm("portal", "backup", "--state-dir", str(lp.state_dir), "--to", str(copy), check=False)
    assert again.returncode == 1 and "exists already" in again.stderr
    refused = cddlm("portal", "restore", "--state-dir", str(lp.state_dir), "--from", str(copy),
                    check=False)
    assert refused.returncode == 1 and refused.stderr == (
        "cddlm: a portal is running on %s (stop it before restoring its store)\n" % lp.state_dir)
    lp.stop()
    kill_leftovers(tmp_path)        # the machine that ran it is gone, as in a real restore

    state = tmp_path / "restored"
    done = cddlm("portal", "restore", "--state-dir", str(state), "--from", str(copy))
    assert done.stdout.startswith("restored %s from %s;" % (state / "portal.db", copy))
    restored = LivePortal(state).start()
    try:
        listed = cddlm("ls", portal=restored.url).stdout
        assert listed.splitlines()[0] == before.splitlines()[0]      # the header row
        names = {line.split()[0] for line in listed.splitlines()[1:]}
        assert names == {"kept-running", "done-and-gone"}, listed
        status = cddlm("status", "done-and-gone", portal=restored.url).stdout
        assert re.search(r"^state:\s+terminated$", status, re.M), status
    finally:
        restored.stop()
        kill_leftovers(tmp_path)
    # restored over a store: the one it replaced is kept beside it
    done = cddlm("portal", "restore", "--state-dir", str(state), "--from", str(copy))
    assert "(the store it replaced: %s.before-restore-" % (state / "portal.db") in done.stdout


def test_what_backup_says_of_postgresql_and_of_no_store(tmp_path):
    pg = cddlm("portal", "backup", "--db", "postgresql://u@127.0.0.1/test", "--to",
               str(tmp_path / "x.db"), check=False)
    assert pg.returncode == 1 and pg.stderr == (
        "cddlm: cddlm portal backup copies SQLite stores, not PostgreSQL's (back PostgreSQL up "
        "with its own tools: pg_dump --format=custom --file=FILE URL; restore with pg_restore "
        "--clean --if-exists --dbname=URL FILE)\n")
    none = cddlm("portal", "backup", "--state-dir", str(tmp_path / "nothing"), "--to",
                 str(tmp_path / "x.db"), check=False)
    assert none.returncode == 1 and "there is no store at" in none.stderr
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "nothing").exists()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    bad = cddlm("portal", "restore", "--state-dir", str(tmp_path / "s"), "--from", str(junk),
                check=False)
    assert bad.returncode == 1 and "is not a usable backup" in bad.stderr
    assert not (tmp_path / "s" / "portal.db").exists()


def test_an_older_store_is_migrated_at_start(tmp_path):
    """A store as release 0005 left it: the portal migrates it and shows its applications."""
    from sqlalchemy import text
    state = tmp_path / "state"
    state.mkdir()
    with schema_at("sqlite:///%s" % (state / "portal.db"), "0005") as (store, conn):
        conn.execute(text("INSERT INTO applications (id, name, state, desired, generation, "
                          "created, event_seq, owner) VALUES ('urn:uuid:0ld', 'from-0005', "
                          "'terminated', 'terminated', 0, 1.0, 1, 'admin')"))
    store.dispose()
    lp = LivePortal(state).start()
    try:
        assert "from-0005" in cddlm("ls", portal=lp.url).stdout
    finally:
        lp.stop()
    db = sqlite3.connect(str(state / "portal.db"))
    assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [("0008",)]
    db.close()


def test_a_store_of_a_newer_program_is_refused_and_left_alone(tmp_path):
    from cddlm.application.store import Store
    state = tmp_path / "state"
    state.mkdir()
    store = Store("sqlite:///%s" % (state / "portal.db"))
    store.migrate()
    store.dispose()
    db = sqlite3.connect(str(state / "portal.db"))
    with db:
        db.execute("UPDATE alembic_version SET version_num = '0042_from_the_future'")
    db.close()
    digest = hashlib.sha256((state / "portal.db").read_bytes()).hexdigest()
    r = serve(state)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines()[-1] == (
        "cddlm: the store sqlite:///%s was migrated by a newer cddlm (schema revision "
        "0042_from_the_future, which cddlm 0.1.0 does not know; it knows up to 0008): run that "
        "newer version on it, or restore a backup taken before the upgrade (cddlm portal backup) "
        "and start this version on that" % (state / "portal.db")), r.stderr
    assert hashlib.sha256((state / "portal.db").read_bytes()).hexdigest() == digest
