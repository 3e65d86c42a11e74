"""Authentication at the edge: who sends a request, as a ``Principal`` for the use cases.

Accepted (README, "Running on a network"):

- HTTP ``Authorization: Basic`` (user and password) and ``Authorization: Bearer`` (a token of
  ``cddlm token create``): what browsers (the dashboard), curl and most HTTP stacks send. When
  a request carries them, they decide (a ``wsse:Security`` header beside them is not read), and
  they are checked before its body is read (``admit``, called by the HTTP server through
  ``wsgi.Router.gate``): wrong ones cost the portal no body and no parse.
- WS-Security 1.0 UsernameToken (the ``wsse:Security`` header; OASIS UsernameToken Profile
  1.0), in requests without HTTP credentials: ``PasswordText`` (the user's password: over TLS
  only, or on loopback), or ``PasswordDigest`` = Base64(SHA-1(nonce + created + secret)) with
  the user's digest secret (``users.py`` says why it is not the password). A token with a
  ``wsu:Created`` older than ``Settings.security.token_window`` (or further ahead than
  ``clock_skew``) is stale; a nonce is accepted once (remembered in the store and in the
  record beside the users file, so portals sharing either refuse each other's replays:
  ``application/nonces.py``); PasswordDigest needs both. An expired ``wsu:Timestamp`` is stale
  too. Such a request's SOAP header is parsed and its token checked before the rest of its
  body (``wsgi.Router.gate``).

Without a users file (local mode) every request is the local administrator's.

A request without valid credentials is ``AuthenticationFailed`` (the fault map makes it
``wsse:FailedAuthentication``, HTTP 401 with a Basic challenge) and changes nothing. Failures
are logged. Password guessing is bounded by ``logins.Logins`` (per user and place, per user;
never the real user's known credentials: HTTP 429 with Retry-After) and scrypt's
cost by ``passwords.Checks`` (a few at once, on threads of their own); bearer tokens and digest
secrets cannot be guessed and are checked at once, in microseconds.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import time
from typing import Callable

from lxml import etree

from cddlm import metrics, ns
from cddlm.application import repository as repo
from cddlm.application.store import Store
from cddlm.application.tenancy import LOCAL_ADMIN, Principal
from cddlm.application.nonces import NonceRecord
from cddlm.application.users import NAME, Directory, User
from cddlm.config import Security
from cddlm.errors import AuthenticationFailed, BadArgument
from cddlm.portal.logins import Logins
from cddlm.portal.passwords import Checks
from cddlm.xsdtypes import parse_datetime

log = logging.getLogger(__name__)

WSSE, WSU = ns.WSSE, ns.WSU
SECURITY = "{%s}Security" % WSSE
CHALLENGE = 'Basic realm="cddlm", charset="UTF-8"'
REQUIRED = ("authentication required: send a WS-Security UsernameToken, HTTP Basic credentials "
            "or a Bearer token")
WRONG = "authentication failed: unknown user or wrong password"


PRINCIPAL = "cddlm.principal"     # environ: who the edge found the request is from (``admit``)
REFUSED = "cddlm.refused"         # environ: why it is refused (an AuthenticationFailed, Busy)


class _Failed(AuthenticationFailed):
    """A failure to log (wrong or malformed credentials; not a request that carried none)."""

    def __init__(self, message: str, reason: str, user: str | None = None):
        super().__init__(message, challenge=CHALLENGE)
        self.reason = reason
        self.user = user


class _Pending:
    """The costly part of a check (scrypt): ``check()`` on a password-check thread, then
    ``then(result)`` gives the user or raises; ``undo()`` when the check did not run."""

    __slots__ = ("check", "known", "then", "undo")

    def __init__(self, check: Callable[[], object], known: bool, then: Callable[[object], User],
                 undo: Callable[[], None] = lambda: None):
        self.check, self.known, self.then, self.undo = check, known, then, undo


class Authenticator:
    """``soap(environ, headers)`` and ``http(environ)`` return the request's principal or
    raise ``AuthenticationFailed``; ``admit`` does the same work for the HTTP server before
    the request reaches a worker thread (``portal/wsgi.py``, ``Router.gate``), leaving its
    answer in the environ. ``directory`` None: local mode."""

    def __init__(self, directory: Directory | None, store: Store, security: Security, *,
                 clock: Callable[[], float] = time.time, nonces: NonceRecord | None = None):
        self.directory = directory
        self.store = store
        self.security = security
        self.clock = clock
        self.nonces = nonces
        self.logins = Logins(security.failures_per_minute, security.user_failures_per_minute,
                             v4_prefix=security.ipv4_prefix, v6_prefix=security.ipv6_prefix)
        self.checks = Checks(security.password_checks, security.password_wait) \
            if directory is not None else None

    @property
    def local(self) -> bool:
        return self.directory is None

    def close(self) -> None:
        if self.checks is not None:
            self.checks.close()
        if self.nonces is not None:
            self.nonces.close()

    # -- entry points -------------------------------------------------------------------------
    def soap(self, environ: dict, headers: list[etree._Element]) -> Principal:
        security = next((h for h in headers if h.tag == SECURITY), None)
        return self._now(environ, security)

    def http(self, environ: dict) -> Principal:
        return self._now(environ, None)

    def may_read(self, environ: dict) -> bool:
        """Whether the body of a request without HTTP credentials may be read: not while its
        place sends too many without any (``logins``); then ``environ[REFUSED]`` says so."""
        address = environ.get("REMOTE_ADDR") or ""
        refused = self.logins.refusal(address, "")
        if refused is None:
            return True
        environ[REFUSED] = AuthenticationFailed("%s; try again in %d s" % (refused[1], refused[0]),
                                                status=429, retry_after=refused[0], challenge=CHALLENGE)
        return False

    def without_credentials(self, environ: dict, unreadable: Exception | None = None,
                            limit: int = 0) -> None:
        """Refuse a SOAP request that carries no credentials (or a SOAP header the edge cannot
        read within ``limit`` bytes), counted against its place."""
        address = environ.get("REMOTE_ADDR") or ""
        self.logins.failed(address, "")
        message = REQUIRED if unreadable is None else (
            "%s (without HTTP credentials, the token must be in a SOAP header that ends within "
            "the first %d bytes: %s)" % (REQUIRED, limit, unreadable))
        environ[REFUSED] = AuthenticationFailed(message, challenge=CHALLENGE)

    @staticmethod
    def has_header_credentials(environ: dict) -> bool:
        return bool((environ.get("HTTP_AUTHORIZATION") or "").strip())

    def admit(self, environ: dict, security: etree._Element | None,
              resume: Callable[[], None]) -> bool:
        """Decide who sends the request, from its ``Authorization`` header, or from its
        ``wsse:Security`` header (``security``) when it has none: ``environ[PRINCIPAL]`` or
        ``environ[REFUSED]``. True: decided now (cheaply); False: a password is being checked,
        and ``resume()`` is called once it is decided (from a password-check thread)."""
        try:
            found = self._decide(environ, security)
        except Exception as e:   # noqa: BLE001 - AuthenticationFailed, Busy, the store failing
            environ[REFUSED] = e
            return True
        if not isinstance(found, _Pending):
            environ[PRINCIPAL] = found
            return True

        def done(result, error) -> None:
            try:
                if error is not None:
                    found.undo()
                    raise error
                environ[PRINCIPAL] = found.then(result)
            except Exception as e:   # noqa: BLE001 - as above
                environ[REFUSED] = e
            resume()

        self.checks.submit(found.check, done, found.known)
        return False

    def _now(self, environ: dict, security: etree._Element | None) -> Principal:
        """The principal, on this thread (the edge's ``admit`` may have decided already)."""
        if PRINCIPAL in environ:
            return environ[PRINCIPAL]
        if REFUSED in environ:
            raise environ[REFUSED]
        found = self._decide(environ, security)
        if isinstance(found, _Pending):
            try:
                result = self.checks.run(found.check, found.known)
            except Exception:
                found.undo()
                raise
            return found.then(result)
        return found

    def _decide(self, environ: dict, security: etree._Element | None) -> "Principal | _Pending":
        """The principal, or the costly part still to do; HTTP credentials first."""
        if self.directory is None:
            return LOCAL_ADMIN.at(environ.get("REMOTE_ADDR") or "")
        if security is not None and not self.has_header_credentials(environ):
            return self._conclude(environ, lambda: self._username_token(security, environ))
        return self._conclude(environ, lambda: self._http(environ))

    def _conclude(self, environ: dict, check: Callable[[], "User | _Pending"]) -> "Principal | _Pending":
        address = environ.get("REMOTE_ADDR") or ""
        try:
            user = check()
        except _Failed as e:
            metrics.auth_failed()
            log.warning("authentication failed from %s%s: %s", address,
                        " for %r" % e.user[:64] if e.user else "", e.reason)
            raise
        if isinstance(user, _Pending):
            return _Pending(user.check, user.known,
                            lambda result: self._conclude(environ, lambda: user.then(result)), user.undo)
        if isinstance(user, Principal):
            return user
        return Principal(user.name, user.admin, address)

    # -- HTTP ---------------------------------------------------------------------------------
    def _http(self, environ: dict) -> "User | _Pending":
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
            return self._password(environ, name, password, lambda user: user)
        if scheme == "bearer" and value:
            return self._token(value)
        raise AuthenticationFailed(REQUIRED, challenge=CHALLENGE)

    def _token(self, token: str) -> "User | _Pending":
        def then(user: object) -> User:
            if user is None:
                raise _Failed("authentication failed: unknown or revoked token", "bad token")
            return user
        if self.directory.token_costly(token):
            return _Pending(lambda: self.directory.check_token(token), False, then)
        return then(self.directory.check_token(token))

    def _password(self, environ: dict, name: str, password: str,
                  then: Callable[[User], User]) -> "User | _Pending":
        """A password attempt (``logins`` says when it is checked); ``then`` runs on success."""
        user = self.directory.cached_password(name, password)
        if user is not None:
            return then(user)
        if not NAME.match(name):
            raise _Failed(WRONG, "not a user name", name)
        address = environ.get("REMOTE_ADDR") or ""
        fingerprint = self.logins.fingerprint(name, password)
        known = self.logins.known(name, fingerprint)
        refused = None if known else self.logins.take(address, name)
        if refused is not None:
            wait, why = refused
            log.warning("authentication refused from %s for %r: %s", address, name, why)
            raise AuthenticationFailed("%s; try again in %d s" % (why, wait), status=429,
                                       retry_after=wait, challenge=CHALLENGE)

        def checked(user: object) -> User:
            if user is None:
                if known:       # not taken beforehand
                    self.logins.failed(address, name)
                raise _Failed(WRONG, "wrong password or unknown user", name)
            undo()
            self.logins.succeeded(name, fingerprint)
            return then(user)

        def undo() -> None:
            if not known:
                self.logins.give_back(address, name)

        return _Pending(lambda: self.directory.check_password(name, password), known, checked, undo)

    # -- WS-Security UsernameToken ------------------------------------------------------------------
    def _username_token(self, security: etree._Element, environ: dict) -> "User | _Pending":
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

        def once(user: User) -> User:
            """A token with a nonce is accepted once, by every portal of the store and of the
            users file (``application/nonces.py``)."""
            if nonce is not None:
                self._remember(name, nonce, parse_datetime(created_text) if created_text else now, now)
            return user

        if kind == "PasswordText":
            return self._password(environ, name, given, once)
        if kind == "PasswordDigest":
            if nonce is None or created_text is None:
                raise _Failed("authentication failed: a PasswordDigest needs a Nonce and a "
                              "wsu:Created", "digest without nonce or created", name)
            return once(self._digest(name, given.strip(), nonce, created_text.strip()))
        raise _Failed("authentication failed: unsupported password type %s" % kind,
                      "password type %s" % kind, name)

    def _remember(self, name: str, nonce: bytes, created: float, now: float) -> None:
        digest = hashlib.sha256(name.encode("utf-8") + b"\0" + nonce).hexdigest()
        expires = max(created, now) + self.security.token_window + self.security.clock_skew
        with self.store.write() as conn:
            fresh = repo.remember_nonce(conn, digest, expires)
        if fresh and self.nonces is not None:
            fresh = self.nonces.remember(digest, expires)
        if not fresh:
            raise _Failed("authentication failed: this nonce was used already (a replayed "
                          "message)", "replayed nonce", name)

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
            forgotten = repo.forget_nonces(conn, self.clock())
        return forgotten + (self.nonces.forget(self.clock()) if self.nonces is not None else 0)


def _time(text: str, name: str) -> float:
    try:
        return parse_datetime(text)
    except BadArgument:
        raise _Failed("authentication failed: %r is not an xsd:dateTime" % text.strip(),
                      "bad time", name) from None
