"""Whose account a portal's components run as (issue 27, item 4). A portal with users whose
components run as its own account lets any user become an administrator: a component reads
``--users FILE`` from ``/proc/$PPID/cmdline``, rewrites its owner's role, and the portal reloads
the file. Such a portal refuses to start, as root or not, unless ``--insecure`` (then it warns);
so does a root portal whose users file the components' account could replace."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, kill_leftovers, ready_url
from tests.security.conftest import make_users

REFUSAL = "components would run as"


def nobody() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this machine has no account nobody to run a portal as")


@pytest.fixture
def folder():
    """A folder in /tmp the unprivileged account owns (as root: nobody's; else the tests')."""
    path = Path(tempfile.mkdtemp(prefix="cddlm-account-"))
    path.chmod(0o711)       # components of another account pass through it (--run-as checks)
    if os.geteuid() == 0:
        os.chown(path, nobody().pw_uid, nobody().pw_gid)
    yield path
    kill_leftovers(path)
    shutil.rmtree(path, ignore_errors=True)


def serve(folder: Path, *args: str, unprivileged: bool = True) -> subprocess.Popen:
    """``cddlm portal serve`` on a free port with a state dir in ``folder``; as root and
    ``unprivileged``, as nobody (``setpriv``), else as the tests' own account."""
    argv = [sys.executable, "-m", "cddlm.cli", "portal", "serve", "--port", "0",
            "--state-dir", str(folder / "state"), *args]
    if unprivileged and os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is not installed: cannot run a portal as nobody")
        argv = ["setpriv", "--reuid", "nobody", "--regid", str(nobody().pw_gid),
                "--clear-groups", "--"] + argv
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, HOME=str(folder)))


@contextlib.contextmanager
def running(proc: subprocess.Popen):
    """A started portal: its URL, stopped (by its pid) at the end; its stderr after that."""
    try:
        yield ready_url(proc, 60)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)


def refusal(proc: subprocess.Popen) -> bytes:
    """What a portal that must refuse to start says on stderr (a portal that starts instead
    is stopped, and the test fails)."""
    try:
        with running(proc):
            pass
    except RuntimeError:      # it ended without becoming ready
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
        assert proc.wait(20) == 1, err
        return err
    raise AssertionError("the portal started: %s" % proc.stderr.read().decode(errors="replace"))


def users_in(folder: Path) -> str:
    path, _, _ = make_users(folder)
    if os.geteuid() == 0:
        os.chown(path, nobody().pw_uid, nobody().pw_gid)
    return path


def test_a_portal_whose_components_would_run_as_itself_refuses_users(folder):
    users = users_in(folder)
    err = refusal(serve(folder, "--users", users))
    assert b"refusing to start" in err and REFUSAL.encode() in err and b"--run-as" in err, err
    assert b"--insecure" in err
    # with --insecure it starts, saying loudly what it lets through
    proc = serve(folder, "--users", users, "--insecure")
    with running(proc) as url:
        assert url.startswith("http://127.0.0.1:")
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert b"INSECURE" in err and REFUSAL.encode() in err, err


def test_its_own_account_named_with_run_as_is_no_way_around(folder):
    if os.geteuid() != 0:
        pytest.skip("--run-as with another account needs root; the refusal above covers this")
    users = users_in(folder)
    err = refusal(serve(folder, "--users", users, "--run-as", "nobody"))
    assert REFUSAL.encode() in err, err


def test_a_users_file_the_components_could_replace_is_refused(folder):
    """As root with --run-as nobody: a users file in a folder others may write (not sticky) is
    one the components could replace with their own; refused, and accepted once private."""
    if os.geteuid() != 0:
        pytest.skip("needs root: components run as another account only then")
    os.chown(folder, 0, 0)
    folder.chmod(0o711)             # nobody passes through to the components' directories
    shared = folder / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    users = str(Path(make_users(shared)[0]))
    err = refusal(serve(folder, "--users", users, "--run-as", "nobody", unprivileged=False))
    assert b"refusing to start" in err, err
    assert ("%s has mode 777" % shared).encode() in err and b"go-w" in err, err
    shared.chmod(0o755)
    proc = serve(folder, "--users", users, "--run-as", "nobody", unprivileged=False)
    with running(proc) as url:
        assert url
    proc.stdout.close()
    proc.stderr.close()
