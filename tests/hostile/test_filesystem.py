"""The file system as a component sees it, and where probes may go (issue 16; issue 9,
"Hardening what exists")."""

from __future__ import annotations

import os
import stat
import time

from tests.hostile.conftest import NATIVE


def _victim(tmp) -> tuple:
    folder = tmp / "victim"
    folder.mkdir(exist_ok=True)
    target = folder / "data.txt"
    target.write_text("precious")
    os.chmod(target, 0o600)
    return folder, target


def _untouched(target) -> None:
    assert target.read_text() == "precious"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_terminate_does_not_delete_through_a_link_a_component_planted(live, tmp_path):
    folder, target = _victim(tmp_path)
    body = ('<application xmlns="%s">'
            '<component name="f" type="file"><attribute name="path">keep/data.txt</attribute>'
            '<attribute name="content">mine</attribute></component>'
            '<component name="swap" type="process"><attribute name="argv"><item>sh</item><item>-c</item>'
            '<item>rm -rf "$CDDLM_WORKDIR/../keep" &amp;&amp; ln -s %s "$CDDLM_WORKDIR/../keep" '
            '&amp;&amp; exec sleep 600</item></attribute></component></application>' % (NATIVE, folder))
    app = live.create()
    assert live.initialize(app, NATIVE, body=body).fault() is None
    live.run(app)
    deadline = time.monotonic() + 10
    while not (live.app_dir(app) / "keep").is_symlink():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # the file component now fails (its file is gone behind a link); terminate removes nothing
    live.wait_state(app, "failed", "running")
    assert live.terminate(app).fault() is None
    live.wait_state(app, "terminated")
    _untouched(target)
    live.after()


def test_a_planted_link_is_replaced_never_written_through(live, tmp_path):
    folder, target = _victim(tmp_path)
    body = ('<application xmlns="%s"><component name="f" type="file"><attribute name="path">out.txt'
            '</attribute><attribute name="content">written by the portal</attribute>'
            '<attribute name="mode">0666</attribute></component></application>' % NATIVE)
    # another application's process plants a link where this one's file will be written
    app = live.create()
    app_dir = live.app_dir(app)
    app_dir.mkdir(parents=True)
    os.symlink(target, app_dir / "out.txt")
    os.symlink(target, app_dir / "out.txt.cddlm-tmp")     # where the file is first written
    assert live.initialize(app, NATIVE, body=body).fault() is None
    live.wait_state(app, "initialized")
    _untouched(target)
    written = app_dir / "out.txt"
    assert not written.is_symlink() and written.read_text() == "written by the portal"
    # a link in place of a directory on the way is refused
    second = live.create()
    elsewhere = live.app_dir(second)
    elsewhere.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(folder, elsewhere)
    assert live.initialize(second, NATIVE, body=body.replace("out.txt", "data.txt")).fault() is None
    live.wait_state(second, "failed")
    _untouched(target)
    assert not (folder / "data.txt.cddlm-tmp").exists()
    live.after()


def test_probes_and_readiness_only_speak_http_and_tcp_where_the_policy_allows(live):
    app = live.create()
    for target in ("file:///etc/passwd", "data:text/plain,ok", "gopher://127.0.0.1/"):
        probe = ('<application xmlns="%s"><component name="p" type="probe"><attribute name="http">%s'
                 '</attribute></component></application>' % (NATIVE, target))
        answer = live.initialize(app, NATIVE, body=probe)
        assert answer.fault() == "DescriptorFault" and "not an http or https URL" in answer.description()
        ready = ('<application xmlns="%s"><component name="w" type="process"><attribute name="argv">'
                 '<item>sleep</item><item>60</item></attribute><attribute name="readiness">'
                 '<item name="http">%s</item></attribute></component></application>' % (NATIVE, target))
        answer = live.initialize(app, NATIVE, body=ready)
        assert answer.fault() == "DescriptorFault", answer.data[:400]
    assert live.state_of(app) == "instantiated"
    # an address outside the probe networks (loopback and the private ranges) is not dialled
    outside = ('<application xmlns="%s"><component name="p" type="probe"><attribute name="tcp">'
               '192.0.2.1:22</attribute></component></application>' % NATIVE)
    assert live.initialize(app, NATIVE, body=outside).fault() is None
    live.run(app)
    started = time.monotonic()
    live.wait_state(app, "failed", timeout=10)
    assert time.monotonic() - started < 5
    info = live.prop(app, "api:terminationInfo").text("//api:terminationInfo")
    assert "probe refused" in info and "not in a network" in info
    live.after()
