"""Password guessing, bounded without locking out the people the passwords belong to.

Only passwords are guessable: a bearer token and a digest secret are 256 random bits, and are
checked (cheaply) whatever happens here. A password attempt is looked at in this order:

1. A credential verified within ``credential_cache`` seconds (``users.Directory``) is taken
   at once: no scrypt, no limit.
2. A credential that was valid before (its *fingerprint*, below) is checked, whatever the
   failures around it: the real user's client keeps working while someone guesses their
   password, from their address or any other.
3. Otherwise the attempt is refused unchecked (HTTP 429, ``Retry-After``) while either of two
   allowances of its user name is spent, each a token bucket refilled continuously:

   - the user from this *place*: ``failures_per_minute`` (10) failures of that user name from
     the client's address group (an IPv4 /24, an IPv6 /64: one subnet's rotating addresses
     are one place). Another user behind the same address (a reverse proxy, a NAT) is not
     held up by it.
   - the user from anywhere: ``user_failures_per_minute`` (30): guesses at one account from
     rotating addresses, however many, are that many a minute.

Failures at other accounts never refuse anyone: a place that tries many names gets ten a
minute at each, and no more CPU than the password-check threads give it.

SOAP requests that carry no credentials at all (none in the HTTP headers, no token in the SOAP
header) are failures of their place's anonymous user (the name ``""``, which no user has):
after ``failures_per_minute`` of them, requests without HTTP credentials from that place are
refused before their body is read (16 clients sending a megabyte each, refused one after the
other, kept the portal busy reading). A client sending its UsernameToken in the body from
behind the same address is refused with them; one sending HTTP credentials is not. A real user whose
password was never seen valid since the portal started, signing in while their own account is
being guessed at, is refused until the guessing slows: the price of bounding it. Their token
or digest secret, and a client already signed in, are not.

Fingerprints are 32 bits of an HMAC of the user's name and password under a key of this process
only (kept in memory, at most ``KNOWN_PER_USER`` a user): enough to tell the real user's
password from a guess (one guess in 4 billion is let through to be checked), too few to tell a
password from the rest of a dictionary were the memory ever read. A checked attempt always
pays scrypt: the fingerprint only decides whether it may be checked.

How many scrypt checks run at once is bounded separately (``passwords.Checks``).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import ipaddress
import math
import secrets
import threading
import time
from typing import Callable

KNOWN_PER_USER = 8
MAX_KEYS = 100_000       # buckets kept per kind (the least recently failed go first)


def place(address: str, v4_prefix: int = 24, v6_prefix: int = 64) -> str:
    """The address group of a client address (an IPv4-mapped IPv6 address is IPv4)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    prefix = v4_prefix if ip.version == 4 else v6_prefix
    return str(ipaddress.ip_network("%s/%d" % (ip, prefix), strict=False))


class Buckets:
    """Token buckets by key: ``per_minute`` failures, refilled continuously; the least
    recently debited key is forgotten first beyond ``max_keys`` (a full bucket carries no
    information, an empty one is forgotten only after ``max_keys`` newer failures)."""

    def __init__(self, per_minute: int, clock: Callable[[], float], max_keys: int = MAX_KEYS):
        self.capacity = float(max(1, per_minute))
        self.rate = self.capacity / 60.0
        self.clock = clock
        self.max_keys = max_keys
        self._tokens: "collections.OrderedDict[object, tuple[float, float]]" = collections.OrderedDict()

    def _level(self, key: object, now: float) -> float:
        tokens, at = self._tokens.get(key, (self.capacity, now))
        return min(self.capacity, tokens + (now - at) * self.rate)

    def wait(self, key: object) -> int:
        """Seconds until ``key`` has an attempt again (0: now)."""
        tokens = self._level(key, self.clock())
        return 0 if tokens >= 1.0 else max(1, math.ceil((1.0 - tokens) / self.rate))

    def debit(self, key: object, amount: float = 1.0) -> None:
        now = self.clock()
        self._tokens[key] = (max(0.0, self._level(key, now) - amount), now)
        self._tokens.move_to_end(key)
        while len(self._tokens) > self.max_keys:
            self._tokens.popitem(last=False)


class Logins:
    """The allowances and fingerprints of the module docstring; thread-safe."""

    def __init__(self, per_place_user: int, per_user: int,
                 clock: Callable[[], float] = time.monotonic, v4_prefix: int = 24,
                 v6_prefix: int = 64):
        self.prefixes = (v4_prefix, v6_prefix)
        self._pair = Buckets(per_place_user, clock)
        self._user = Buckets(per_user, clock)
        self._known: "collections.OrderedDict[str, list[bytes]]" = collections.OrderedDict()
        self._key = secrets.token_bytes(32)
        self._lock = threading.RLock()

    def place(self, address: str) -> str:
        return place(address, *self.prefixes)

    def fingerprint(self, user: str, password: str) -> bytes:
        return hmac.new(self._key, b"%s\0%s" % (user.encode("utf-8", "surrogatepass"),
                                                password.encode("utf-8", "surrogatepass")),
                        hashlib.sha256).digest()[:4]

    def known(self, user: str, fingerprint: bytes) -> bool:
        with self._lock:
            return fingerprint in self._known.get(user, ())

    def take(self, address: str, user: str) -> tuple[int, str] | None:
        """(seconds to wait, why) when an attempt at ``user`` from ``address`` is not to be
        checked now; None: check it, its failure counted already (so that attempts checked
        at once cannot each pass before the others' failures are counted): ``give_back`` when
        it succeeds or is not checked after all."""
        with self._lock:
            refused = self.refusal(address, user)
            if refused is None:
                self._debit(address, user, 1.0)
            return refused

    def give_back(self, address: str, user: str) -> None:
        with self._lock:
            self._debit(address, user, -1.0)

    def refusal(self, address: str, user: str) -> tuple[int, str] | None:
        """(seconds to wait, why) when an attempt at ``user`` from ``address`` is not to be
        checked now; None: check it."""
        where = self.place(address)
        with self._lock:     # re-entrant: ``take`` holds it
            if not user:
                wait = self._pair.wait((where, ""))
                return (wait, "too many requests without credentials from %s (HTTP credentials "
                              "are still taken)" % where) if wait else None
            for buckets, key, why in (
                    (self._pair, (where, user), "too many failed sign-ins as %s from %s" % (user, where)),
                    (self._user, user, "too many failed sign-ins as %s; a client that signed in "
                                       "before, a bearer token or a digest secret still work" % user)):
                wait = buckets.wait(key)
                if wait:
                    return wait, why
        return None

    def failed(self, address: str, user: str) -> None:
        """A failure not taken beforehand (a request without credentials; a known password
        that was wrong after all)."""
        with self._lock:
            self._debit(address, user, 1.0)

    def _debit(self, address: str, user: str, amount: float) -> None:
        where = self.place(address)
        self._pair.debit((where, user), amount)
        if user:
            self._user.debit(user, amount)

    def succeeded(self, user: str, fingerprint: bytes) -> None:
        with self._lock:
            prints = self._known.setdefault(user, [])
            self._known.move_to_end(user)
            if fingerprint in prints:
                return
            prints.append(fingerprint)
            del prints[:-KNOWN_PER_USER]
            while len(self._known) > MAX_KEYS:
                self._known.popitem(last=False)
