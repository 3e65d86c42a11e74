"""Reading subscription requests: ``wsnt:Subscribe`` bodies, the ``urn:cddlm:option:subscribe``
create option and ``wsnt:Renew`` times. Pure: consumer addresses are checked by the use cases, because that
check resolves host names (``outbound.check_address``).

The subscribe option (CONTRACT section 6) subscribes a consumer to the new application's
``api:Lifecycle`` in the create transaction, so it receives every event from sequence 1. Its
value is one of:

- ``string``: the consumer's http(s) URL;
- ``data`` holding a ``wsnt:Subscribe`` element: read as the Subscribe operation reads it
  (ConsumerReference, Filter with TopicExpression and MessageContent, InitialTerminationTime);
- ``data`` holding any endpoint reference (an element with a ``wsa:Address`` child, such as
  ``wsa:EndpointReference`` or ``wsnt:ConsumerReference``): the consumer, reference
  parameters included.

Without an InitialTerminationTime a subscription lasts ``default_subscription_seconds``; a nil
one (``xsi:nil="true"``) never expires.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from cddlm import ns, wsa
from cddlm.application.options import Option
from cddlm.errors import BadArgument, NotificationError
from cddlm.notify import topics
from cddlm.xsdtypes import format_datetime, parse_time

WSNT = "{%s}" % ns.WSNT
NIL = "{%s}nil" % ns.XSI
KNOWN_POLICIES = {WSNT + "UseRaw"}     # recognized, but the portal always sends wsnt:Notify


@dataclass(frozen=True)
class SubscribeRequest:
    consumer: wsa.Reference
    consumer_xml: str                 # the consumer EPR, in WS-Addressing 1.0
    filter: topics.Filter
    termination_time: float | None    # None: never expires


def read_subscribe(body: etree._Element, kind: str, now: float, default_seconds: float,
                   try_filters: topics.Tryer | None = None) -> SubscribeRequest:
    """A (schema-valid) ``wsnt:Subscribe`` sent to a producer of ``kind``; ``try_filters``
    tries its message-content filters on a sample message."""
    holder = body.find(WSNT + "ConsumerReference")
    consumer = wsa.parse_epr(holder) if holder is not None else None
    if consumer is None or not consumer.address:
        raise topics.fault("SubscribeCreationFailedFault", "the ConsumerReference has no Address")
    _check_policy(body.find(WSNT + "SubscriptionPolicy"))
    time_el = body.find(WSNT + "InitialTerminationTime")
    when = now + default_seconds if time_el is None else \
        requested_time(time_el, now, "UnacceptableInitialTerminationTimeFault")
    return SubscribeRequest(consumer, consumer_xml(consumer),
                            topics.parse_filter(body.find(WSNT + "Filter"), kind, try_filters),
                            when)


def read_option(option: Option, now: float, default_seconds: float,
                try_filters: topics.Tryer | None = None) -> SubscribeRequest:
    """The value of ``urn:cddlm:option:subscribe`` (see the module docstring)."""
    kind = topics.APPLICATION
    everything = topics.parse_filter(None, kind)
    if option.kind == "string":
        address = str(option.value or "").strip()
        if not address:
            raise BadArgument("option %s: the consumer URL is empty" % option.name)
        consumer = wsa.Reference(address)
        return SubscribeRequest(consumer, consumer_xml(consumer), everything,
                                now + default_seconds)
    el = option.value
    if not isinstance(el, etree._Element) or not isinstance(el.tag, str):
        raise BadArgument("option %s takes a consumer URL (string) or one element (data)" % option.name)
    if el.tag == WSNT + "Subscribe":
        return read_subscribe(el, kind, now, default_seconds, try_filters)
    consumer = wsa.parse_epr(el)
    if consumer is None or not consumer.address:
        raise BadArgument("option %s: %s is neither a wsnt:Subscribe nor an endpoint reference "
                          "with a wsa:Address" % (option.name, el.tag))
    return SubscribeRequest(consumer, consumer_xml(consumer), everything, now + default_seconds)


def is_nil(el: etree._Element) -> bool:
    """Whether a nillable element is ``xsi:nil``."""
    return el.get(NIL) in ("true", "1")


def requested_time(el: etree._Element, now: float, fault_name: str) -> float | None:
    """An AbsoluteOrRelativeTime (nil: never), which must lie in the future."""
    if is_nil(el):
        return None
    minimum = (WSNT + "MinimumTime", format_datetime(now))
    try:
        when = parse_time(el.text or "", now)
    except BadArgument:
        raise topics.fault(fault_name, "%r is neither an xsd:dateTime nor an xsd:duration"
                           % (el.text or ""), minimum) from None
    if when <= now:
        raise topics.fault(fault_name, "termination time %s is not in the future (now: %s)"
                           % (format_datetime(when), format_datetime(now)), minimum)
    return when


def consumer_xml(consumer: wsa.Reference) -> str:
    el = wsa.epr(WSNT + "ConsumerReference", consumer.address, parameters=consumer.parameters)
    return etree.tostring(el, encoding="unicode")


def _check_policy(policy: etree._Element | None) -> None:
    if policy is None:
        return
    for child in policy:
        if not isinstance(child.tag, str):
            continue
        if child.tag in KNOWN_POLICIES:
            raise NotificationError("UnsupportedPolicyRequestFault",
                                    "policy %s is not supported: the portal always sends wsnt:Notify"
                                    % child.tag, ((WSNT + "UnsupportedPolicy", child.tag),))
        raise NotificationError("UnrecognizedPolicyRequestFault", "policy %s is not known" % child.tag,
                                ((WSNT + "UnrecognizedPolicy", child.tag),))
