"""Topic expressions, filters, termination times and the subscribe option, without a store."""

from __future__ import annotations

import json

import pytest
from lxml import etree

from cddlm import ns
from cddlm.application.options import Option
from cddlm.errors import BadArgument, NotificationError, QueryError
from cddlm.notify import messages, parse, topics
from cddlm.xpathsafe import XPathPool

SIMPLE, CONCRETE = ns.TOPIC_SIMPLE, ns.TOPIC_CONCRETE
NSDECL = 'xmlns:wsnt="%s" xmlns:api="%s" xmlns:wsa="%s" xmlns:xsi="%s"' % (ns.WSNT, ns.API, ns.WSA, ns.XSI)


def el(xml: str) -> etree._Element:
    return etree.fromstring(xml.replace("NS", NSDECL))


def expression(text: str, dialect: str = SIMPLE, extra: str = "") -> etree._Element:
    return el('<wsnt:TopicExpression NS %s Dialect="%s">%s</wsnt:TopicExpression>' % (extra, dialect, text))


@pytest.mark.parametrize("text,dialect,kind", [
    ("api:Lifecycle", SIMPLE, topics.APPLICATION),
    ("  api:Lifecycle\n", CONCRETE, topics.APPLICATION),
    ("api:ApplicationCreated", SIMPLE, topics.PORTAL),
    ("d:ApplicationCreated", CONCRETE, topics.PORTAL),
])
def test_supported_topics_resolve_through_the_expressions_namespaces(text, dialect, kind):
    extra = 'xmlns:d="%s"' % ns.API
    assert topics.topic_of(expression(text, dialect, extra), kind) == topics.TOPICS[kind]


def test_an_unprefixed_name_uses_the_default_namespace():
    expr = el('<wsnt:TopicExpression NS xmlns="%s" Dialect="%s">Lifecycle</wsnt:TopicExpression>'
              % (ns.API, SIMPLE))
    assert topics.topic_of(expr, topics.APPLICATION) == topics.LIFECYCLE


@pytest.mark.parametrize("text,dialect,kind,fault", [
    ("api:Lifecycle", SIMPLE, topics.PORTAL, "TopicNotSupportedFault"),
    ("api:ApplicationCreated", SIMPLE, topics.APPLICATION, "TopicNotSupportedFault"),
    ("api:Lifecycle/sub", CONCRETE, topics.APPLICATION, "TopicNotSupportedFault"),
    ("Lifecycle", SIMPLE, topics.APPLICATION, "TopicNotSupportedFault"),       # no namespace
    ("api:Lifecycle/sub", SIMPLE, topics.APPLICATION, "InvalidTopicExpressionFault"),
    ("api:*", CONCRETE, topics.APPLICATION, "InvalidTopicExpressionFault"),
    ("api:Lifecycle//x", CONCRETE, topics.APPLICATION, "InvalidTopicExpressionFault"),
    ("api:Lifecycle|api:Other", CONCRETE, topics.APPLICATION, "InvalidTopicExpressionFault"),
    ("", SIMPLE, topics.APPLICATION, "InvalidTopicExpressionFault"),
    ("x:Lifecycle", SIMPLE, topics.APPLICATION, "InvalidTopicExpressionFault"),
    ("api:Lifecycle", ns.TOPIC_FULL, topics.APPLICATION, "TopicExpressionDialectUnknownFault"),
    ("api:Lifecycle", "", topics.APPLICATION, "TopicExpressionDialectUnknownFault"),
])
def test_bad_expressions_name_their_fault(text, dialect, kind, fault):
    with pytest.raises(NotificationError) as e:
        topics.topic_of(expression(text, dialect), kind)
    assert e.value.fault == fault


def test_element_content_is_not_a_topic_expression():
    with pytest.raises(NotificationError) as e:
        topics.topic_of(expression("<api:Lifecycle/>"), topics.APPLICATION)
    assert e.value.fault == "InvalidTopicExpressionFault"


def sample(kind=topics.APPLICATION):
    return messages.SAMPLES[kind]()


@pytest.fixture(scope="module")
def pool():
    p = XPathPool(1, seconds=2.0)
    yield p
    p.close()


def trier(pool, kind=topics.APPLICATION):
    """What the portal does at subscribe: try the filters on a sample, in a helper."""
    def tried(filters):
        try:
            pool.filter(filters, [etree.tostring(sample(kind))], 2.0, strict=True)
        except QueryError as e:
            raise topics.fault("InvalidMessageContentExpressionFault", e.message) from None
    return tried


def test_no_filter_means_the_producers_topic_and_is_written_out():
    f = topics.parse_filter(None, topics.APPLICATION)
    assert f.topic == topics.LIFECYCLE and f.message_filters == ()
    written = etree.fromstring(f.xml)
    assert topics.topic_of(written[0], topics.APPLICATION) == topics.LIFECYCLE


def test_message_content_filters_are_anded_and_follow_xpath_boolean_rules(pool):
    holder = el('<wsnt:Filter NS><wsnt:TopicExpression Dialect="%s">api:Lifecycle</wsnt:TopicExpression>'
                '<wsnt:MessageContent Dialect="%s">api:state</wsnt:MessageContent>'
                '<wsnt:MessageContent Dialect="%s">api:sequence &gt; 1</wsnt:MessageContent></wsnt:Filter>'
                % (SIMPLE, ns.XPATH_DIALECT, ns.XPATH_DIALECT))
    f = topics.parse_filter(holder, topics.APPLICATION, trier(pool))
    assert json.loads(f.message_filter_json())[1][0] == "api:sequence > 1"

    def event(seq, state):
        return etree.tostring(messages.lifecycle_event({"ResourceId": "urn:uuid:1", "state": state,
                                                        "timestamp": 0, "sequence": seq}))
    assert pool.filter(list(f.message_filters), [event(2, "running"), event(1, "instantiated")],
                       2.0) == [True, False]
    absolute = [("/api:lifecycleEvent[api:state='failed']", {"api": ns.API})]
    assert pool.filter(absolute, [event(3, "failed"), event(3, "running")], 2.0) == [True, False]
    counting = [("count(api:nothing)", {"api": ns.API})]    # 0.0 is false
    assert pool.filter(counting, [event(3, "running")], 2.0) == [False]


@pytest.mark.parametrize("content,fault", [
    ('<wsnt:MessageContent Dialect="urn:x">api:state</wsnt:MessageContent>',
     "InvalidMessageContentExpressionFault"),
    ('<wsnt:MessageContent Dialect="%s">api:state = </wsnt:MessageContent>' % ns.XPATH_DIALECT,
     "InvalidMessageContentExpressionFault"),
    ('<wsnt:MessageContent Dialect="%s">q:state</wsnt:MessageContent>' % ns.XPATH_DIALECT,
     "InvalidMessageContentExpressionFault"),
    ('<wsnt:MessageContent Dialect="%s">nosuchfunction()</wsnt:MessageContent>' % ns.XPATH_DIALECT,
     "InvalidMessageContentExpressionFault"),
    ('<wsnt:ProducerProperties Dialect="%s">true()</wsnt:ProducerProperties>' % ns.XPATH_DIALECT,
     "InvalidFilterFault"),
])
def test_bad_filters(content, fault, pool):
    with pytest.raises(NotificationError) as e:
        topics.parse_filter(el("<wsnt:Filter NS>%s</wsnt:Filter>" % content), topics.APPLICATION,
                            trier(pool))
    assert e.value.fault == fault
    if fault == "InvalidFilterFault":
        assert e.value.children == (("{%s}UnknownFilter" % ns.WSNT, "{%s}ProducerProperties" % ns.WSNT),)


def test_termination_times():
    now = 1_000_000_000.0
    assert parse.requested_time(el("<wsnt:T NS>PT1M</wsnt:T>"), now, "F") == now + 60
    assert parse.requested_time(el('<wsnt:T NS xsi:nil="true"/>'), now, "F") is None
    assert parse.requested_time(el("<wsnt:T NS>2001-09-09T01:46:41Z</wsnt:T>"), now, "F") == now + 1
    for text in ("2001-09-09T01:46:40Z", "-PT1S", "PT0S", "soon"):
        with pytest.raises(NotificationError) as e:
            parse.requested_time(el("<wsnt:T NS>%s</wsnt:T>" % text), now, "UnacceptableTerminationTimeFault")
        assert e.value.fault == "UnacceptableTerminationTimeFault"
        assert e.value.children[0] == ("{%s}MinimumTime" % ns.WSNT, "2001-09-09T01:46:40.000Z")


def subscribe_body(extra: str = "") -> etree._Element:
    return el('<wsnt:Subscribe NS><wsnt:ConsumerReference><wsa:Address> http://h/c </wsa:Address>'
              '<wsa:ReferenceParameters><api:name>k</api:name></wsa:ReferenceParameters>'
              '</wsnt:ConsumerReference>%s</wsnt:Subscribe>' % extra)


def test_subscribe_requests_keep_the_consumers_reference_parameters():
    r = parse.read_subscribe(subscribe_body(), topics.APPLICATION, 10.0, 100.0)
    assert r.consumer.address == "http://h/c" and r.termination_time == 110.0
    epr = etree.fromstring(r.consumer_xml)
    assert epr.tag == "{%s}ConsumerReference" % ns.WSNT
    assert epr.findtext(".//{%s}name" % ns.API) == "k"


@pytest.mark.parametrize("policy,fault", [
    ("<wsnt:UseRaw/>", "UnsupportedPolicyRequestFault"),
    ('<p:Other xmlns:p="urn:p"/>', "UnrecognizedPolicyRequestFault"),
])
def test_policies_are_refused(policy, fault):
    with pytest.raises(NotificationError) as e:
        parse.read_subscribe(subscribe_body("<wsnt:SubscriptionPolicy>%s</wsnt:SubscriptionPolicy>" % policy),
                             topics.PORTAL, 0.0, 1.0)
    assert e.value.fault == fault


def option(kind: str, value) -> Option:
    return Option("urn:cddlm:option:subscribe", False, kind, value, str(value))


def test_the_subscribe_option_takes_a_url_a_subscribe_or_an_epr():
    by_url = parse.read_option(option("string", " http://h/u "), 5.0, 10.0)
    assert by_url.consumer.address == "http://h/u" and by_url.filter.topic == topics.LIFECYCLE
    assert by_url.termination_time == 15.0
    full = subscribe_body('<wsnt:InitialTerminationTime>PT1S</wsnt:InitialTerminationTime>')
    by_subscribe = parse.read_option(option("data", full), 5.0, 10.0)
    assert by_subscribe.consumer.address == "http://h/c" and by_subscribe.termination_time == 6.0
    epr = el('<wsa:EndpointReference NS><wsa:Address>http://h/e</wsa:Address></wsa:EndpointReference>')
    assert parse.read_option(option("data", epr), 5.0, 10.0).consumer.address == "http://h/e"
    for bad in (option("string", "  "), option("data", el("<api:name NS>x</api:name>"))):
        with pytest.raises(BadArgument):
            parse.read_option(bad, 5.0, 10.0)
    portal_topic = subscribe_body('<wsnt:Filter><wsnt:TopicExpression Dialect="%s">api:ApplicationCreated'
                                  '</wsnt:TopicExpression></wsnt:Filter>' % SIMPLE)
    with pytest.raises(NotificationError) as e:
        parse.read_option(option("data", portal_topic), 5.0, 10.0)
    assert e.value.fault == "TopicNotSupportedFault"


def test_the_portal_kind_is_the_producer_id_of_the_portals_events():
    from cddlm.application.repository import CREATED_TOPIC, LIFECYCLE_TOPIC, PORTAL_PRODUCER
    assert (topics.PORTAL, topics.CREATED, topics.LIFECYCLE) == (PORTAL_PRODUCER, CREATED_TOPIC,
                                                                  LIFECYCLE_TOPIC)
