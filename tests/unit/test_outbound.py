"""The one outbound HTTP client (cddlm/outbound.py): an absolute deadline however the other
side dribbles, a size cap however much it sends, kept-alive connections reused only while
sound; and what rests on it (netsafe.get, the notification sender)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from cddlm import netsafe, outbound
from cddlm.config import Settings
from cddlm.notify.outbound import NO_ANSWER, Sender
from tests.rogue import Rogue, answer, stream, trickle, wait_for

LOOPBACK = ("127.0.0.0/8",)


def finishes(fn, within: float):
    """``fn()``'s result or exception, asserting it came within ``within`` seconds (a call that
    would hang for ever is left behind in its thread, and the test fails)."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except Exception as e:      # noqa: BLE001 - handed to the test
            out["error"] = e
    started = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(within + 5)
    assert not t.is_alive(), "still waiting after %.1f s" % (time.monotonic() - started)
    elapsed = time.monotonic() - started
    assert elapsed < within, "took %.2f s (deadline %.2f)" % (elapsed, within)
    return out


def test_a_peer_that_dribbles_its_answer_is_cut_off_at_the_deadline():
    # one byte every 0.2 s: each read is well within any per-read timeout
    with Rogue(trickle(0.2)) as peer:
        t = netsafe.vet(peer.url, LOOPBACK)
        out = finishes(lambda: outbound.exchange(t, "POST", b"<x/>", timeout=1.0, max_bytes=1000), 2.0)
        assert isinstance(out["error"], outbound.Unreachable) and out["error"].expired
        # netsafe.get (referenced descriptors) rests on the same deadline
        out = finishes(lambda: netsafe.get(peer.url, LOOPBACK, max_bytes=1000, timeout=1.0), 2.0)
        assert isinstance(out["error"], netsafe.Unreachable)


def test_within_bounds_every_exchange_of_a_thread_by_one_deadline():
    with Rogue(trickle(0.2)) as peer:
        t = netsafe.vet(peer.url, LOOPBACK)

        def three_calls():
            errors = []
            with outbound.within(1.0):
                for _ in range(3):
                    try:
                        outbound.exchange(t, "POST", b"<x/>", timeout=5.0, max_bytes=1000)
                    except outbound.Unreachable as e:
                        errors.append(e)
            return errors
        out = finishes(three_calls, 2.0)
        assert len(out["value"]) == 3


def test_a_huge_answer_is_read_only_up_to_the_cap():
    with Rogue(stream(400 * 1024 * 1024)) as peer:
        t = netsafe.vet(peer.url, LOOPBACK)
        out = finishes(lambda: outbound.exchange(t, "POST", b"<x/>", timeout=10.0, max_bytes=100_000), 5.0)
        r = out["value"]
        assert r.status == 200 and not r.complete and r.body == b""
        out = finishes(lambda: netsafe.get(peer.url, LOOPBACK, max_bytes=100_000, timeout=10), 5.0)
        assert "larger than 100000 bytes" in str(out["error"])


def test_kept_alive_connections_are_reused_and_a_closed_one_is_not():
    with Rogue(answer(200, b"<ok/>")) as peer:
        t = netsafe.vet(peer.url, LOOPBACK)
        for _ in range(3):
            r = outbound.exchange(t, "POST", b"<x/>", timeout=5, max_bytes=100, keep_alive=True)
            assert (r.status, r.body, r.complete) == (200, b"<ok/>", True)
        assert len(peer._conns) == 1 and len(peer.requests) == 3
        (idle,) = peer._conns           # the peer closes its side while the connection idles
        idle.shutdown(socket.SHUT_RDWR)
        assert wait_for(lambda: idle.fileno() == -1, 5)
        r = outbound.exchange(t, "POST", b"<x/>", timeout=5, max_bytes=100, keep_alive=True)
        assert r.body == b"<ok/>" and len(peer._conns) == 2


def settings(**kw) -> Settings:
    base = dict(delivery_timeout=0.5, delivery_connect_timeout=0.5, delivery_max_response_bytes=1000,
                consumer_networks=LOOPBACK)
    return Settings(**dict(base, **kw))


@pytest.mark.parametrize("behaviour", [trickle(0.2), trickle(0.2, b"HTTP/1.1 202 Accepted\r\nA: b\r\n")])
def test_a_consumer_that_dribbles_holds_a_sender_no_longer_than_its_deadline(behaviour):
    # deadline: connect + 2 x read = 1.5 s, though the consumer answers every 0.2 s
    with Rogue(behaviour) as consumer:
        out = finishes(lambda: Sender(settings()).post(consumer.url, b"<x/>", "urn:a"), 2.5)
    assert out["value"] == NO_ANSWER


def test_a_consumer_that_streams_is_read_only_up_to_the_cap():
    with Rogue(stream(400 * 1024 * 1024)) as consumer:
        out = finishes(lambda: Sender(settings()).post(consumer.url, b"<x/>", "urn:a"), 2.0)
    assert out["value"] is None         # 200: accepted; the rest of its answer was never read
