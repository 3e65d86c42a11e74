"""Requests to notification consumers, made safely.

A consumer address comes from whoever subscribed, so the portal posts only where it is told
it may: http and https URLs without credentials whose host resolves, every address of it,
into the configured networks (``Settings.consumer_networks``; loopback and the private ranges
by default). The check runs when the subscription is made (a refusal is
``SubscribeCreationFailedFault``) and again before every request, because names can move.
Requests follow no redirects, ignore proxy variables, have connect and read timeouts and a
total deadline for reading the response, and read at most ``delivery_max_response_bytes`` of
it. A consumer accepted a Notify when it answers 2xx (202 with no body, usually).

Each sender thread keeps one keep-alive ``requests.Session``, so a consumer host sees a few
long-lived connections rather than one per message.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import threading
import time
from typing import Callable
from urllib.parse import urlsplit

import requests

from cddlm import xmlsafe
from cddlm.config import Settings
from cddlm.errors import BadArgument, NotificationError

Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system resolver)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


def refused(message: str) -> NotificationError:
    return NotificationError("SubscribeCreationFailedFault", message)


def check_address(address: str, networks: tuple[str, ...], resolver: Resolver = resolve) -> None:
    """Raise ``SubscribeCreationFailedFault`` unless the portal may post to ``address``."""
    try:
        parts = urlsplit(address)
        port = parts.port
    except ValueError as e:
        raise refused("consumer address %r is not a URL: %s" % (address, e)) from None
    if parts.scheme not in ("http", "https"):
        raise refused("consumer address %r: only http and https consumers are supported" % address)
    if not parts.hostname:
        raise refused("consumer address %r names no host" % address)
    if parts.username is not None or parts.password is not None:
        raise refused("consumer address %r: credentials in the address are not supported" % address)
    host = parts.hostname
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            addresses = resolver(host, port or (443 if parts.scheme == "https" else 80))
        except (OSError, UnicodeError) as e:
            raise refused("consumer host %r does not resolve: %s" % (host, e)) from None
    if not addresses:
        raise refused("consumer host %r does not resolve" % host)
    allowed = _networks(tuple(networks))
    for text in addresses:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not any(ip.version == net.version and ip in net for net in allowed):
            raise refused("consumer host %r (%s) is not in a network this portal may notify "
                          "(allowed: %s)" % (host, ip, ", ".join(networks) or "none"))


@functools.lru_cache(maxsize=8)
def _networks(networks: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """The configured networks, parsed once per configuration rather than on every check
    (a sender checks before every request)."""
    return tuple(ipaddress.ip_network(n, strict=False) for n in networks)


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
        except requests.RequestException as e:
            return "cannot post to %s: %s" % (address, _reason(e))
        try:
            body = _read(r, s.delivery_max_response_bytes, deadline)
        except (requests.RequestException, OSError, TimeoutError) as e:
            r.close()
            return "%s: no complete response: %s" % (address, _reason(e))
        if 200 <= r.status_code < 300:
            return None
        if 300 <= r.status_code < 400:
            return "HTTP %d from %s: redirects are not followed" % (r.status_code, address)
        return "HTTP %d from %s%s" % (r.status_code, address, _fault_text(body))

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


def _fault_text(body: bytes) -> str:
    if not body:
        return ""
    try:
        doc = xmlsafe.parse(body, max_depth=64)
    except BadArgument:
        return ""
    text = doc.findtext(".//faultstring")
    return ": " + text.strip()[:300] if text else ""


def _reason(e: BaseException) -> str:
    """The innermost cause, without urllib3's repetition of the URL and pool."""
    while e.__context__ is not None and isinstance(e.__context__, Exception):
        e = e.__context__
    text = str(e)
    return text.split("): ", 1)[-1][:300] if "): " in text else text[:300]
