"""Lazy references between a component on one of the front portal's own (``local``) hosts and
one on a host portal (issue 28 item 6): the share sent to the host portal carries the local
component's value, read from the front's own record."""

from __future__ import annotations

import pytest

from cddlm import ns
from cddlm.client import Portal
from tests.multihost.cluster import MultiHost
from tests.multihost.test_delegation import CROSS, environ, host_portal_client

# a sequence of db then web, with web's DB_PID db's pid: db on the front's own host f1 and web on
# the host portal h1, and the other way round
REMOTE_TO_LOCAL = CROSS.replace(">h2<", ">f1<")
LOCAL_TO_REMOTE = CROSS.replace(">h1<", ">f1<").replace(">h2<", ">h1<")


@pytest.fixture
def cluster(tmp_path):
    with MultiHost(tmp_path, n=1, local=["f1"]) as mh:
        yield mh


def deployed(cluster, text: str):
    app = Portal(cluster.front.url, failover=False).create()
    app.initialize(ns.NATIVE, text=text)
    app.run()
    return app


def test_a_host_portals_component_gets_a_value_of_one_on_a_local_host_of_the_front(cluster):
    app = deployed(cluster, REMOTE_TO_LOCAL)
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    comps = {c["path"]: c for c in app.components()}
    assert comps["app/db"]["host"] == "f1" and comps["app/web"]["host"] == "h1"
    db_pid = comps["app/db"]["pid"]
    assert db_pid and not cluster.hosts[0].runs_here(db_pid)    # the front's own machine
    (web,) = [c for s in host_portal_client(cluster.hosts[0]).applications()
              for c in s.components() if c["pid"]]
    assert cluster.hosts[0].runs_here(web["pid"])
    assert environ(web["pid"])[b"DB_PID"] == str(db_pid).encode()
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated"


def test_a_component_on_a_local_host_of_the_front_gets_a_value_of_one_on_a_host_portal(cluster):
    app = deployed(cluster, LOCAL_TO_REMOTE)
    try:
        assert app.wait_for("running", timeout=60) == "running", app.ping()
        (db,) = [c for s in host_portal_client(cluster.hosts[0]).applications()
                 for c in s.components() if c["pid"]]
        web = {c["path"]: c for c in app.components()}["app/web"]
        assert web["host"] == "f1"
        assert environ(web["pid"])[b"DB_PID"] == str(db["pid"]).encode()
    finally:
        app.terminate()
        app.wait_for("terminated", timeout=60)
