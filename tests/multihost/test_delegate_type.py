"""The ``delegate`` component type: a part of a deployment given, as its own descriptor, to
another portal (here a second cddlm portal on loopback); ``resolve`` of it answers the
sub-application's EPR there, and terminate ends it."""

from __future__ import annotations

from xml.sax.saxutils import escape

import pytest

from cddlm import ns
from cddlm.client import Portal, PortalFault, Reference, Tls

INNER = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="worker" type="process">
    <attribute name="argv"><item>sleep</item><item>${seconds}</item></attribute>
  </component>
</application>"""


def outer(other_url: str, inner: str = INNER, language: str = ns.NATIVE,
          version: str | None = None) -> str:
    """A local process and a ``delegate`` ("there") handing ``inner`` to the portal at
    ``other_url``, in ``language`` (and ``version`` when given)."""
    v = '\n    <attribute name="version">%s</attribute>' % escape(version) if version else ""
    return """<application xmlns="urn:cddlm:lang:components:1">
  <component name="here" type="process">
    <attribute name="argv"><item>sleep</item><item>600</item></attribute>
  </component>
  <component name="there" type="delegate">
    <attribute name="portal">%s</attribute>
    <attribute name="language">%s</attribute>%s
    <attribute name="descriptor">%s</attribute>
  </component>
</application>""" % (escape(other_url), escape(language), v, escape(inner))


def allow(url: str) -> list[str]:
    """A front portal's flags that let its delegates name the portal at ``url`` (loopback)."""
    return ["--allow-delegate-url", url]


@pytest.fixture
def two(live_portal):
    other = live_portal()
    return live_portal(extra=allow(other.url)), other


def test_a_delegate_component_runs_as_a_sub_application_of_the_other_portal(two):
    front_lp, other_lp = two
    inner = INNER.replace("${seconds}", "600")
    front = Portal(front_lp.url, failover=False)
    app = front.create(name="outer")
    app.initialize(ns.NATIVE, text=outer(other_lp.url, inner))
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    ref = app.resolve("there")
    assert isinstance(ref, Reference) and ref.resource_id
    other = Portal(other_lp.url, failover=False)
    (sub,) = other.applications()
    assert sub.id == ref.resource_id and sub.state() == "running"
    (worker,) = sub.components()
    assert worker["state"] == "running" and worker["pid"]
    there = {c["path"]: c for c in app.components()}["there"]
    assert there["state"] == "running"
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated"
    with pytest.raises(PortalFault):     # destroyed on the other portal once terminated
        Portal(other_lp.url, failover=False).application(ref).state()


def test_a_delegate_the_other_portal_refuses_is_a_remote_fault_at_initialize(two):
    front_lp, other_lp = two
    front = Portal(front_lp.url, failover=False)
    app = front.create()
    with pytest.raises(PortalFault) as caught:
        app.initialize(ns.NATIVE, text=outer(other_lp.url, "<not-a-descriptor/>"))
    assert caught.value.fault == "RemoteFault"
    cause = caught.value.detail.find("{%s}FaultCause" % ns.WSRF_BF)
    assert cause is not None and cause[0].tag == "{%s}DescriptorFault" % ns.API
    assert "there" in str(caught.value)
    # nothing changed: here the application is still instantiated, there nothing is left
    assert app.state() == "instantiated"
    assert Portal(other_lp.url, failover=False).applications() == []


def test_a_delegate_over_mutual_tls_and_one_without_the_client_certificate(live_portal, tmp_path):
    from tests.pki import make_pki
    pki = make_pki(tmp_path)
    other_lp = live_portal(extra=["--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                                  "--tls-client-ca", pki.ca_cert])
    assert other_lp.url.startswith("https://")
    creds = tmp_path / "agents.toml"
    # credentials for that portal's exact URL (a delegate's portal never gets [default]'s)
    creds.write_text('[hosts."%s"]\nca_file = "%s"\nclient_cert = "%s"\nclient_key = "%s"\n'
                     % (other_lp.url, pki.ca_cert, pki.client_cert, pki.client_key))
    trusted = live_portal(extra=["--agent-credentials", str(creds)] + allow(other_lp.url))
    app = Portal(trusted.url, failover=False).create()
    app.initialize(ns.NATIVE, text=outer(other_lp.url, INNER.replace("${seconds}", "600")))
    app.run()
    assert app.wait_for("running", timeout=60) == "running", app.ping()
    app.terminate()
    assert app.wait_for("terminated", timeout=60) == "terminated"
    # a front portal that trusts the CA but has no client certificate is not let in: its
    # delegate fails after the lease, saying so
    creds.write_text('[hosts."%s"]\nca_file = "%s"\n' % (other_lp.url, pki.ca_cert))
    stranger = live_portal(extra=["--agent-credentials", str(creds), "--agent-lease", "2"]
                           + allow(other_lp.url))
    app = Portal(stranger.url, failover=False).create()
    app.initialize(ns.NATIVE, text=outer(other_lp.url, INNER.replace("${seconds}", "600")))
    app.run()
    assert app.wait_for("failed", timeout=30) == "failed"
    info = app.ping()["terminationInfo"]
    assert "there" == info["component"] and "no answer" in info["reason"], info
    app.terminate()
    assert app.wait_for("terminated", timeout=30) == "terminated"
    assert Portal(other_lp.url, failover=False, tls=Tls(pki.ca_cert, pki.client_cert, pki.client_key)
                  ).applications() == []
