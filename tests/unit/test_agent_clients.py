"""Whose credentials go where, and which portals a delegate may name (cddlm/agents.py), and how
an operator's URL prefix is matched (netsafe.url_under)."""

from __future__ import annotations

import pytest

from cddlm import netsafe
from cddlm.agents import AgentClients
from cddlm.application.hosts import Host
from cddlm.config import Settings
from cddlm.errors import Busy, ConfigurationError, ResolutionError

CREDS = '''[default]
user = "front"
password = "p"
[hosts.h2]
user = "front-h2"
password = "p2"
[hosts."https://h3.example/cddlm/portal/"]
token = "for-h3"
[hosts."https://partner.example/cddlm/portal"]
token = "partner"
'''


@pytest.fixture
def clients(tmp_path):
    path = tmp_path / "agents.toml"
    path.write_text(CREDS)
    path.chmod(0o600)

    def make(**kw) -> AgentClients:
        return AgentClients(Settings(agent_credentials_file=str(path), **kw))
    return make


def test_datacenter_hosts_get_default_then_their_url_then_their_name(clients):
    c = clients()
    assert c.host_creds(Host("h1", "http://h1:8080/cddlm/portal")) == {"user": "front", "password": "p"}
    assert c.host_creds(Host("h2", "http://h2:8080/cddlm/portal"))["user"] == "front-h2"
    h3 = c.host_creds(Host("h3", "https://h3.example/cddlm/portal"))
    assert h3["token"] == "for-h3" and h3["user"] == "front"


def test_a_delegates_portal_gets_only_its_exact_urls_entry(clients):
    c = clients()
    assert c.delegate_creds("https://partner.example/cddlm/portal") == {"token": "partner"}
    assert c.delegate_creds("https://partner.example/cddlm/portal/") == {"token": "partner"}
    for url in ("http://partner.example/cddlm/portal",          # not the https one
                "https://partner.example:8443/cddlm/portal", "https://partner.example/other",
                "https://evil.example/cddlm/portal", "h2", "default"):
        assert c.delegate_creds(url) == {}, url


def test_client_certificates_over_plain_http_are_refused_at_startup(tmp_path):
    path = tmp_path / "agents.toml"
    for toml, hosts in (('[default]\nclient_cert = "c.pem"\n', [Host("h1", "http://h1/cddlm/portal")]),
                        ('[hosts.h1]\nclient_cert = "c.pem"\n', [Host("h1", "http://h1/cddlm/portal")]),
                        ('[hosts."http://x/cddlm/portal"]\nclient_cert = "c.pem"\n', [])):
        path.write_text(toml)
        with pytest.raises(ConfigurationError) as refused:
            AgentClients(Settings(agent_credentials_file=str(path))).check(hosts)
        assert "plain http" in str(refused.value)
    # the same certificate for a host portal over https: its files are checked instead
    path.write_text('[default]\nclient_cert = "%s"\n' % (tmp_path / "missing.pem"))
    with pytest.raises(ConfigurationError) as refused:
        AgentClients(Settings(agent_credentials_file=str(path))).check([Host("h1", "https://h1/x")])
    assert "missing.pem" in str(refused.value)
    # and none of it matters for hosts that are not portals (local, ssh ...)
    AgentClients(Settings(agent_credentials_file=str(path))).check([Host("h0"), Host("s", "ssh://u@s")])


def test_which_portals_a_delegate_may_name(clients):
    c = clients()
    with pytest.raises(ResolutionError) as e:
        c.admit("a/b", "http://127.0.0.1:9/cddlm/portal")
    assert "--allow-delegate-url" in str(e.value) and e.value.path == "a/b/portal"
    c = clients(allowed_delegate_urls=("http://127.0.0.1:9/",))
    c.admit("x", "http://127.0.0.1:9/cddlm/portal")           # a literal address: allowed with it
    for url in ("http://127.0.0.1:10/cddlm/portal", "http://127.0.0.1.evil.example:9/"):
        with pytest.raises(ResolutionError):
            c.admit("x", url)
    with pytest.raises(ResolutionError) as e:                   # loopback by name: no network allows it
        clients(allowed_delegate_urls=("http://localhost:9/",)).admit("x", "http://localhost:9/cddlm/portal")
    assert "--delegate-network" in str(e.value)
    clients(allowed_delegate_urls=("http://localhost:9/",), delegate_networks=("127.0.0.0/8", "::1/128")
            ).admit("x", "http://localhost:9/cddlm/portal")
    with pytest.raises(ResolutionError) as e:
        c.admit("x", object())                                  # not a URL written down
    assert "written as a URL" in str(e.value)


def test_request_threads_waiting_on_portals_are_bounded(clients):
    c = clients(agent_request_slots=1)
    with c.waiting():
        with pytest.raises(Busy) as e:
            with c.waiting():
                pass
        assert "--agent-request-slots 1" in str(e.value)
    with c.waiting():           # the slot is free again
        pass


@pytest.mark.parametrize("url,prefix,under", [
    ("http://h/a/b", "http://h/a", True), ("http://h/ab", "http://h/a", False),
    ("http://h.evil/a", "http://h/a", False), ("http://H:80/a", "http://h/a", True),
    ("https://h/a", "http://h/a", False), ("http://h/a/../x", "http://h/a", False),
    ("http://h/a/%2e%2e/x", "http://h/a", False), ("http://h/a/", "http://h/a/", True),
    ("http://u@h/a", "http://h/", False), ("http://h:81/a", "http://h/", False),
    ("http://h/x?y=1", "http://h/", True), ("http://h/x?y=2", "http://h/x?y=1", False),
])
def test_url_under(url, prefix, under):
    assert netsafe.url_under(url, prefix) is under


def test_literal_addresses_of_prefixes():
    assert netsafe.literal_addresses(("http://10.0.0.5:8/", "https://[::1]/x", "http://name/")) == \
        ("10.0.0.5", "::1")
