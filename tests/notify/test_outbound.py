"""Outbound safety: which consumer addresses are allowed, and how requests to them behave."""

from __future__ import annotations

import time

import pytest

from cddlm.config import Settings
from cddlm.errors import NotificationError
from cddlm.notify.outbound import NO_ANSWER, Sender, check_address
from tests.notify.helpers import black_hole, unreachable, wsgi_server

LOOPBACK = ("127.0.0.0/8", "::1/128")


def resolver(*addresses):
    return lambda host, port: list(addresses)


@pytest.mark.parametrize("address", [
    "http://127.0.0.1:9/c", "https://127.0.0.1/c", "http://[::1]:8000/", "http://consumer.example/x",
])
def test_allowed_addresses(address):
    check_address(address, LOOPBACK, resolver("127.0.0.1", "::1"))


@pytest.mark.parametrize("address,why", [
    ("ftp://127.0.0.1/c", "only http and https"),
    ("file:///etc/passwd", "only http and https"),
    ("http:///path", "names no host"),
    ("http://u:p@127.0.0.1/", "credentials"),
    ("http://127.0.0.1:99999/", "not a URL"),
    ("http://10.1.2.3/", "not in a network"),
    ("http://[::ffff:10.1.2.3]/", "not in a network"),
    ("urn:uuid:1234", "only http and https"),
])
def test_refused_addresses(address, why):
    with pytest.raises(NotificationError) as e:
        check_address(address, LOOPBACK, resolver("127.0.0.1"))
    assert e.value.fault == "SubscribeCreationFailedFault" and why in e.value.message


def test_every_resolved_address_must_be_allowed():
    """A name that also resolves outside the allowed networks is refused (DNS games)."""
    with pytest.raises(NotificationError) as e:
        check_address("http://consumer.example/", LOOPBACK, resolver("127.0.0.1", "192.0.2.7"))
    assert "192.0.2.7" in e.value.message

    def broken(host, port):
        raise OSError("Name or service not known")
    with pytest.raises(NotificationError) as e:
        check_address("http://consumer.example/", LOOPBACK, broken)
    assert "does not resolve" in e.value.message


def test_ipv4_mapped_addresses_count_as_ipv4():
    check_address("http://[::ffff:127.0.0.1]/", ("127.0.0.0/8",), resolver())


def settings(**kw) -> Settings:
    base = dict(delivery_timeout=1.0, delivery_connect_timeout=1.0, delivery_max_response_bytes=1000,
                consumer_networks=LOOPBACK)
    base.update(kw)
    return Settings(**base)


class Recorder:
    """A consumer whose answer a test chooses; it records every request."""

    def __init__(self, status="202 Accepted", body=b"", headers=(), delay=0.0):
        self.status, self.body, self.headers, self.delay = status, body, list(headers), delay
        self.requests: list[dict] = []
        self.connections: set[str] = set()

    def __call__(self, environ, start_response):
        self.requests.append({"path": environ["PATH_INFO"], "action": environ.get("HTTP_SOAPACTION"),
                              "body": environ["wsgi.input"].read()})
        self.connections.add(environ.get("REMOTE_PORT"))
        time.sleep(self.delay)
        start_response(self.status, [("Content-Length", str(len(self.body)))] + self.headers)
        return [self.body]


def test_accepted_requests_share_a_connection_and_a_soap_fault_is_an_error():
    ok = Recorder()
    sender = Sender(settings())
    with wsgi_server(ok) as url:
        assert sender.post(url + "/c", b"<x/>", "urn:act") is None
        assert sender.post(url + "/d", b"<y/>", "urn:act") is None
    assert ok.requests[0] == {"path": "/c", "action": '"urn:act"', "body": b"<x/>"}
    assert len(ok.requests) == 2 and len(ok.connections) == 1     # keep-alive
    fault = Recorder("500 Internal Server Error", b'<e:Envelope xmlns:e="http://schemas.xmlsoap.org/soap/'
                     b'envelope/"><e:Body><e:Fault><faultcode>e:Client</faultcode><faultstring>no thanks'
                     b'</faultstring></e:Fault></e:Body></e:Envelope>')
    with wsgi_server(fault) as url:
        error = Sender(settings()).post(url + "/c", b"<x/>", "urn:act")
    # the status, never bytes of the answer (a consumer address may be any service)
    assert error == "the consumer answered HTTP 500" and "no thanks" not in error


def test_redirects_are_not_followed():
    target = Recorder()
    with wsgi_server(target) as elsewhere:
        moved = Recorder("302 Found", headers=[("Location", elsewhere + "/stolen")])
        with wsgi_server(moved) as url:
            error = Sender(settings()).post(url + "/c", b"<x/>", "urn:act")
    assert "redirects are not followed" in error
    assert len(moved.requests) == 1 and target.requests == []


def test_a_large_response_is_cut_and_a_slow_one_times_out():
    big = Recorder(body=b"x" * 100_000)
    with wsgi_server(big) as url:
        assert Sender(settings()).post(url + "/c", b"<x/>", "urn:act") is None   # 2xx: accepted
    quick = settings(delivery_timeout=0.3, delivery_connect_timeout=0.3)
    slow = Recorder(delay=1.0)
    with wsgi_server(slow) as url:
        started = time.monotonic()
        error = Sender(quick).post(url + "/c", b"<x/>", "urn:act")
        assert error == NO_ANSWER and time.monotonic() - started < 0.9
    with black_hole() as hole:
        started = time.monotonic()
        error = Sender(quick).post(hole, b"<x/>", "urn:act")
        assert error == NO_ANSWER and time.monotonic() - started < 0.9


def test_addresses_are_checked_again_before_every_request():
    recorder = Recorder()
    with wsgi_server(recorder) as url:
        error = Sender(settings(consumer_networks=("10.0.0.0/8",))).post(url + "/c", b"<x/>", "urn:a")
    assert error.startswith("refused:") and recorder.requests == []
    error = Sender(settings()).post(unreachable(), b"<x/>", "urn:a")
    assert error == NO_ANSWER      # a closed port reads as a silent one: no port scanner
