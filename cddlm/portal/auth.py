"""Authentication at the edge: who sends a request, as a ``Principal`` for the use cases.

Accepted, in this order of preference (README, "Running on a network"):

- WS-Security 1.0 UsernameToken (the ``wsse:Security`` header; OASIS UsernameToken Profile
  1.0): ``PasswordText`` (the user's password: over TLS only, or on loopback), or
  ``PasswordDigest`` = Base64(SHA-1(nonce + created + secret)) with the user's digest secret
  (``users.py`` says why it is not the password). A token with a ``wsu:Created`` older than
  ``Settings.security.token_window`` (or further ahead than ``clock_skew``) is stale; a nonce
  is accepted once (remembered in the store, so portals sharing it refuse each other's replays);
  PasswordDigest needs both. An expired ``wsu:Timestamp`` is stale too.
- HTTP ``Authorization: Basic`` (user and password) and ``Authorization: Bearer`` (a token of
  ``cddlm token create``): what browsers (the dashboard), curl and most HTTP stacks send.

Without a users file (local mode) every request is the local administrator's.

A request without valid credentials is ``AuthenticationFailed`` (the fault map makes it
``wsse:FailedAuthentication``, HTTP 401 with a Basic challenge) and changes nothing. Failures
are logged and counted per client address; an address with more than
``Settings.security.failures_per_minute`` is refused without checking (HTTP 429, Retry-After)
until its allowance refills, which also bounds the scrypt work an attacker can cause.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import math
import threading
import time
from typing import Callable

from lxml import etree

from cddlm import metrics, ns
from cddlm.application import repository as repo
from cddlm.application.store import Store
from cddlm.application.tenancy import LOCAL_ADMIN, Principal
from cddlm.application.users import Directory, User
from cddlm.config import Security
from cddlm.errors import AuthenticationFailed, BadArgument
from cddlm.xsdtypes import parse_datetime

log = logging.getLogger(__name__)

WSSE, WSU = ns.WSSE, ns.WSU
SECURITY = "{%s}Security" % WSSE
CHALLENGE = 'Basic realm="cddlm", charset="UTF-8"'
REQUIRED = ("authentication required: send a WS-Security UsernameToken, HTTP Basic credentials "
            "or a Bearer token")
WRONG = "authentication failed: unknown user or wrong password"


class _Failed(AuthenticationFailed):
    """A failure that counts against the address (not a request that carried nothing)."""

    def __init__(self, message: str, reason: str, user: str | None = None):
        super().__init__(message, challenge=CHALLENGE)
        self.reason = reason
        self.user = user


class FailureLimiter:
    """A token bucket per client address: ``per_minute`` failures, refilled continuously."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic,
                 max_addresses: int = 100_000):
        self.capacity = float(max(1, per_minute))
        self.rate = self.capacity / 60.0
        self.clock = clock
        self.max_addresses = max_addresses
        self._buckets: dict[str, tuple[float, float]] = {}    # address -> (tokens, at)
        self._lock = threading.Lock()

    def _tokens(self, address: str, now: float) -> float:
        tokens, at = self._buckets.get(address, (self.capacity, now))
        return min(self.capacity, tokens + (now - at) * self.rate)

    def wait(self, address: str) -> int:
        """Seconds until ``address`` may try again (0: now)."""
        with self._lock:
            tokens = self._tokens(address, self.clock())
        return 0 if tokens >= 1.0 else max(1, math.ceil((1.0 - tokens) / self.rate))

    def failed(self, address: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._buckets) >= self.max_addresses:   # forget the addresses at rest
                self._buckets = {a: b for a, b in self._buckets.items()
                                 if self._tokens(a, now) < self.capacity}
            self._buckets[address] = (max(0.0, self._tokens(address, now) - 1.0), now)


class Authenticator:
    """``soap(environ, headers)`` and ``http(environ)`` return the request's principal or
    raise ``AuthenticationFailed``. ``directory`` None: local mode."""

    def __init__(self, directory: Directory | None, store: Store, security: Security, *,
                 clock: Callable[[], float] = time.time):
        self.directory = directory
        self.store = store
        self.security = security
        self.clock = clock
        self.limiter = FailureLimiter(security.failures_per_minute)

    @property
    def local(self) -> bool:
        return self.directory is None

    # -- entry points -------------------------------------------------------------------------
    def soap(self, environ: dict, headers: list[etree._Element]) -> Principal:
        security = next((h for h in headers if h.tag == SECURITY), None)
        return self._authenticate(environ, lambda: self._username_token(security)
                                  if security is not None else self._http(environ))

    def http(self, environ: dict) -> Principal:
        return self._authenticate(environ, lambda: self._http(environ))

    def _authenticate(self, environ: dict, check: Callable[[], User]) -> Principal:
        address = environ.get("REMOTE_ADDR") or ""
        if self.directory is None:
            return LOCAL_ADMIN.at(address)
        wait = self.limiter.wait(address)
        if wait:
            log.warning("authentication refused from %s: too many failed attempts", address)
            raise AuthenticationFailed("too many failed authentication attempts from %s; try again "
                                       "in %d s" % (address, wait), status=429, retry_after=wait,
                                       challenge=CHALLENGE)
        try:
            user = check()
        except _Failed as e:
            self.limiter.failed(address)
            metrics.auth_failed()
            log.warning("authentication failed from %s%s: %s", address,
                        " for %r" % e.user if e.user else "", e.reason)
            raise
        return Principal(user.name, user.admin, address)

    # -- HTTP ---------------------------------------------------------------------------------
    def _http(self, environ: dict) -> User:
        header = (environ.get("HTTP_AUTHORIZATION") or "").strip()
        scheme, _, value = header.partition(" ")
        scheme, value = scheme.lower(), value.strip()
        if scheme == "basic" and value:
            try:
                name, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise _Failed(WRONG, "malformed Basic credentials") from None
            if not sep:
                raise _Failed(WRONG, "malformed Basic credentials")
            return self._password(name, password)
        if scheme == "bearer" and value:
            user = self.directory.check_token(value)
            if user is None:
                raise _Failed("authentication failed: unknown or revoked token", "bad token")
            return user
        raise AuthenticationFailed(REQUIRED, challenge=CHALLENGE)

    def _password(self, name: str, password: str) -> User:
        user = self.directory.check_password(name, password)
        if user is None:
            raise _Failed(WRONG, "wrong password or unknown user", name)
        return user

    # -- WS-Security UsernameToken ------------------------------------------------------------------
    def _username_token(self, security: etree._Element) -> User:
        token = security.find("{%s}UsernameToken" % WSSE)
        if token is None:
            raise _Failed("authentication failed: the wsse:Security header holds no "
                          "wsse:UsernameToken (the only token this portal takes)", "no UsernameToken")
        name = (token.findtext("{%s}Username" % WSSE) or "").strip()
        password_el = token.find("{%s}Password" % WSSE)
        nonce_text = token.findtext("{%s}Nonce" % WSSE)
        created_text = token.findtext("{%s}Created" % WSU)
        if not name or password_el is None:
            raise _Failed("authentication failed: the UsernameToken needs a Username and a "
                          "Password", "incomplete UsernameToken", name or None)
        now = self.clock()
        self._fresh(security, created_text, name, now)
        nonce = None
        if nonce_text is not None:
            try:
                nonce = base64.b64decode(nonce_text.strip(), validate=True)
            except binascii.Error:
                raise _Failed("authentication failed: the Nonce is not base64", "bad nonce", name) from None
        kind = (password_el.get("Type") or "#PasswordText").rsplit("#", 1)[-1].rsplit(":", 1)[-1]
        given = password_el.text or ""
        if kind == "PasswordText":
            user = self._password(name, given)
        elif kind == "PasswordDigest":
            if nonce is None or created_text is None:
                raise _Failed("authentication failed: a PasswordDigest needs a Nonce and a "
                              "wsu:Created", "digest without nonce or created", name)
            user = self._digest(name, given.strip(), nonce, created_text.strip())
        else:
            raise _Failed("authentication failed: unsupported password type %s" % kind,
                          "password type %s" % kind, name)
        if nonce is not None:
            created = parse_datetime(created_text) if created_text else now
            digest = hashlib.sha256(name.encode("utf-8") + b"\0" + nonce).hexdigest()
            expires = max(created, now) + self.security.token_window + self.security.clock_skew
            with self.store.write() as conn:
                fresh = repo.remember_nonce(conn, digest, expires)
            if not fresh:
                raise _Failed("authentication failed: this nonce was used already (a replayed "
                              "message)", "replayed nonce", name)
        return user

    def _fresh(self, security: etree._Element, created_text: str | None, name: str, now: float) -> None:
        window, skew = self.security.token_window, self.security.clock_skew
        stamps = [created_text] if created_text is not None else []
        timestamp = security.find("{%s}Timestamp" % WSU)
        if timestamp is not None:
            expires = timestamp.findtext("{%s}Expires" % WSU)
            if expires is not None and _time(expires, name) < now - skew:
                raise _Failed("authentication failed: the message's wsu:Timestamp has expired",
                              "expired timestamp", name)
            if timestamp.findtext("{%s}Created" % WSU) is not None:
                stamps.append(timestamp.findtext("{%s}Created" % WSU))
        for stamp in stamps:
            created = _time(stamp, name)
            if created < now - window or created > now + skew:
                raise _Failed("authentication failed: the token was created at %s, outside the "
                              "accepted window (%d s back, %d s ahead of the portal's clock)"
                              % (stamp.strip(), window, skew), "stale or future Created", name)

    def _digest(self, name: str, given: str, nonce: bytes, created: str) -> User:
        secret = self.directory.digest_secret(name)
        user = self.directory.user(name)
        expected = base64.b64encode(hashlib.sha1(nonce + created.encode("utf-8") +
                                                 (secret or "\0").encode("utf-8")).digest()).decode()
        if secret is None or user is None or not hmac.compare_digest(expected, given):
            raise _Failed(WRONG, "wrong digest, unknown user or no digest secret", name)
        return user

    # -- housekeeping ---------------------------------------------------------------------------
    def prune(self) -> int:
        """Forget nonces too old to matter (a scheduled job)."""
        if self.directory is None:
            return 0
        with self.store.write() as conn:
            return repo.forget_nonces(conn, self.clock())


def _time(text: str, name: str) -> float:
    try:
        return parse_datetime(text)
    except BadArgument:
        raise _Failed("authentication failed: %r is not an xsd:dateTime" % text.strip(),
                      "bad time", name) from None
