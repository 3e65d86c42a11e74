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
a total deadline and a size cap (``cddlm.outbound``, the one HTTP client every outbound
request goes through). ``http_status`` and ``tcp_check`` are the probes. ``url_under`` is how
an operator's URL prefix (``--allow-descriptor-url``, ``--allow-delegate-url``) is matched.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from typing import Callable
from urllib.parse import unquote, urlsplit

from cddlm import outbound
from cddlm.outbound import Target, Unreachable

__all__ = ["Refused", "Target", "Unreachable", "get", "http_status", "tcp_check", "literal_addresses", "url_under", "vet",
           "vet_host"]

Resolver = Callable[[str, int], list[str]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(Exception):
    """The address may not be used (or does not resolve); the message says why."""


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


def literal_addresses(prefixes: tuple[str, ...]) -> tuple[str, ...]:
    """The addresses that URL prefixes name literally (``http://10.0.0.5:8080/``): an operator
    who allows such a prefix allows that address."""
    out = []
    for prefix in prefixes:
        try:
            out.append(str(ipaddress.ip_address((urlsplit(prefix).hostname or "").strip("[]"))))
        except ValueError:
            pass
    return tuple(out)


def _origin_and_path(url: str) -> tuple[tuple[str, str, int], str, str]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    return (scheme, (parts.hostname or "").lower(), port), parts.path or "/", parts.query


def url_under(url: str, prefix: str) -> bool:
    """Whether ``url`` is under the operator's ``prefix``: the same scheme, host and port, and
    its path the prefix's path or below it (``http://h/a`` covers ``http://h/a/b``, not
    ``http://h/ab`` nor ``http://h.evil/a``); a path with ``.`` or ``..`` segments is under
    nothing. A prefix with a query covers only itself."""
    try:
        origin, path, query = _origin_and_path(url)
        p_origin, p_path, p_query = _origin_and_path(prefix)
    except ValueError:
        return False
    if origin != p_origin or not origin[1] or urlsplit(url).username is not None:
        return False
    if any(seg in (".", "..") for seg in unquote(path).split("/")):
        return False
    if p_query:
        return (path, query) == (p_path, p_query)
    return path == p_path or path.startswith(p_path if p_path.endswith("/") else p_path + "/")


def get(url: str, networks: tuple[str, ...], *, public: bool = False, max_bytes: int,
        timeout: float = 10.0, resolver: Resolver = resolve) -> bytes:
    """The body of a 200 answer to GET ``url``: ``Refused`` when policy forbids it,
    ``Unreachable`` when it cannot be had (another status, a redirect, too large, too slow)."""
    t = vet(url, networks, public=public, resolver=resolver)
    r = outbound.exchange(t, "GET", headers={"Accept": "*/*"}, timeout=timeout, max_bytes=max_bytes)
    if 300 <= r.status < 400:
        raise Unreachable("HTTP %d: redirects are not followed" % r.status)
    if r.status != 200:
        raise Unreachable("HTTP %d" % r.status)
    if not r.complete:
        raise Unreachable("larger than %d bytes" % max_bytes)
    return r.body


def http_status(url: str, networks: tuple[str, ...], *, public: bool = False,
                timeout: float = 2.0, resolver: Resolver = resolve) -> int:
    """The status of GET ``url`` (the body is not read)."""
    t = vet(url, networks, public=public, resolver=resolver)
    return outbound.exchange(t, "GET", timeout=timeout, max_bytes=0).status


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
    raise Unreachable("%s port %d: %s" % (host, port, outbound.coarse(last)), sent=False)
