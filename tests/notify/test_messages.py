"""The messages the portal publishes and the Notify requests that carry them validate against
the project's schemas and against the unmodified standard ones."""

from __future__ import annotations

import pytest
from lxml import etree

from cddlm import ns, wsa
from cddlm.notify import messages, topics
from tests.conftest import require_shared
from tests.schemas import validate_envelope

APP = "urn:uuid:6f6f0c5a-9860-471a-bc8a-616ed54a4ab9"
SUB = "0123456789abcdef0123456789abcdef"
EVENTS = [
    (topics.LIFECYCLE, {"ResourceId": APP, "name": "web", "state": "instantiated", "previousState": None,
                        "timestamp": 1700000000.25, "sequence": 1, "stateInfo": None, "terminationInfo": None}),
    (topics.LIFECYCLE, {"ResourceId": APP, "name": None, "state": "failed", "previousState": "running",
                        "timestamp": 1700000001.0, "sequence": 4, "stateInfo": "web <died> & gone",
                        "terminationInfo": {"normal": False, "reason": "exit", "component": "web",
                                            "exitCode": 3, "signal": None, "time": 1700000001.0,
                                            "stderr": "trace\x00back\x1b[0m"}}),
    (topics.CREATED, {"ResourceId": APP, "name": "web", "timestamp": 1700000000.0,
                      "view": "0b8f80276a8c4cd9a6d1884b27668142", "portal": "http://127.0.0.1:8080/"}),
]


def notify(topic: str, producer: str, payloads: list[bytes]) -> bytes:
    param = etree.Element("{urn:consumer}key", nsmap={"c": "urn:consumer"})
    param.text = "k-1"
    route = messages.Route(SUB, "http://127.0.0.1:8080", producer, "0b8f80276a8c4cd9a6d1884b27668142",
                           topic, wsa.Reference("http://127.0.0.1:9/consumer", [param]))
    return messages.notify_request(route, route.head(), payloads)


def requests() -> list[bytes]:
    lifecycle = [etree.tostring(messages.payload(t, d)) for t, d in EVENTS if t == topics.LIFECYCLE]
    created = [etree.tostring(messages.payload(t, d)) for t, d in EVENTS if t == topics.CREATED]
    return [notify(topics.LIFECYCLE, APP, lifecycle), notify(topics.CREATED, topics.PORTAL, created)]


def test_notify_requests_validate_against_our_schemas():
    for data in requests():
        assert validate_envelope(data, None) == []


def test_notify_requests_validate_against_the_standard_schemas():
    shared = require_shared("standards/b-2.xsd").parents[1]
    for data in requests():
        assert validate_envelope(data, shared) == []


def test_a_notify_holds_each_message_in_order_with_its_references():
    doc = etree.fromstring(requests()[0])
    header = doc.find("{%s}Header" % ns.SOAP11_ENV)
    assert header.findtext("{%s}To" % ns.WSA) == "http://127.0.0.1:9/consumer"
    assert header.findtext("{%s}Action" % ns.WSA) == messages.NOTIFY_ACTION
    key = header.find("{urn:consumer}key")
    assert key.text == "k-1" and key.get("{%s}IsReferenceParameter" % ns.WSA) == "true"
    holders = doc.findall(".//{%s}NotificationMessage" % ns.WSNT)
    assert [h.findtext(".//{%s}sequence" % ns.API) for h in holders] == ["1", "4"]
    first = holders[0]
    topic = first.find("{%s}Topic" % ns.WSNT)
    prefix, local = topic.text.split(":")
    assert (topic.nsmap[prefix], local, topic.get("Dialect")) == (ns.API, "Lifecycle", ns.TOPIC_SIMPLE)
    assert first.findtext("{%s}SubscriptionReference/{%s}Address" % (ns.WSNT, ns.WSA)) \
        == "http://127.0.0.1:8080/cddlm/subscriptions/" + SUB
    assert first.findtext("{%s}ProducerReference/{%s}Address" % (ns.WSNT, ns.WSA)) \
        == "http://127.0.0.1:8080/cddlm/applications/0b8f80276a8c4cd9a6d1884b27668142"
    assert first.findtext("{%s}ProducerReference//{%s}ResourceId" % (ns.WSNT, ns.API)) == APP
    failed = holders[1].find(".//{%s}lifecycleEvent" % ns.API)
    assert failed.findtext("{%s}stateInfo" % ns.API) == "web <died> & gone"
    assert failed.findtext("{%s}terminationInfo/{%s}stderr" % (ns.API, ns.API)) == "trace\ufffdback\ufffd[0m"


def test_creation_events_name_the_new_application_and_the_portal_as_producer():
    holder = etree.fromstring(requests()[1]).find(".//{%s}NotificationMessage" % ns.WSNT)
    assert holder.findtext("{%s}ProducerReference/{%s}Address" % (ns.WSNT, ns.WSA)) \
        == "http://127.0.0.1:8080/cddlm/portal"
    event = holder.find(".//{%s}applicationCreatedEvent" % ns.API)
    ref = wsa.parse_epr(event.find("{%s}applicationReference" % ns.API))
    assert ref.address == "http://127.0.0.1:8080/cddlm/applications/0b8f80276a8c4cd9a6d1884b27668142"
    assert ref.parameter("{%s}ResourceId" % ns.API) == APP


@pytest.mark.parametrize("sub_id", [SUB, "00000000000000000000000000000000"])
def test_subscription_resource_ids_round_trip(sub_id):
    import uuid
    assert uuid.UUID(messages.resource_id(sub_id).split(":")[-1]).hex == sub_id
