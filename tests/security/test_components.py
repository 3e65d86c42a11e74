"""What a tenant's descriptor and its running components may try on the portal's host: paths
that leave the application's directory, links and FIFOs planted for the portal (root) to follow,
and reading another tenant's files. Components run as the owner's account (``cddlmt-{user}``),
never as root, in directories only that account can read."""

from __future__ import annotations

import json
import os
import pwd
import time
import uuid

import pytest

from cddlm.client import Credentials, Portal
from tests.security import wire
from tests.security.conftest import PASSWORDS, auth


def client(net, user: str) -> Portal:
    return Portal(net.url, credentials=Credentials(user, PASSWORDS[user]), failover=False)


def descriptor(*components: str) -> str:
    return '<application xmlns="urn:cddlm:lang:components:1">%s</application>' % "".join(components)


def process(name: str, argv: list[str], **attrs: str) -> str:
    items = "".join("<item>%s</item>" % a for a in argv)
    more = "".join('<attribute name="%s">%s</attribute>' % kv for kv in attrs.items())
    return ('<component name="%s" type="process"><attribute name="argv">%s</attribute>%s</component>'
            % (name, items, more))


def file(name: str, path: str, content: str = "x") -> str:
    return ('<component name="%s" type="file"><attribute name="path">%s</attribute>'
            '<attribute name="content">%s</attribute></component>' % (name, path, content))


def deploy(portal: Portal, text: str, run: bool = True, want: str = "running"):
    app = portal.create(name="c-%s" % uuid.uuid4().hex[:8])
    app.initialize(wire.NATIVE, body=wire.fragment(text))
    if run:
        app.run()
    return app, app.wait_for(want, timeout=30)


def test_paths_that_leave_the_application_directory_fail_cleanly(net, tmp_path):
    alice = client(net, "alice")
    outside = tmp_path / ("escape-%s" % uuid.uuid4().hex)
    cases = [
        (file("f", "../../../../../../../../%s" % str(outside).lstrip("/")), False, "must stay inside"),
        (file("f", str(outside)), False, "must stay inside"),
        (process("p", ["sleep", "60"], cwd="../../../../../../../.."), False, "leaves the application"),
        (process("p", ["sleep", "60"], cwd="/"), False, "absolute path"),
    ]
    for text, run, why in cases:      # components are deployed (and refused) at initialize
        app, state = deploy(alice, descriptor(text), run=run, want="failed")
        assert state == "failed", text
        info = app.ping()
        assert why in (info["stateInfo"] or "") + str(info["terminationInfo"]), (text, info)
        app.terminate()
    assert not outside.exists()


def test_links_and_fifos_planted_for_the_portal_are_not_followed(net, tmp_path):
    """A component replaces its own log with a link to /etc/passwd, its stderr with a FIFO, and
    the directory of a file component with a link to a folder of the portal's host; the
    portal's reads and its clean-up at terminate go nowhere near them."""
    target = tmp_path / "portal-owned"
    target.mkdir()
    (target / "victim.txt").write_text("the portal host's file")
    script = ("sleep 0.3; rm -f stdout.log stderr.log; ln -s /etc/passwd stdout.log; mkfifo stderr.log; "
              "rm -rf ../d; ln -s %s ../d; touch planted; sleep 600" % target)
    alice = client(net, "alice")
    app, state = deploy(alice, descriptor(file("f", "d/victim.txt", "tenant's"),
                                          process("planter", ["sh", "-c", script])))
    assert state == "running"
    deadline = time.monotonic() + 30
    workdir = app.resolve("planter/workdir")
    while not os.path.exists(os.path.join(workdir, "planted")) and time.monotonic() < deadline:
        time.sleep(0.1)
    # (a slow machine that had not planted them yet proved nothing: the traps are in place)
    assert os.path.exists(os.path.join(workdir, "planted")), "the planter never planted"
    started = time.monotonic()
    logs = wire.request(net.base + "/api/v1/applications/%s/logs?path=planter" % app.id,
                        headers=auth("alice"))
    assert logs.status == 200 and time.monotonic() - started < 5        # no FIFO blocked it
    assert "root:" not in logs.body.decode()                             # no link was followed
    assert json.loads(logs.body)["stdout"] == []
    app.terminate("test over")                   # the file component's clean-up: not through the link
    assert app.wait_for("terminated", timeout=30) == "terminated"
    assert (target / "victim.txt").read_text() == "the portal host's file"
    app.destroy()


def uid_of(pid: int) -> int:
    for line in open("/proc/%d/status" % pid):
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


def test_components_run_as_their_owners_account_and_cannot_read_each_other(net):
    if not net.run_as:
        pytest.skip("components cannot run as accounts of their own here (not root, or no useradd)")
    alice, bob = client(net, "alice"), client(net, "bob")
    theirs, state = deploy(alice, descriptor(file("f", "conf/secret.txt", "alice only"),
                                             process("s", ["sleep", "600"])))
    assert state == "running"
    pid = next(h["pid"] for h in theirs.ping()["health"] if h["path"] == "s")
    assert uid_of(pid) == pwd.getpwnam("cddlmt-alice").pw_uid != 0
    secret = theirs.resolve("f/location")
    app_dir = os.path.dirname(os.path.dirname(secret))
    assert os.stat(app_dir).st_mode & 0o777 == 0o700
    assert open(secret).read() == "alice only"                    # (the test is root)
    script = "cat %s; ls %s; echo home=$HOME user=$USER; sleep 600" % (secret, app_dir)
    mine, state = deploy(bob, descriptor(process("spy", ["sh", "-c", script])))
    assert state == "running"
    deadline = time.monotonic() + 10
    lines: dict = {}
    while time.monotonic() < deadline:
        r = wire.request(net.base + "/api/v1/applications/%s/logs?path=spy" % mine.id, headers=auth("bob"))
        lines = json.loads(r.body)
        if any("home=" in line for line in lines["stdout"]):
            break
        time.sleep(0.2)
    assert "alice only" not in "\n".join(lines["stdout"])
    assert "Permission denied" in "\n".join(lines["stderr"]), lines
    assert "user=cddlmt-bob" in "\n".join(lines["stdout"])
    spy = next(h["pid"] for h in mine.ping()["health"] if h["path"] == "spy")
    assert uid_of(spy) == pwd.getpwnam("cddlmt-bob").pw_uid
    for app in (theirs, mine):
        app.terminate()
