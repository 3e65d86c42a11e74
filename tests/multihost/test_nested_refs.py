"""References into nested values across hosts (``db/env/KEY``, ``cfg/argv/0``, ``db/ports/0``):
the front portal sees that ``db/env/KEY``'s component is ``db``, so a share with a reference
to a nested value of a component on another host carries the value (a literal the descriptor
gave; a value only its host knows, asked of that host's portal), and one to a component of
the share itself stays lazy for the host portal, which resolves it there. The cluster of
test_references.py: the host portal h1 and the front's own host f1."""

from __future__ import annotations

import time

import pytest

from cddlm.application.enactment.remote import FOREIGN_WAIT
from cddlm import ns
from cddlm.client import Portal, PortalFault
from tests.multihost.test_delegation import environ, host_portal_client
from tests.multihost.test_references import cluster, deployed  # noqa: F401 (the fixture)

SECRET = "Zq9nestedCross62"


def process(name: str, host: str, env: dict[str, str], argv: str = "sleep 600") -> str:
    items = "".join("<item>%s</item>" % a for a in argv.split())
    env_items = "".join('<item name="%s">%s</item>' % kv for kv in env.items())
    return ('<component name="%s" type="process"><attribute name="argv">%s</attribute>'
            '<attribute name="env">%s</attribute><attribute name="host">%s</attribute>'
            '</component>' % (name, items, env_items, host))


def ref(target: str) -> str:
    return '<ref path="%s" lazy="true"/>' % target


# the first stage (db on h1, cfg on f1: each listens on a port) runs before the second, which
# reads their values
NESTED = ('<application xmlns="urn:cddlm:lang:components:1"><component name="app" type="sequence">'
          '<component name="first" type="compound">%s%s</component>'
          '<component name="second" type="compound">%s%s%s</component>'
          '</component></application>') % (
    process("db", "h1", {"KEY": "db-key",
                         "ONLY_ON_H1": '<property name="db.where" lazy="true" default="told-on-h1"/>'},
            "python3 -m http.server 0 --bind 127.0.0.1"),
    process("cfg", "f1", {"KEY": "f1-key", "PASS": SECRET},
            "python3 -m http.server 0 --bind 127.0.0.1").replace(
        '<item name="PASS">', '<item name="PASS" secret="true">'),
    process("mate", "h1", {"KEY": "mate-key"}),
    process("peer", "h1", {"FROM_F1": ref("app/first/cfg/env/KEY"), "FIRST": ref("app/first/cfg/argv/0"),
                           "FROM_MATE": ref("app/second/mate/env/KEY"),
                           "FROM_DB": ref("app/first/db/env/ONLY_ON_H1"),
                           "PASS": ref("app/first/cfg/env/PASS"),
                           "F1_PORT": ref("app/first/cfg/ports/0")}),
    process("reader", "f1", {"FROM_H1": ref("app/first/db/env/KEY"),
                             "ONLY_ON_H1": ref("app/first/db/env/ONLY_ON_H1"),
                             "PORT": ref("app/first/db/ports/0")}))


def test_nested_references_cross_hosts_both_ways(cluster):  # noqa: F811
    app = deployed(cluster, NESTED)
    try:
        assert app.wait_for("running", timeout=90) == "running", app.ping()
        comps = {c["path"]: c for c in app.components()}
        assert {p: comps[p]["host"] for p in ("app/first/db", "app/second/peer", "app/second/reader")} \
            == {"app/first/db": "h1", "app/second/peer": "h1", "app/second/reader": "f1"}
        on_h1 = {c["path"]: c for s in host_portal_client(cluster.hosts[0]).applications()
                 for c in s.components() if c["pid"]}
        db, peer = on_h1["app/first/db"], on_h1["app/second/peer"]
        assert cluster.hosts[0].runs_here(peer["pid"])
        # h1's component got f1's literals (the front put them in the share), its mate's value
        # (left lazy in the share: h1 resolved it) and a value only h1 knows
        got = environ(peer["pid"])
        assert (got[b"FROM_F1"], got[b"FIRST"], got[b"FROM_MATE"], got[b"FROM_DB"], got[b"PASS"]) \
            == (b"f1-key", b"python3", b"mate-key", b"told-on-h1", SECRET.encode())
        # and a part of a runtime value the front keeps (its own host's process's ports)
        assert got[b"F1_PORT"].decode() in app.resolve("app/first/cfg/ports")
        # f1's component got h1's literal, a value h1's portal resolved, and a runtime value's part
        reader = environ(comps["app/second/reader"]["pid"])
        assert reader[b"FROM_H1"] == b"db-key" and reader[b"ONLY_ON_H1"] == b"told-on-h1"
        assert reader[b"PORT"].decode() in app.resolve("app/first/db/ports")     # (as text)
        # the front's resolve answers nested values wherever they are, a secret hidden
        assert app.resolve("app/second/peer/env/FROM_MATE") == "mate-key"       # asked of h1
        assert app.resolve("app/first/db/env/ONLY_ON_H1") == "told-on-h1"
        assert app.resolve("app/second/peer/env/PASS") == ""
        assert app.resolve("app/first/cfg/env/PASS") == ""
        with pytest.raises(PortalFault) as e:
            app.resolve("app/first/db/env/NOPE")                                 # asked of h1
        assert e.value.fault == "ResolutionFault", e.value
        assert "has no key NOPE (keys: KEY, ONLY_ON_H1)" in str(e.value)
        with pytest.raises(PortalFault) as e:
            app.resolve("app/first/cfg/env/NOPE")                                # the front's own
        assert "app/first/cfg/env has no key NOPE (keys: KEY, PASS)" in str(e.value)
        assert SECRET not in str(e.value)
    finally:
        app.terminate()
        app.wait_for("terminated", timeout=60)


def test_a_reference_to_a_key_a_given_value_lacks_is_refused_at_initialize(cluster):  # noqa: F811
    # the front sees it in the tree: nothing is sent to a host portal
    app = Portal(cluster.front.url, failover=False).create()
    try:
        with pytest.raises(PortalFault) as e:
            app.initialize(ns.NATIVE, text=NESTED.replace("app/first/cfg/env/KEY", "app/first/cfg/env/NOPE"))
        assert e.value.fault == "ResolutionFault"
        assert "app/second/peer/env/FROM_F1: app/first/cfg/env/NOPE does not exist: " \
               "app/first/cfg/env has no key NOPE (keys: KEY, PASS)" in str(e.value), e.value
        assert SECRET not in str(e.value)
        assert app.ping()["state"] == "instantiated" and app.components() == []
        assert not [s for s in host_portal_client(cluster.hosts[0]).applications()]
    finally:
        app.terminate()


# (a lazy property in a map the descriptor gives: the front cannot select into it; only the host
# that runs the component knows it is a single value)
WHERE = ('<item name="KEY">f1-key</item><item name="WHERE"><property name="cfg.where" lazy="true" '
         'default="on-f1"/></item>')


@pytest.mark.parametrize("target, host, says", [
    # a key of a value known only on f1 (a lazy property): the front's own record says it
    # never will be
    ("app/first/cfg/env/WHERE/deeper", "f1", "app/first/cfg/env/WHERE is a single value"),
    # a key of a value known only on h1: h1's portal says so (its ResolutionFault's kind), and
    # the share fails at once, not after FOREIGN_WAIT
    ("app/first/db/env/ONLY_ON_H1/deeper", "h1", "app/first/db/env/ONLY_ON_H1 is a single value"),
])
def test_a_reference_to_a_key_a_value_known_on_its_host_lacks_fails_the_share_at_once(
        cluster, target, host, says):  # noqa: F811
    text = NESTED.replace("app/first/cfg/env/KEY", target).replace('<item name="KEY">f1-key</item>', WHERE)
    app = deployed(cluster, text)
    try:
        started = time.monotonic()
        assert app.wait_for("running", timeout=90) == "failed", app.ping()
        took = time.monotonic() - started
        peer = {c["path"]: c for c in app.components()}["app/second/peer"]
        assert peer["state"] == "failed"
        assert "host %s says %s does not exist: %s" % (host, target, says) in peer["info"], peer
        assert "has no value after" not in peer["info"], peer
        # (deploying the first stage and starting it included: a few seconds, not FOREIGN_WAIT)
        assert took < FOREIGN_WAIT / 4, took
    finally:
        app.terminate()
        app.wait_for("terminated", timeout=60)


# db's port opens seconds after it runs: the second stage's share on h1 waits for it (h1's portal
# says "none yet") and is sent with it then
LATE = ('<application xmlns="urn:cddlm:lang:components:1"><component name="app" type="sequence">'
        '<component name="first" type="compound"><component name="db" type="process">'
        '<attribute name="argv"><item>sh</item><item>-c</item><item>sleep 3; exec python3 -m '
        'http.server 0 --bind 127.0.0.1</item></attribute><attribute name="host">h1</attribute>'
        '</component></component><component name="second" type="compound">%s</component>'
        '</component></application>') % process("peer", "h1", {"DB_PORT": ref("app/first/db/ports/0")})


def test_a_reference_to_a_value_that_comes_later_on_another_host_is_waited_for(cluster):  # noqa: F811
    app = deployed(cluster, LATE)
    try:
        assert app.wait_for("running", timeout=90) == "running", app.ping()
        on_h1 = {c["path"]: c for s in host_portal_client(cluster.hosts[0]).applications()
                 for c in s.components() if c["pid"]}
        got = environ(on_h1["app/second/peer"]["pid"])
        assert got[b"DB_PORT"].decode() in app.resolve("app/first/db/ports")
    finally:
        app.terminate()
        app.wait_for("terminated", timeout=60)
