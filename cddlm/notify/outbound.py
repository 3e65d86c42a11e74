"""Requests to notification consumers, made safely.

A consumer address comes from whoever subscribed, so the portal posts only where it is told
it may: http and https URLs without credentials whose host resolves, every address of it,
into the configured networks (``Settings.consumer_networks``; loopback and the private ranges
by default). The check runs when the subscription is made (a refusal is
``SubscribeCreationFailedFault``) and again before every request, because names can move.
Requests go through ``cddlm.outbound`` (the portal's one HTTP client) to the addresses just
checked (not to a second lookup of the name): they follow no redirects, ignore proxy
variables, have connect and read timeouts and an absolute deadline for the whole exchange
(``delivery_connect_timeout + 2 * delivery_timeout``, enforced by shutting the socket: a
consumer that trickles its answer a byte at a time is cut off on time), and read at most
``delivery_max_response_bytes`` of the answer. A consumer accepted a Notify when it answers
2xx (202 with no body, usually).

What went wrong is reported (``lastError``) in coarse classes only: refused by the policy, no
answer (a refused connection, a timeout, a connection cut or a silent port all read the same,
so that subscriptions are no port scanner), or the HTTP status the consumer answered (never
bytes of its answer). The address check is ``cddlm.netsafe``'s, shared with probes and
descriptor fetches.

Connections are kept alive and reused per consumer address, so a consumer host sees a few
long-lived connections rather than one per message.
"""

from __future__ import annotations

from cddlm import netsafe, outbound
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

    def post(self, address: str, data: bytes, action: str) -> str | None:
        """Send one request; None when the consumer accepted it, else what went wrong."""
        s = self.settings
        try:
            t = netsafe.vet(address, tuple(s.consumer_networks), resolver=self.resolver,
                            what="consumer address")
        except netsafe.Refused as e:
            return "refused: %s" % e
        try:
            r = outbound.exchange(t, "POST", data, {"Content-Type": "text/xml; charset=utf-8",
                                                    "SOAPAction": '"%s"' % action},
                                  timeout=s.delivery_connect_timeout + 2 * s.delivery_timeout,
                                  connect_timeout=s.delivery_connect_timeout,
                                  read_timeout=s.delivery_timeout,
                                  max_bytes=s.delivery_max_response_bytes, keep_alive=True)
        except outbound.Unreachable:
            return NO_ANSWER
        if 200 <= r.status < 300:
            return None     # (an answer past the cap is cut, unread: the status is what counts)
        if 300 <= r.status < 400:
            return "the consumer answered HTTP %d: redirects are not followed" % r.status
        return "the consumer answered HTTP %d" % r.status

    def close(self) -> None:
        """Close the kept-alive connections (to consumers and every other destination)."""
        outbound.POOL.close_idle()
