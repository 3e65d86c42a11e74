"""What the portal (root) reads for a tenant's readiness checks, and what it leaves readable
(issue 27, item 5). Two tenants whose components run as accounts of their own (``--users``,
``--run-as``, as tests/security sets them up): alice's component renames a directory above
another of her components and links it to bob's application directory (or to a root-only
folder). Her readiness checks must then see nothing there, so that ``running`` or ``failed``
tells her nothing of bob's stdout (a regex oracle) nor of what exists where only root may look;
and ``STATE/portal.log``, which names every tenant's applications and actions, is its owner's
only (0600), from the start, after a restart and whatever mode an older portal left it with."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import kill_leftovers
from tests.hostile.conftest import NATIVE, Portal
from tests.security.conftest import ACCOUNT_PATTERN, PASSWORDS, accounts, make_users

SECRET = "BOBSECRET=hunter2"


class Tenants(Portal):
    """A portal with users; every call is made as ``self.user``."""
    user = "bob"

    def post(self, to, body, headers="", timeout=30.0, http_headers=None, raw=None):
        sent = dict(http_headers or {"Content-Type": "text/xml; charset=utf-8"})
        sent["Authorization"] = "Basic " + base64.b64encode(
            ("%s:%s" % (self.user, PASSWORDS[self.user])).encode()).decode()
        return super().post(to, body, headers, timeout, sent, raw)

    @contextlib.contextmanager
    def as_user(self, user: str):
        before, self.user = self.user, user
        try:
            yield self
        finally:
            self.user = before


@pytest.fixture(scope="module")
def tenants():
    why_not = accounts(("alice", "bob", "carol"))
    if why_not:
        pytest.skip("components cannot run as accounts of their own: %s" % why_not)
    base = Path(tempfile.mkdtemp(prefix="cddlm-swap-"))
    base.chmod(0o711)                 # the components' accounts pass through it
    users, _, _ = make_users(base)
    state = base / "state"
    state.mkdir()
    for name in ("portal.log", "portal.log.1"):   # as an older portal left them
        (state / name).write_text("2026-01-01 INFO cddlm.portal: an older portal's line\n")
        (state / name).chmod(0o644)
    p = Tenants(base, ["--users", users, "--run-as", ACCOUNT_PATTERN]).start()
    try:
        # bob's application: its component says a secret on its stdout, readable by bob only
        body = ('<application xmlns="%s"><component name="web" type="process"><attribute name="argv">'
                '<item>sh</item><item>-c</item><item>echo %s; exec sleep 600</item></attribute>'
                '</component></application>' % (NATIVE, SECRET))
        p.victim = p.deploy(body, name="bobs")
        p.victim_before = p.victim_facts()
        p.bob_dir = p.app_dir(p.victim)
        deadline = time.monotonic() + 10
        while SECRET not in _text(p.bob_dir / "web" / "stdout.log"):
            assert time.monotonic() < deadline, "bob's component said nothing"
            time.sleep(0.05)
        # a folder only root may read, holding web/flag
        p.private = base / "private"
        (p.private / "web").mkdir(parents=True)
        (p.private / "web" / "flag").write_text("root's")
        p.private.chmod(0o700)
        yield p
    finally:
        p.stop()
        kill_leftovers(base)
        shutil.rmtree(base, ignore_errors=True)


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _swapper(ready: str, target: Path) -> str:
    """alice's application: ``site/web`` waits for its readiness condition while ``sib``
    renames ``site`` and links it to ``target``."""
    swap = 'sleep 0.5; mv ../site ../site.old &amp;&amp; ln -s %s ../site &amp;&amp; exec sleep 600' % target
    return ('<application xmlns="%s"><component name="site" type="compound">'
            '<component name="web" type="process"><attribute name="argv"><item>sleep</item>'
            '<item>600</item></attribute><attribute name="readiness">%s<item name="timeout">4</item>'
            '</attribute></component></component><component name="sib" type="process">'
            '<attribute name="argv"><item>sh</item><item>-c</item><item>%s</item></attribute>'
            '</component></application>' % (NATIVE, ready, swap))


def _outcome(p: Tenants, app: str) -> tuple[str, str]:
    state = p.wait_state(app, "running", "failed", timeout=30)
    info = p.prop(app, "api:terminationInfo").text("//api:terminationInfo")
    return state, re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "T", info)     # times aside


def test_a_directory_swapped_for_a_link_is_no_oracle(tenants):
    p = tenants
    cases = {"log right": '<item name="log">%s</item>' % SECRET,
             "log wrong": '<item name="log">BOBSECRET=wrong</item>',
             "file right": '<item name="file">flag</item>',
             "file wrong": '<item name="file">noflag</item>'}
    apps = {}
    with p.as_user("alice"):
        for case, ready in cases.items():
            target = p.bob_dir if case.startswith("log") else p.private
            apps[case] = p.create()
            answer = p.initialize(apps[case], NATIVE, body=_swapper(ready, target))
            assert answer.fault() is None, answer.data[:600]
        for app in apps.values():
            p.run(app)
        seen = {case: _outcome(p, app) for case, app in apps.items()}
        for case, app in apps.items():       # the swap did happen, as the attacker meant
            assert (p.app_dir(app) / "site").is_symlink(), case
    for case, (state, info) in seen.items():
        assert state == "failed", (case, state, info)
        assert "not ready after 4s" in info, (case, info)
    assert seen["log right"][1].replace(SECRET, "P") == seen["log wrong"][1].replace("BOBSECRET=wrong", "P")
    assert seen["file right"][1].replace("flag", "F") == seen["file wrong"][1].replace("noflag", "F")
    # bob's log and root's folder are as they were
    assert _text(p.bob_dir / "web" / "stdout.log") == SECRET + "\n"
    assert not (p.bob_dir / "web" / "stdout.log.1").exists()
    assert sorted(os.listdir(p.private / "web")) == ["flag"]
    with p.as_user("alice"):
        for app in apps.values():
            assert p.terminate(app).fault() is None
    p.after()


def test_the_portal_log_is_its_owners_only(tenants):
    p = tenants
    log = p.state / "portal.log"
    spy = ('<application xmlns="%s"><component name="spy" type="process"><attribute name="argv">'
           '<item>sh</item><item>-c</item><item>cat "$CDDLM_WORKDIR/../../../../../portal.log" '
           '"$CDDLM_WORKDIR/../../../../../portal.log.1"; echo done; exec sleep 600</item>'
           '</attribute></component></application>' % NATIVE)
    for restarted in (False, True):
        for name in ("portal.log", "portal.log.1"):
            mode = stat.S_IMODE((p.state / name).stat().st_mode)
            assert mode == 0o600, "%s has mode %o (restarted: %s)" % (name, mode, restarted)
        assert "bobs" in log.read_text()      # what it would give away: bob's application
        with p.as_user("alice"):
            app = p.deploy(spy)
            out = p.app_dir(app) / "spy"
            deadline = time.monotonic() + 10
            while "done" not in _text(out / "stdout.log"):
                assert time.monotonic() < deadline, "the spy said nothing"
                time.sleep(0.05)
            assert "cddlm" not in _text(out / "stdout.log"), _text(out / "stdout.log")[:300]
            assert _text(out / "stderr.log").count("Permission denied") == 2, _text(out / "stderr.log")
            assert p.terminate(app).fault() is None
        if not restarted:
            p.stop()
            p.start(port=p.port)
    p.after()
