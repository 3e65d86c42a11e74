"""Connections to addresses users give the portal, made safely: the outbound policy.

Notification consumers (``notify/outbound.py``), probes and readiness checks
(``application/enactment/local.py``) and referenced or imported descriptors
(``application/loader.py``) all name hosts the portal then connects to: a user could point
them at the portal's own network (a port scanner, the cloud metadata service, an admin page
on loopback). So every such address passes ``vet`` first: only the schemes the caller allows,
no credentials in the URL, and every address the host resolves to inside the networks the
operator allows for that purpose (``public=True`` adds every globally routable address). The
connection then goes to an address that was checked, not to a second lookup of the name (a
name that changes between the check and the connection gets nowhere).

``get`` fetches a document: no redirects (a 3xx is an answer, not a place to go), no proxy,
connect and read timeouts, a total deadline and a size cap. ``http_status`` and
``tcp_check`` are the probes.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

Resolver = Callable[[str, int], list[str]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(Exception):
    """The address may not be used (or does not resolve); the message says why."""


class Unreachable(Exception):
    """The address was allowed, but connecting or reading failed; the message says how,
    in coarse terms (never bytes of what the other side sent)."""


def resolve(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system resolver)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({info[4][0] for info in infos})


@functools.lru_cache(maxsize=32)
def networks_of(networks: tuple[str, ...]) -> tuple[Network, ...]:
    """The configured networks, parsed once per configuration."""
    return tuple(ipaddress.ip_network(n, strict=False) for n in networks)


def allowed_ip(text: str, networks: tuple[str, ...], public: bool = False) -> bool:
    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if public and ip.is_global:
        return True
    return any(ip.version == net.version and ip in net for net in networks_of(tuple(networks)))


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str                 # as written (the HTTP Host and the TLS server name)
    port: int
    addresses: tuple[str, ...]  # every address of host, each one allowed
    target: str               # path and query, what the request line asks for


def vet_host(host: str, port: int, networks: tuple[str, ...], *, public: bool = False,
             resolver: Resolver = resolve, what: str = "host") -> tuple[str, ...]:
    """Every address of ``host``, once each is known to be allowed; ``Refused`` otherwise."""
    try:
        addresses = [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        try:
            addresses = resolver(host, port)
        except (OSError, UnicodeError) as e:
            raise Refused("%s %r does not resolve: %s" % (what, host, getattr(e, "strerror", None) or e)) \
                from None
    if not addresses:
        raise Refused("%s %r does not resolve" % (what, host))
    for text in addresses:
        if not allowed_ip(text, networks, public):
            allowed = ", ".join(networks) or "none"
            raise Refused("%s %r (%s) is not in a network this portal may connect to for this "
                          "(allowed: %s%s)" % (what, host, text.split("%", 1)[0],
                                               "public addresses, " if public else "", allowed))
    return tuple(addresses)


def vet(url: str, networks: tuple[str, ...], *, public: bool = False,
        schemes: tuple[str, ...] = ("http", "https"), resolver: Resolver = resolve,
        what: str = "address") -> Target:
    """Check ``url`` against the outbound policy; ``Refused`` saying why it may not be used."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise Refused("%s %r is not a URL: %s" % (what, url, e)) from None
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise Refused("%s %r: only %s URLs are supported" % (what, url, " and ".join(schemes)))
    if not parts.hostname:
        raise Refused("%s %r names no host" % (what, url))
    if parts.username is not None or parts.password is not None:
        raise Refused("%s %r: credentials in the address are not supported" % (what, url))
    port = port or (443 if scheme == "https" else 80)
    addresses = vet_host(parts.hostname, port, networks, public=public, resolver=resolver, what=what)
    target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    return Target(scheme, parts.hostname, port, addresses, target)


def _connect(t: Target, timeout: float) -> http.client.HTTPConnection:
    """An HTTP(S) connection to the first checked address that answers, speaking to the name
    (Host header, TLS server name and certificate check) as written."""
    last: Exception | None = None
    for address in t.addresses:
        try:
            sock = socket.create_connection((address, t.port), timeout=timeout)
        except OSError as e:
            last = e
            continue
        if t.scheme == "https":
            try:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=t.host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise Unreachable("TLS with %s failed: %s" % (t.host, _coarse(e))) from None
        conn = http.client.HTTPConnection(t.host, t.port, timeout=timeout)
        conn.sock = sock
        return conn
    raise Unreachable("cannot connect to %s port %d: %s" % (t.host, t.port, _coarse(last)))


def _coarse(e: BaseException | None) -> str:
    """What went wrong, in classes that tell nothing about the other side's network: a refused
    connection and a timeout both read "unreachable"."""
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "unreachable or too slow"
    if isinstance(e, ssl.SSLCertVerificationError):
        return "certificate not trusted"
    if isinstance(e, ssl.SSLError):
        return "TLS error"
    return "unreachable or too slow"


def get(url: str, networks: tuple[str, ...], *, public: bool = False, max_bytes: int,
        timeout: float = 10.0, resolver: Resolver = resolve) -> bytes:
    """The body of a 200 answer to GET ``url``: ``Refused`` when policy forbids it,
    ``Unreachable`` when it cannot be had (another status, a redirect, too large, too slow)."""
    t = vet(url, networks, public=public, resolver=resolver)
    deadline = time.monotonic() + timeout
    conn = _connect(t, timeout)
    try:
        conn.putrequest("GET", t.target, skip_accept_encoding=True)
        conn.putheader("Accept", "*/*")
        conn.putheader("Connection", "close")
        conn.endheaders()
        r = conn.getresponse()
        if 300 <= r.status < 400:
            raise Unreachable("HTTP %d: redirects are not followed" % r.status)
        if r.status != 200:
            raise Unreachable("HTTP %d" % r.status)
        declared = r.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise Unreachable("larger than %d bytes" % max_bytes)
        chunks, size = [], 0
        while True:
            if time.monotonic() > deadline:
                raise Unreachable("took longer than %gs" % timeout)
            chunk = r.read1(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                raise Unreachable("larger than %d bytes" % max_bytes)
            chunks.append(chunk)
        return b"".join(chunks)
    except (OSError, http.client.HTTPException) as e:
        raise Unreachable("no complete answer: %s" % _coarse(e)) from None
    finally:
        conn.close()


def http_status(url: str, networks: tuple[str, ...], *, public: bool = False,
                timeout: float = 2.0, resolver: Resolver = resolve) -> int:
    """The status of GET ``url`` (the body is not read)."""
    t = vet(url, networks, public=public, resolver=resolver)
    conn = _connect(t, timeout)
    try:
        conn.putrequest("GET", t.target, skip_accept_encoding=True)
        conn.putheader("Connection", "close")
        conn.endheaders()
        return conn.getresponse().status
    except (OSError, http.client.HTTPException) as e:
        raise Unreachable("no answer: %s" % _coarse(e)) from None
    finally:
        conn.close()


def tcp_check(host: str, port: int, networks: tuple[str, ...], *, public: bool = False,
              timeout: float = 2.0, resolver: Resolver = resolve) -> None:
    """Return when ``host:port`` accepts a connection; ``Refused`` or ``Unreachable``."""
    last: Exception | None = None
    for address in vet_host(host, port, networks, public=public, resolver=resolver):
        try:
            socket.create_connection((address, port), timeout=timeout).close()
            return
        except OSError as e:
            last = e
    raise Unreachable("%s port %d: %s" % (host, port, _coarse(last)))
