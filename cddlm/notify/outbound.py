"""Requests to notification consumers, made safely.

A consumer address comes from whoever subscribed, so the portal posts only where it is told
it may: http and https URLs without credentials whose host resolves, every address of it,
into the configured networks (``Settings.consumer_networks``; loopback and the private ranges
by default). The check runs when the subscription is made (a refusal is
``SubscribeCreationFailedFault``) and again before every request, because names can move.
Requests follow no redirects, ignore proxy variables, have connect and read timeouts and a
total deadline for reading the response, and read at most ``delivery_max_response_bytes`` of
it. A consumer accepted a Notify when it answers 2xx (202 with no body, usually).

What went wrong is reported (``lastError``) in coarse classes only: refused by the policy, no
answer (a refused connection, a timeout, a connection cut or a silent port all read the same,
so that subscriptions are no port scanner), or the HTTP status the consumer answered (never
bytes of its answer). The address check is ``cddlm.netsafe``'s, shared with probes and
descriptor fetches.

Each sender thread keeps one keep-alive ``requests.Session``, so a consumer host sees a few
long-lived connections rather than one per message.
"""

from __future__ import annotations

import threading
import time

import requests

from cddlm import netsafe
from cddlm.config import Settings
from cddlm.errors import NotificationError
from cddlm.netsafe import Resolver, resolve


def refused(message: str) -> NotificationError:
    return NotificationError("SubscribeCreationFailedFault", message)


def check_address(address: str, networks: tuple[str, ...], resolver: Resolver = resolve) -> None:
    """Raise ``SubscribeCreationFailedFault`` unless the portal may post to ``address``."""
    try:
        netsafe.vet(address, tuple(networks), resolver=resolver, what="consumer address")
    except netsafe.Refused as e:
        raise refused(str(e)) from None


NO_ANSWER = "no answer from the consumer (refused, unreachable, cut off or too slow)"


class Sender:
    """Posts requests to consumers; safe to share between threads."""

    def __init__(self, settings: Settings, resolver: Resolver = resolve):
        self.settings = settings
        self.resolver = resolver
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            session.trust_env = False          # no proxies, no .netrc: straight to the consumer
            with self._lock:
                self._sessions.append(session)
        return session

    def post(self, address: str, data: bytes, action: str) -> str | None:
        """Send one request; None when the consumer accepted it, else what went wrong."""
        s = self.settings
        try:
            check_address(address, s.consumer_networks, self.resolver)
        except NotificationError as e:
            return "refused: %s" % e.message
        deadline = time.monotonic() + s.delivery_connect_timeout + 2 * s.delivery_timeout
        try:
            r = self._session().post(address, data=data, allow_redirects=False, stream=True,
                                     timeout=(s.delivery_connect_timeout, s.delivery_timeout),
                                     headers={"Content-Type": "text/xml; charset=utf-8",
                                              "SOAPAction": '"%s"' % action})
        except requests.RequestException:
            return NO_ANSWER
        try:
            _read(r, s.delivery_max_response_bytes, deadline)
        except (requests.RequestException, OSError, TimeoutError):
            r.close()
            return NO_ANSWER
        if 200 <= r.status_code < 300:
            return None
        if 300 <= r.status_code < 400:
            return "the consumer answered HTTP %d: redirects are not followed" % r.status_code
        return "the consumer answered HTTP %d" % r.status_code

    def close(self) -> None:
        """Close every thread's connections."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()


def _read(r: requests.Response, cap: int, deadline: float) -> bytes:
    """At most ``cap`` bytes of the body; a longer body is cut (and its connection dropped)."""
    chunks, size = [], 0
    for chunk in r.iter_content(8192):
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            r.close()
            break
        if time.monotonic() > deadline:
            raise TimeoutError("the response took too long")
    return b"".join(chunks)[:cap]


