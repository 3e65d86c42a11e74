"""``cddlm portal serve`` (issue 13): its port checked, a clear message when it is in use, a
log in STATE/portal.log and on stderr, and a banner naming the store, the hosts and what it
re-adopted."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.cli.helpers import ROOT, banner, cddlm, env_for
from tests.conftest import LivePortal, kill_leftovers


def serve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "cddlm.cli", "portal", "serve", *args],
                       capture_output=True, text=True, cwd=ROOT, env=env_for(None), timeout=timeout)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        r = serve("--port", str(port), "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == ("cddlm: port %d on 127.0.0.1 is already in use, by another portal or "
                        "another program (stop it, choose another --port, or --port 0 for a free "
                        "one)\n" % port)


def test_ports_out_of_range_are_usage_errors(tmp_path):
    for bad in ("99999", "-1", "http"):
        r = serve("--port", bad, "--state-dir", str(tmp_path / "s"))
        assert r.returncode == 2 and "argument --port" in r.stderr, r.stderr


def test_banner_log_file_and_readoption(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    lp = LivePortal(state).start()
    try:
        cddlm("deploy", "examples/hello.xml", "--name", "kept", "--settle", "0", portal=lp.url)
    except BaseException:
        kill_leftovers(tmp_path)
        raise
    finally:
        lp.stop()
    log = (state / "portal.log").read_text()
    assert "portal ready at %s" % lp.url in log and "store:       sqlite:///" in log
    assert "stopped; the components it started keep running" in log
    lp2 = LivePortal(state).start()
    try:
        printed = banner(lp2)
        assert printed[0].startswith("cddlm 0.") and printed[0].endswith(" portal")
        assert "  store:       sqlite:///%s" % (state / "portal.db") in printed
        assert "  hosts:       localhost (local)" in printed
        assert "  re-adopted:  2 running components of 1 application" in printed
        assert "state:   running" in cddlm("status", "kept", portal=lp2.url).stdout
        cddlm("terminate", "kept", portal=lp2.url)
    finally:
        lp2.stop()
        kill_leftovers(tmp_path)
    assert (state / "portal.log").read_text().count("portal ready at") == 2


def test_log_level_sends_the_log_to_stderr_too(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    lp = LivePortal(state, extra=["--log-level", "info"]).start()
    lp.stop()
    stderr = lp.log_path.read_text()
    assert " INFO cddlm.portal: portal ready at " in stderr


def test_the_portal_log_stays_private_across_rotations(tmp_path):
    """STATE/portal.log names every tenant's applications: 0600, whatever an older portal left
    (tests/hostile/test_swapped_directories.py reads it as another account on a live portal)."""
    import logging
    import stat
    from cddlm.cli.portal import private_log
    path = tmp_path / "portal.log"
    for name in ("portal.log", "portal.log.2"):
        (tmp_path / name).write_text("old\n")
        (tmp_path / name).chmod(0o644)
    handler = private_log(str(path), max_bytes=200, keep=3)
    logger = logging.getLogger("test.private-log")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for n in range(40):
            logger.warning("line %d %s", n, "x" * 40)
    finally:
        logger.removeHandler(handler)
        handler.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["portal.log", "portal.log.1", "portal.log.2", "portal.log.3"]
    for name in names:
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
