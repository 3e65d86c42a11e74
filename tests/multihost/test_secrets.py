"""Values a descriptor marks secret stay hidden across host portals (issues 27 and 28): a
secret literal on a remote component, a secret on one of the front's own hosts referred to by
a remote component, a secret on one host portal referred to by a component on another and by
one on the front's own host, a hidden HOT parameter on a remote component, and a secret
readiness pattern whose failure the host portal words. Each secret reaches the process that
needs it, and is looked for everywhere a person or a program reads: through the front portal
(ping, the resource property document with deploymentInfo and terminationInfo, resolve, the
JSON API, the dashboard, ``cddlm status``, the notifications a listener receives) and on each
host portal as the user the front signs in with (the same, and the share's descriptor text)."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import requests
from lxml import etree

from cddlm import ns
from cddlm.client import Portal, PortalFault, _post
from cddlm.listener import Listener
from tests.conftest import ROOT
from tests.multihost.cluster import FRONT_PASSWORD, FRONT_USER, MultiHost
from tests.multihost.test_delegation import environ, host_portal_client

LITERAL = "Zq8litSecret41"       # a literal on a remote component
LOCAL = "Zq8localSecret42"       # on the front's own host f1, read by a component on h1
REMOTE = "Zq8remoteSecret43"     # on h2, read by a component on h1 and one on f1
HOT_HIDDEN = "Zq8hotSecret44"    # a hidden HOT parameter of a component on h1
PATTERN = "Zq8readySecret45"     # a secret readiness pattern on h2, never seen: it fails
SECRETS = (LITERAL, LOCAL, REMOTE, HOT_HIDDEN, PATTERN)

SLEEP = '<attribute name="argv"><item>sleep</item><item>600</item></attribute>'


def application(*components: str) -> str:
    return '<application xmlns="urn:cddlm:lang:components:1">%s</application>' % "".join(components)


def secret_file(name: str, content: str, host: str) -> str:
    """A file whose content is a secret (``content``: its text, or a lazy property)."""
    return ('<component name="%s" type="file"><attribute name="path">%s.txt</attribute>'
            '<attribute name="content" secret="true">%s</attribute>'
            '<attribute name="host">%s</attribute></component>' % (name, name, content, host))


def sleeper(name: str, host: str, env: str, *more: str) -> str:
    """A process on ``host`` whose environment has the items ``env``."""
    return ('<component name="%s" type="process">%s<attribute name="env">%s</attribute>%s'
            '<attribute name="host">%s</attribute></component>' % (name, SLEEP, env, "".join(more), host))


def reads(variable: str, target: str) -> str:
    return '<item name="%s"><ref path="%s" lazy="true"/></item>' % (variable, target)


SPREAD = application(
    sleeper("lit", "h1", '<item name="PASS" secret="true">%s</item>' % LITERAL),
    secret_file("cfg", LOCAL, "f1"), sleeper("usel", "h1", reads("FROM_F1", "cfg/content")),
    secret_file("key", REMOTE, "h2"), sleeper("user2", "h1", reads("FROM_H2", "key/content")),
    sleeper("userf", "f1", reads("FROM_H2", "key/content")))

HOT_TEMPLATE = ("heat_template_version: 2015-04-30\n"
                "parameters:\n  token: {type: string, hidden: true}\n"
                "resources:\n  hot:\n    type: CDDLM::Process\n    properties:\n"
                "      argv: [sleep, '600']\n"
                "      env: {TOKEN: {get_param: token}}\n"
                "      host: h1\n")

WAITER = application(sleeper(
    "waiter", "h2", '<item name="HOME">/</item>',
    '<attribute name="readiness"><item name="log" secret="true">%s</item>'
    '<item name="timeout">2</item></attribute>' % PATTERN))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with MultiHost(tmp_path_factory.mktemp("secrets"), n=2, local=["f1"]) as mh:
        yield mh


def base(url: str) -> str:
    return url.split("/cddlm/", 1)[0]


def everything(app, url: str, auth=None) -> dict[str, str]:
    """What every way out of the portal at ``url`` says of ``app`` now, by where it was read."""
    out = {"ping": repr(app.ping())}
    doc = etree.Element("{%s}GetResourcePropertyDocument" % ns.WSRF_RP)
    out["properties"] = "".join(etree.tostring(e, encoding="unicode") for e in
                                _post(app.portal, app.reference.address, doc, app._headers))
    for c in app.components():
        for path in (c["path"], c["path"] + "/env", c["path"] + "/content"):
            try:
                out["resolve " + path] = repr(app.resolve(path))
            except PortalFault as e:
                out["resolve " + path] = str(e)
    for tail in ("", "/components", "/history", "/descriptor", "/audit"):
        r = requests.get("%s/api/v1/applications/%s%s" % (base(url), app.id, tail), auth=auth, timeout=10)
        out["api" + tail] = "%d %s" % (r.status_code, r.text)
    r = requests.get("%s/applications/%s" % (base(url), app.id), auth=auth, timeout=10)
    out["page"] = "%d %s" % (r.status_code, r.text)
    return out


def on_hosts(cluster) -> dict[str, str]:
    """Everything each host portal says of each of its sub-applications, to the front's user."""
    out = {}
    for h in cluster.hosts:
        for sub in host_portal_client(h).applications():
            for where, text in everything(sub, h.url, (FRONT_USER, FRONT_PASSWORD)).items():
                out["%s %s %s" % (h.name, sub.id, where)] = text
    return out


def status(cluster, name: str) -> str:
    return subprocess.run([sys.executable, "-m", "cddlm.cli", "status", name], capture_output=True,
                          text=True, cwd=ROOT, timeout=60,
                          env=dict(os.environ, CDDLM_PORTAL=cluster.front.url,
                                   XDG_CONFIG_HOME="/nonexistent")).stdout


def hidden(seen: dict[str, str]) -> None:
    """Fails naming every place in ``seen`` where a secret stands, and which, with the text
    around the first."""
    found = [(where, secret, text) for where, text in seen.items() for secret in SECRETS
             if secret in text]
    if found:
        where, secret, text = found[0]
        at = text.find(secret)
        raise AssertionError("secrets shown:\n%s\nthe first: ...%s..." % (
            "\n".join("  %s: %s" % (w, s) for w, s, _ in found), text[max(0, at - 300):at + 60]))


def notified(listener: Listener, state: str) -> dict[str, str]:
    """The notifications received, as sent, once the one of ``state`` has come (30 s at most)."""
    while True:
        event = listener.get(timeout=30)
        assert event is not None, "no notification of %s within 30 s" % state
        if event.state == state:
            break
    return {"notification %d" % i: data.decode("utf-8", "replace")
            for i, (_, data) in enumerate(listener.envelopes)}


def logs(cluster) -> dict[str, str]:
    """Every portal's log lines: its ``portal.log`` and its stderr."""
    files = [cluster.front.state_dir / "portal.log", cluster.front.log_path]
    for h in cluster.hosts:
        files += [h.state / "portal.log", Path(h.log.name)]
    return {str(f): f.read_text(errors="replace") for f in files if f.exists()}


def pid_on(cluster, path: str) -> int:
    for h in cluster.hosts:
        for sub in host_portal_client(h).applications():
            for c in sub.components():
                if c["path"] == path and c["pid"]:
                    return c["pid"]
    raise AssertionError("no host portal runs %s" % path)


@contextmanager
def deployed(cluster, name: str, language: str, text: str, listener: Listener | None = None,
             properties: dict[str, str] | None = None) -> Iterator:
    """The application ``name`` created (its lifecycle notified to ``listener``), initialized
    and run on the front portal; terminated afterwards."""
    app = Portal(cluster.front.url, failover=False).create(name=name)
    if listener is not None:
        app.subscribe(listener.url(name))
    app.initialize(language, text=text, properties=properties)
    app.run()
    try:
        yield app
    finally:
        app.terminate()
        assert app.wait_for("terminated", "failed", timeout=60) in ("terminated", "failed")


def shown_by_front(cluster, app, name: str) -> dict[str, str]:
    """Everything the front portal says of ``app`` (and ``cddlm status``), none of it a secret."""
    seen = everything(app, cluster.front.url)
    seen["cddlm status"] = status(cluster, name)
    hidden(seen)
    return seen


def test_secrets_reach_their_processes_and_no_answer_of_either_portal(cluster):
    with Listener(keep_envelopes=True) as listener:
        with deployed(cluster, "spread", ns.NATIVE, SPREAD, listener) as app:
            assert app.wait_for("running", timeout=90) == "running", app.ping()
            comps = {c["path"]: c for c in app.components()}
            assert {p: c["host"] for p, c in comps.items()} == {
                "lit": "h1", "cfg": "f1", "usel": "h1", "key": "h2", "user2": "h1", "userf": "f1"}
            # the secrets are given to the components that use them, wherever they run
            assert environ(pid_on(cluster, "lit"))[b"PASS"] == LITERAL.encode()
            assert environ(pid_on(cluster, "usel"))[b"FROM_F1"] == LOCAL.encode()
            assert environ(pid_on(cluster, "user2"))[b"FROM_H2"] == REMOTE.encode()
            assert environ(comps["userf"]["pid"])[b"FROM_H2"] == REMOTE.encode()
            # ... and never returned: by the front portal
            seen = shown_by_front(cluster, app, "spread")
            assert seen["resolve lit/env"] == repr({"PASS": ""})     # (ext:hidden: no text)
            # nor by the host portals, to the front's own user
            there = on_hosts(cluster)
            hidden(there)
            descriptors = {k: v for k, v in there.items() if k.endswith("api/descriptor")}
            assert len(descriptors) == 2 and all("********" in v for v in descriptors.values()), descriptors
        hidden(notified(listener, "terminated"))
    hidden(logs(cluster))


def test_a_hidden_hot_parameter_of_a_remote_component_stays_hidden(cluster):
    with deployed(cluster, "hot", ns.HOT, HOT_TEMPLATE, properties={"token": HOT_HIDDEN}) as app:
        assert app.wait_for("running", timeout=60) == "running", app.ping()
        assert environ(pid_on(cluster, "hot"))[b"TOKEN"] == HOT_HIDDEN.encode()
        shown_by_front(cluster, app, "hot")
        hidden(on_hosts(cluster))


def test_a_failure_the_host_portal_words_from_a_secret_is_masked_on_both(cluster):
    with Listener(keep_envelopes=True) as listener:
        with deployed(cluster, "waits", ns.NATIVE, WAITER, listener) as app:
            assert app.wait_for("failed", timeout=60) == "failed", app.ping()
            seen = shown_by_front(cluster, app, "waits")
            # the failure is told, with the pattern masked, on the front and on the host
            assert "log line /********/ not seen" in seen["properties"], seen["properties"]
            there = on_hosts(cluster)
            assert any("log line /********/ not seen" in v for v in there.values()), there
            hidden(there)
        sent = notified(listener, "failed")
        assert any("********" in v for v in sent.values()), sent
        hidden(sent)
    hidden(logs(cluster))


LAZY_SECRET = application(
    secret_file("vault", '<property name="vault.key" lazy="true" default="%s"/>' % REMOTE, "h2"),
    sleeper("reader", "h1", reads("KEY", "vault/content")))


def test_a_secret_its_host_resolves_itself_is_not_fetched_for_another_host(cluster):
    # vault/content is resolved on h2 (a lazy property): h2 returns it to nobody, so the front
    # cannot put it in h1's share; reader fails saying so rather than getting an empty value
    with deployed(cluster, "vault", ns.NATIVE, LAZY_SECRET) as app:
        assert app.wait_for("running", timeout=60) == "failed", app.ping()
        reader = {c["path"]: c for c in app.components()}["reader"]
        assert reader["state"] == "failed"
        assert "vault/content is a secret its host resolves itself" in reader["info"], reader
        shown_by_front(cluster, app, "vault")
        hidden(on_hosts(cluster))
    hidden(logs(cluster))
