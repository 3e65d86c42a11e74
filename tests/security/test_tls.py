"""TLS end to end: the portal serves HTTPS with certificates the test made; cddlm.client and
the cddlm command verify it (``--ca-file``; without it the system's CAs, which do not know this
one: a clean refusal, never a silent skip); plain HTTP to the TLS port gets nowhere; with
``--tls-client-ca`` only clients presenting a certificate of that CA get in (mutual TLS, as
portals delegating to each other), and they still need credentials."""

from __future__ import annotations

import http.client
import ssl

import pytest
import requests

from cddlm.client import Credentials, Portal, Tls, Unreachable
from tests.security import wire
from tests.security.conftest import PASSWORDS, auth, cddlm


@pytest.fixture(scope="module")
def tls_net(network_factory, pki):
    return network_factory(tls=pki)


@pytest.fixture(scope="module")
def mtls_net(network_factory, pki):
    return network_factory(tls=pki, client_ca=True)


def test_https_with_the_portals_ca(tls_net, pki):
    assert tls_net.url.startswith("https://")
    alice = Portal(tls_net.url, credentials=Credentials("alice", PASSWORDS["alice"]),
                   tls=Tls(ca_file=pki.ca_cert), failover=False)
    app = alice.create(name="over-tls")
    assert alice.lookup("over-tls").id == app.id
    done = cddlm("ls", "--ca-file", pki.ca_cert, env=tls_net.env("alice"))
    assert done.returncode == 0 and "over-tls" in done.stdout, done.stderr
    # Basic credentials over TLS, as curl would send them
    r = wire.request(tls_net.base + "/api/v1/applications", headers=auth("alice"),
                     context=ssl.create_default_context(cafile=pki.ca_cert))
    assert r.status == 200 and app.id.encode() in r.body


def test_an_unknown_certificate_is_refused_not_skipped(tls_net):
    with pytest.raises(Unreachable) as info:
        Portal(tls_net.url, credentials=Credentials("alice", PASSWORDS["alice"]), failover=False)
    assert "certificate" in str(info.value).lower()
    env = dict(tls_net.env("alice"))
    env.pop("CDDLM_CA_FILE", None)
    done = cddlm("ls", env=env)
    assert done.returncode == 1 and "certificate" in done.stderr.lower() and "Traceback" not in done.stderr


def test_plain_http_to_the_tls_port_gets_nowhere(tls_net):
    before = wire.snapshot(tls_net.db)
    port = int(tls_net.url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = wire.envelope("<api:createRequest><api:name>plain</api:name></api:createRequest>")
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        conn.request("POST", "/cddlm/portal", body=body, headers=dict(auth("alice"), **{
            "Content-Type": "text/xml"}))
        conn.getresponse().read()
    conn.close()
    done = cddlm("ls", "--portal", tls_net.url.replace("https://", "http://"), env=tls_net.env("alice"))
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr   # no portal there
    assert "http or https" in done.stderr
    assert wire.snapshot(tls_net.db) == before


def test_mutual_tls_lets_in_only_certificates_of_its_ca(mtls_net, pki):
    before = wire.snapshot(mtls_net.db)
    creds = Credentials("carol", PASSWORDS["carol"])
    for tls in (Tls(ca_file=pki.ca_cert),                                            # no certificate
                Tls(ca_file=pki.ca_cert, cert=pki.other_client_cert, key=pki.other_client_key)):
        with pytest.raises(Unreachable):
            Portal(mtls_net.url, credentials=creds, tls=tls, failover=False).applications()
    assert wire.snapshot(mtls_net.db) == before
    peer = Tls(ca_file=pki.ca_cert, cert=pki.client_cert, key=pki.client_key)
    portal = Portal(mtls_net.url, credentials=creds, tls=peer, failover=False)
    app = portal.create(name="between-portals")
    assert app.id in [a.id for a in portal.applications()]
    # the certificate lets a client connect; who it is still comes from its credentials
    session = requests.Session()
    peer.apply(session)
    r = session.get(mtls_net.base + "/api/v1/applications", timeout=10)
    assert r.status_code == 401
    done = cddlm("ls", "--ca-file", pki.ca_cert, "--client-cert", pki.client_cert,
                 "--client-key", pki.client_key, env=mtls_net.env("carol"))
    assert done.returncode == 0 and "between-portals" in done.stdout, done.stderr
