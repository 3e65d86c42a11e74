"""Authentication as an attacker meets it: no credentials, wrong ones, a replayed or stale
UsernameToken, too many tries. Every refusal is a wsse:FailedAuthentication fault (HTTP 401
with a Basic challenge, or 429) and leaves the store as it was; the right credentials work in
every form a SOAP stack sends them (zeep's UsernameToken, text and digest; Basic; Bearer).

Each test that fails on purpose sends from its own loopback address (127.0.N.1: a place of its
own, an IPv4 /24), so that the limit it trips is its own."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest
import zeep
from zeep.wsse.username import UsernameToken

from tests.security import wire
from tests.security.conftest import PASSWORDS, auth

FAILED = "wsse:FailedAuthentication"
LOOKUP = "<api:lookupRequest><api:name>nothing-here</api:name></api:lookupRequest>"
CREATE = "<api:createRequest/>"


def refused(reply: wire.Reply, status: int = 401) -> str:
    assert reply.status == status, (reply.status, reply.body[:400])
    code, detail, text = reply.fault
    assert code == FAILED and detail == "", reply.fault
    if status in (401, 429):
        assert reply.headers["www-authenticate"].startswith('Basic realm="cddlm"')
    return text


def test_no_credentials_on_any_endpoint(net):
    before = wire.snapshot(net.db)
    src = "127.0.11.1"
    targets = [(net.url, CREATE), (net.url, "<wsrf-rp:GetResourceProperty>api:applications"
                                            "</wsrf-rp:GetResourceProperty>"),
               (net.base + "/cddlm/applications/0123abcd", "<api:runRequest/>"),
               (net.base + "/cddlm/subscriptions/0123456789abcdef0123456789abcdef", "<wsnt:Unsubscribe/>")]
    for url, body in targets:
        text = refused(wire.soap(url, body, source=src))
        assert "authentication required" in text
    # the dashboard and its JSON ask for Basic credentials (the browser prompts)
    for path in ("/", "/api/v1/applications", "/api/v1/audit", "/hosts"):
        r = wire.request(net.base + path, source=src)
        assert r.status == 401 and r.headers["www-authenticate"].startswith("Basic"), (path, r.status)
    # the WSDL and its schemas are public: a client needs them to learn how to authenticate
    r = wire.request(net.url + "?wsdl", source=src)
    assert r.status == 200 and b"CddlmAuthentication" in r.body and b"UsernameToken" in r.body
    assert wire.request(net.base + "/cddlm/wsdl/api.xsd", source=src).status == 200
    assert wire.snapshot(net.db) == before


def test_wrong_credentials_in_every_form(net):
    before = wire.snapshot(net.db)
    src = "127.0.12.1"
    bad = [
        {"headers": wire.basic("alice", "not-her-password")},
        {"headers": wire.basic("mallory", "whatever-it-is")},
        {"headers": {"Authorization": "Basic !!notbase64!!"}},
        {"headers": wire.bearer("cddlm_0123456789abcdef_forgedforgedforged")},
        {"headers": wire.bearer(net.tokens["alice"][:-2] + "xx")},
        {"wsse": wire.username_token("alice", "not-her-password")},
        {"wsse": wire.username_token("alice", net.digest["bob"], digest=True)},
        # the password is no digest secret: PasswordDigest is checked against the secret only
        {"wsse": wire.username_token("alice", PASSWORDS["alice"], digest=True)},
    ]
    for case in bad:
        headers = [case["wsse"]] if "wsse" in case else []
        text = refused(wire.soap(net.url, CREATE, headers, headers=case.get("headers"), source=src))
        assert "authentication failed" in text or "authentication required" in text, text
    assert "wrong password" in net.log() and "127.0.12.1" in net.log()   # failures are logged
    assert wire.snapshot(net.db) == before


def test_the_right_credentials_in_every_form(net):
    ok = [{"headers": auth("alice")}, {"headers": wire.bearer(net.tokens["alice"])},
          {"wsse": wire.username_token("alice", PASSWORDS["alice"])},
          {"wsse": wire.username_token("alice", net.digest["alice"], digest=True)},
          {"wsse": wire.username_token("alice", PASSWORDS["alice"], nonce=os.urandom(16),
                                       created=wire.zulu())}]
    for case in ok:
        headers = [case["wsse"]] if "wsse" in case else []
        r = wire.soap(net.url, LOOKUP, headers, headers=case.get("headers"))
        assert r.status == 500 and r.fault[1] == "NoSuchApplicationFault", (case, r.body[:300])


def test_zeep_username_token_text_and_digest(net):
    text = zeep.Client(net.url + "?wsdl", wsse=UsernameToken("alice", PASSWORDS["alice"]))
    created = text.service.create(name="zeep-text")
    digest = zeep.Client(net.url + "?wsdl", wsse=UsernameToken("alice", net.digest["alice"],
                                                                use_digest=True))
    found = digest.service.lookup(name="zeep-text")
    assert created.ResourceId and found["Address"]["_value_1"].startswith(net.base)
    # zeep raises the fault as the portal sent it
    wrong = zeep.Client(net.url + "?wsdl", wsse=UsernameToken("alice", "nope", use_digest=True))
    with pytest.raises(zeep.exceptions.Fault) as info:
        wrong.service.lookup(name="zeep-text")
    assert info.value.code == FAILED


def test_a_replayed_username_token_is_refused(net):
    """The same signed message sent twice: the second is refused, whether the nonce comes back
    in a byte-identical envelope or in a new request."""
    src = "127.0.13.1"
    token = wire.username_token("bob", net.digest["bob"], digest=True, nonce=os.urandom(16),
                                created=wire.zulu())
    body = wire.envelope(CREATE, [token])
    first = wire.request(net.url, "POST", body, source=src)
    assert first.status == 200, first.body[:300]
    before = wire.snapshot(net.db)
    again = wire.request(net.url, "POST", body, source=src)
    assert "replayed" in refused(again)
    other = wire.soap(net.url, LOOKUP, [token], source=src)
    assert "replayed" in refused(other)
    # zeep with a fixed nonce and time, twice
    fixed = dict(nonce="fixed-nonce-%d" % time.time_ns(), created=dt.datetime.now(dt.timezone.utc),
                 use_digest=True)
    client = zeep.Client(net.url + "?wsdl", wsse=UsernameToken("bob", net.digest["bob"], **fixed))
    with pytest.raises(zeep.exceptions.Fault):
        client.service.lookup(name="nothing-here")            # accepted: NoSuchApplicationFault
    with pytest.raises(zeep.exceptions.Fault) as info:
        client.service.lookup(name="nothing-here")
    assert info.value.code == FAILED and "replayed" in info.value.message
    assert wire.snapshot(net.db) == before


def test_stale_and_future_tokens_are_refused(net):
    before = wire.snapshot(net.db)
    src = "127.0.14.1"
    now = dt.datetime.now(dt.timezone.utc)
    for created in (now - dt.timedelta(minutes=10), now + dt.timedelta(minutes=10)):
        token = wire.username_token("bob", net.digest["bob"], digest=True, created=wire.zulu(created))
        assert "outside the accepted window" in refused(wire.soap(net.url, CREATE, [token], source=src))
    # a PasswordText message whose wsu:Timestamp has expired
    token = wire.username_token("bob", PASSWORDS["bob"], created=wire.zulu(now - dt.timedelta(minutes=3)),
                                expires=wire.zulu(now - dt.timedelta(minutes=2)))
    assert "expired" in refused(wire.soap(net.url, CREATE, [token], source=src))
    # a digest without its nonce and time cannot be checked for replay: refused
    token = wire.username_token("bob", net.digest["bob"], digest=True)
    token.find(".//{%s}Nonce" % wire.WSSE).getparent().remove(token.find(".//{%s}Nonce" % wire.WSSE))
    refused(wire.soap(net.url, CREATE, [token], source=src))
    assert wire.snapshot(net.db) == before


def test_failures_are_limited_per_user_and_place(net):
    """Guesses at bob from one place (an IPv4 /24) are limited there; the limit holds up no
    other user from that very address, and bob from another place."""
    src, neighbour, elsewhere = "127.0.21.1", "127.0.21.2", "127.0.22.1"
    before = wire.snapshot(net.db)
    statuses = [wire.soap(net.url, LOOKUP, headers=wire.basic("bob", "guess-%d" % i), source=src).status
                for i in range(12)]
    assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429], statuses
    # while limited, a password of bob's never seen valid is not checked from that place (an
    # address of the same /24 included): it cannot be told from the next guess
    for source in (src, neighbour):
        limited = wire.soap(net.url, LOOKUP, headers=auth("bob"), source=source)
        assert "too many failed sign-ins as bob from 127.0.21.0/24" in refused(limited, 429)
        assert int(limited.headers["retry-after"]) >= 1
    assert wire.request(net.base + "/api/v1/applications", headers=auth("bob"), source=src).status == 429
    # another user behind the same address is not held up, nor bob from another place
    for user, source in (("alice", src), ("carol", neighbour), ("bob", elsewhere)):
        fine = wire.soap(net.url, LOOKUP, headers=auth(user), source=source)
        assert fine.fault[1] == "NoSuchApplicationFault", (user, fine.status, fine.body[:300])
    # and once bob's password was seen valid, it is checked from the limited place too
    known = wire.soap(net.url, LOOKUP, headers=wire.basic("bob", PASSWORDS["bob"]), source=src)
    assert known.fault[1] == "NoSuchApplicationFault", known.body[:300]
    assert "authentication refused from 127.0.21.1" in net.log()
    assert wire.snapshot(net.db) == before


def test_the_wsdl_fetched_with_a_wrong_password_counts_no_failure(net):
    """The WSDL and its schemas are answered to anyone: credentials sent with them (a client
    with a mistyped password fetches the WSDL before its first call) are not checked, so they
    are not failed sign-ins that would refuse that user's next try."""
    src = "127.0.23.1"
    wrong = wire.basic("carol", "typo")
    for _ in range(12):
        assert wire.request(net.url + "?wsdl", headers=wrong, source=src).status == 200
        assert wire.request(net.base + "/cddlm/wsdl/api.xsd", headers=wrong, source=src).status == 200
    # the next wrong password is the first failure (401), not one over the limit (429)
    refused(wire.soap(net.url, LOOKUP, headers=wrong, source=src), 401)
