"""Attacks on sign-in against a live portal with users (issue 27, items 6, 7 and 11): failed
logins that used to lock out everyone behind the attacker's address, guesses from rotating
addresses, floods of scrypt work and of unauthenticated megabytes, and a PasswordDigest token
replayed on a second portal reading the same users file. Each attacker sends from loopback
addresses of its own (127.X.Y.Z: a place is an IPv4 /24); each proof is a signed-in client's
answer (within a second) or the documented refusal."""

from __future__ import annotations

import base64
import http.client
import os
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import LivePortal, kill_leftovers
from tests.security import wire
from tests.security.conftest import PASSWORDS, auth, make_users

LOOKUP = "<api:lookupRequest><api:name>nothing-here</api:name></api:lookupRequest>"


class Users:
    def __init__(self, folder: Path, users: str, digest: dict, tokens: dict):
        self.folder, self.users, self.digest, self.tokens = folder, users, digest, tokens
        self.portals: list[LivePortal] = []

    def portal(self, extra: list[str] = ()) -> LivePortal:
        state = self.folder / ("state-%d" % len(self.portals))
        state.mkdir()
        p = LivePortal(state, extra=["--users", self.users, "--insecure"] + list(extra)).start()
        p.base = p.url.rsplit("/cddlm/portal", 1)[0]
        self.portals.append(p)
        return p


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    folder = tmp_path_factory.mktemp("logins")
    u = Users(folder, *make_users(folder))
    yield u
    for p in u.portals:
        p.stop()
    kill_leftovers(folder)


@pytest.fixture(scope="module")
def portal(users) -> LivePortal:
    return users.portal()


def answered(reply: wire.Reply) -> bool:
    """A signed-in client's lookup was answered (no such application: nothing was changed)."""
    return reply.status == 500 and reply.fault is not None and reply.fault[1] == "NoSuchApplicationFault"


def status(portal: LivePortal, headers: dict, source: str, body: str = LOOKUP) -> int:
    return wire.soap(portal.url, body, headers=headers, source=source).status


def spend_refills(portal: LivePortal, user: str, source) -> None:
    """Guess at ``user`` (guess i from address ``source(i)``) until a guess is refused with the
    next attempt more than a second away (Retry-After 2 or more): an allowance refilled
    meanwhile (a slow run) is spent by a guess, checked, rather than by the password tried
    next. Most often the first guess is refused so, and nothing is waited for."""
    deadline = time.monotonic() + 30
    i = 0
    while time.monotonic() < deadline:
        reply = wire.soap(portal.url, LOOKUP, headers=wire.basic(user, "again-%d" % i), source=source(i))
        i += 1
        assert reply.status in (401, 429), reply.status
        retry = {k.lower(): v for k, v in reply.headers.items()}.get("retry-after", "0")
        if reply.status == 429 and int(retry) >= 2:
            return
        time.sleep(0.02)
    pytest.fail("no guess at %s was refused with a second to spare within 30 s" % user)


def test_an_attackers_failures_refuse_no_one_else_behind_the_address(portal, users):
    """Ten bad logins from one address used to give every later request from it HTTP 429."""
    attacker = "127.0.41.1"
    started = time.monotonic()
    codes = [status(portal, wire.basic("alice", "guess-%d" % i), attacker) for i in range(14)]
    took = time.monotonic() - started
    # ten a minute from the place; a slow run may have had one back every 6 s meanwhile
    assert codes[:10] == [401] * 10 and set(codes[10:]) <= {401, 429}, codes
    assert codes[10:].count(401) <= int(took / 6), (codes, took)
    # the others behind that address (a reverse proxy, a NAT) sign in as ever, first time too
    assert answered(wire.soap(portal.url, LOOKUP, headers=auth("bob"), source=attacker))
    assert answered(wire.soap(portal.url, LOOKUP, headers=auth("carol"), source="127.0.41.7"))
    # alice's token and digest secret cannot be guessed: never refused
    assert answered(wire.soap(portal.url, LOOKUP, headers=wire.bearer(users.tokens["alice"]),
                              source=attacker))
    token = wire.username_token("alice", users.digest["alice"], digest=True, nonce=os.urandom(16),
                                created=wire.zulu())
    assert answered(wire.soap(portal.url, LOOKUP, [token], source=attacker))
    # alice's password, never seen valid, is refused there (it cannot be told from a guess) ...
    spend_refills(portal, "alice", lambda i: attacker)
    refused = wire.soap(portal.url, LOOKUP, headers=auth("alice"), source=attacker)
    assert refused.status == 429 and "as alice from 127.0.41.0/24" in refused.fault[2]
    # ... and taken anywhere else; once seen valid, it is taken from the attacker's place too
    assert answered(wire.soap(portal.url, LOOKUP, headers=auth("alice"), source="127.0.42.1"))
    assert answered(wire.soap(portal.url, LOOKUP, headers=auth("alice"), source=attacker))


def test_guesses_from_rotating_addresses_are_bounded_per_user(portal, users):
    """127.x.y.z gave 46 guesses a second at one account against a limit of 10 a minute."""
    from cddlm.application.users import UsersFile
    dave = UsersFile(users.users)
    dave.add("dave", "dave-secret-4444")
    token = dave.new_token("dave")
    started = time.monotonic()
    codes = [status(portal, wire.basic("dave", "guess-%d" % i), "127.%d.%d.1" % (100 + i // 200, i % 200))
             for i in range(60)]
    took = time.monotonic() - started
    checked = codes.count(401)
    # 30 a minute for the account, however many places (plus what refilled meanwhile)
    assert 30 <= checked <= 30 + int(took / 2) + 1, (checked, took, codes)
    assert set(codes) == {401, 429}
    # dave's token still works from anywhere, and so do the others
    assert answered(wire.soap(portal.url, LOOKUP, headers=wire.bearer(token), source="127.200.0.1"))
    assert answered(wire.soap(portal.url, LOOKUP, headers=auth("bob"), source="127.201.0.1"))
    # dave's password, never seen valid, cannot be told from the next guess while they go on
    spend_refills(portal, "dave", lambda i: "127.%d.%d.1" % (150 + i // 200, i % 200))
    new_place = wire.soap(portal.url, LOOKUP, headers=wire.basic("dave", "dave-secret-4444"),
                          source="127.202.0.1")
    assert new_place.status == 429 and "too many failed sign-ins as dave" in new_place.fault[2]


class Flood:
    """``count`` clients, each on a keep-alive connection from an address of its own, posting
    ``make(i, k)`` until stopped; the HTTP statuses they got. ``rotate``: each request on a
    connection of its own, from a new address (127.A.B.C, A from ``first``'s second number)."""

    def __init__(self, portal: LivePortal, count: int, first: str, make, rotate: bool = False):
        self.portal, self.count, self.make, self.rotate = portal, count, make, rotate
        self.sources = ["%s.%d.1" % (first, i) for i in range(count)]
        self.subnet = int(first.split(".")[1])
        self.stop = threading.Event()
        self.statuses: dict[int, int] = {}
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(count)]

    def _client(self, i: int) -> None:
        port = int(self.portal.url.split(":")[2].split("/")[0])
        k = 0
        while not self.stop.is_set():
            source = self.sources[i] if not self.rotate else "127.%d.%d.%d" % (
                self.subnet + i % 50, (k // 250) % 250, k % 250 + 1)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                              source_address=(source, 0))
            try:
                while not self.stop.is_set():
                    headers, body = self.make(i, k)
                    k += 1
                    conn.request("POST", "/cddlm/portal", body, dict(
                        {"Content-Type": "text/xml; charset=utf-8"}, **headers))
                    r = conn.getresponse()
                    r.read()
                    self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
                    if self.rotate:
                        break
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()

    def __enter__(self) -> "Flood":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(35)


def bystanders(portal: LivePortal, users: Users, seconds: float) -> list[float]:
    """Signed-in clients' requests while an attack goes on: alice's cached Basic credentials
    and bob's token, in turn; each answer's seconds."""
    waits = []
    deadline = time.monotonic() + seconds
    headers = [auth("alice"), wire.bearer(users.tokens["bob"])]
    while time.monotonic() < deadline:
        started = time.monotonic()
        reply = wire.soap(portal.url, LOOKUP, headers=headers[len(waits) % 2], source="127.0.0.1",
                          timeout=30)
        waits.append(time.monotonic() - started)
        assert answered(reply), (reply.status, reply.body[:300])
        time.sleep(0.05)
    return waits


def p99(values: list[float]) -> float:
    return sorted(values)[min(len(values) - 1, int(0.99 * len(values)))]


def test_a_flood_of_password_checks_holds_up_no_signed_in_client(users):
    """64 connections of unauthenticated password guesses (names of no one: scrypt each time,
    from 64 places) used to put every bystander over a second."""
    portal = users.portal()
    assert answered(wire.soap(portal.url, LOOKUP, headers=auth("alice")))     # alice signs in

    def guess(i: int, k: int):
        credentials = base64.b64encode(b"nobody-%d-%d:guess" % (i, k)).decode()
        return {"Authorization": "Basic " + credentials}, wire.envelope(LOOKUP)

    with Flood(portal, 64, "127.50", guess) as flood:
        time.sleep(1.0)
        waits = bystanders(portal, users, 4.0)
    assert flood.statuses.get(401, 0) > 20, flood.statuses      # the checks did run
    assert p99(waits) < 1.0, "bystanders waited up to %.2f s (p99 %.2f s)" % (max(waits), p99(waits))
    assert set(flood.statuses) <= {401, 429, 500}, flood.statuses     # 500: busy, try again


def megabyte_envelope(i: int, k: int):
    """About a megabyte of XML without credentials (just under the large-parse threshold): a
    quarter of a million elements, within the node limit."""
    return {}, wire.envelope("<api:createRequest>%s</api:createRequest>" % ("<a/>" * 240_000))


def declared_only(portal: LivePortal, size: int, headers: dict) -> wire.Reply:
    """A POST that declares ``size`` bytes and sends none of them: the answer to the headers."""
    port = int(portal.url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15, source_address=("127.0.61.1", 0))
    try:
        conn.putrequest("POST", "/cddlm/portal")
        for k, v in dict({"Content-Type": "text/xml", "Content-Length": str(size)}, **headers).items():
            conn.putheader(k, v)
        conn.endheaders()
        r = conn.getresponse()
        return wire.Reply(r.status, dict(r.getheaders()), r.read())
    finally:
        conn.close()


def test_unauthenticated_megabytes_are_not_parsed_and_hold_up_no_one(portal, users):
    """16 connections each sending about 1 MB of XML put 6 of 7 bystanders over a second; none
    counted as a failed login. Now only the SOAP header is parsed, and each place (16 here) has
    ten a minute; then its requests without HTTP credentials are refused unread."""
    _, big = megabyte_envelope(0, 0)
    assert 900_000 < len(big) < 1024 * 1024
    with Flood(portal, 16, "127.60", lambda i, k: ({}, big)) as flood:
        time.sleep(1.0)
        waits = bystanders(portal, users, 4.0)
    assert set(flood.statuses) == {401, 429}, flood.statuses
    assert flood.statuses[401] <= 16 * 11, flood.statuses
    assert max(waits) < 1.0, "bystanders waited up to %.2f s" % max(waits)
    # without HTTP credentials a body may be 1 MiB (refused unread), with them 10 MiB
    too_large = declared_only(portal, 2_000_000, {})
    assert "exceeds the limit of 1048576 bytes" in too_large.fault[2]
    assert "without HTTP credentials" in too_large.fault[2]
    huge = wire.envelope("<api:createRequest><api:name>%s</api:name></api:createRequest>" % ("x" * 2_000_000))
    signed = wire.request(portal.url, "POST", huge, headers=auth("alice"), source="127.0.61.1")
    assert signed.fault is None or "exceeds the limit" not in signed.fault[2], signed.body[:300]
    # a UsernameToken in the SOAP header still authenticates a body of about a megabyte ...
    token = wire.username_token("alice", PASSWORDS["alice"])
    lookup_big = "<api:lookupRequest><api:name>%s</api:name></api:lookupRequest>" % ("y" * 900_000)
    reply = wire.soap(portal.url, lookup_big, [token], source="127.0.61.1")
    assert reply.fault is not None and reply.fault[0] != "wsse:FailedAuthentication", reply.body[:300]
    # ... but only a header that ends within 64 KiB is read
    padding = "<wsa:ReplyTo><wsa:Address>%s</wsa:Address></wsa:ReplyTo>" % ("z" * 70_000)
    late = wire.soap(portal.url, LOOKUP, [padding, token], source="127.0.61.1")
    assert late.status == 401 and "within the first 65536 bytes" in late.fault[2], late.body[:300]


def test_a_digest_replayed_on_another_portal_of_the_same_users_file_is_refused(users, portal):
    """Two portals reading one users file, each with a store of its own."""
    other = users.portal()
    token = wire.username_token("bob", users.digest["bob"], digest=True, nonce=os.urandom(16),
                                created=wire.zulu())
    message = wire.envelope(LOOKUP, [token])
    assert answered(wire.request(portal.url, "POST", message, source="127.0.71.1"))
    replayed = wire.request(other.url, "POST", message, source="127.0.71.2")
    assert replayed.status == 401 and "replayed" in replayed.fault[2], replayed.body[:300]
    # a fresh token is taken by both
    for p in (portal, other):
        fresh = wire.username_token("bob", users.digest["bob"], digest=True, nonce=os.urandom(16),
                                    created=wire.zulu())
        assert answered(wire.soap(p.url, LOOKUP, [fresh], source="127.0.71.3"))
    assert Path(users.users + ".nonces").stat().st_mode & 0o077 == 0
