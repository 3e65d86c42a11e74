"""WS-BaseNotification on the SOAP edge: ``Subscribe`` and ``GetCurrentMessage`` on the
portal and application endpoints, and the subscription manager endpoint
(``/cddlm/subscriptions/{id}``: Renew, Unsubscribe, PauseSubscription, ResumeSubscription,
wsrf-rl:Destroy and the WS-RP reads of its properties). The use cases are
``notify.subscriptions.Subscriptions``; this module reads requests and writes responses.
"""

from __future__ import annotations

import uuid
from typing import Callable

from lxml import etree

from cddlm import ns, xmlsafe
from cddlm.errors import ResourceUnknown
from cddlm.notify import messages as nm
from cddlm.notify.records import Subscription
from cddlm.notify.subscriptions import Subscriptions
from cddlm.portal import messages as m
from cddlm.portal import properties as rp
from cddlm.portal.soap import Endpoint, Operation, Request
from cddlm.xpathsafe import XPathPool
from cddlm.xsdtypes import format_datetime

WSNT, RL, EXT = "{%s}" % ns.WSNT, "{%s}" % ns.WSRF_RL, "{%s}" % ns.EXT
BW = ns.WSNTW + "/"
RLW = ns.WSRF_RLW + "/"
Producer = Callable[[Request], tuple[str, "str | None"]]     # request -> (producer, view)


def _wsnt(local: str, *children: etree._Element) -> etree._Element:
    el = etree.Element(WSNT + local, nsmap={"wsnt": ns.WSNT})
    el.extend(children)
    return el


def _time(local: str, when: float) -> etree._Element:
    el = _wsnt(local)
    el.text = format_datetime(when)
    return el


class SubscriptionHandlers:
    def __init__(self, subscriptions: Subscriptions, xpath: XPathPool):
        self.subscriptions = subscriptions
        self.xpath = xpath          # evaluates QueryResourceProperties on managers

    # -- NotificationProducer (portal and application endpoints) --------------------------------
    def producer_operations(self, kind: str, producer: Producer) -> dict[str, Operation]:
        def subscribe(req: Request) -> etree._Element:
            who, view = producer(req)
            sub_id, until = self.subscriptions.subscribe(req.body, kind, who, view, req.portal,
                                                         principal=req.principal)
            now = self.subscriptions.clock()
            return _wsnt("SubscribeResponse",
                         nm.subscription_reference(WSNT + "SubscriptionReference", req.portal, sub_id),
                         _time("CurrentTime", now),
                         rp.termination_time(until, WSNT + "TerminationTime"))

        def current_message(req: Request) -> etree._Element:
            who, _ = producer(req)
            topic = req.body.find(WSNT + "Topic")
            return _wsnt("GetCurrentMessageResponse",
                         self.subscriptions.current_message(topic, kind, who,
                                                            principal=req.principal))

        return {
            WSNT + "Subscribe": Operation(subscribe, BW + "NotificationProducer/SubscribeResponse"),
            WSNT + "GetCurrentMessage": Operation(
                current_message, BW + "NotificationProducer/GetCurrentMessageResponse"),
        }

    # -- SubscriptionManager ------------------------------------------------------------------
    def sub_id(self, req: Request) -> str:
        """The subscription a request names: its address, checked against its ResourceId."""
        sub_id = req.path.strip("/").split("/")[0]
        try:
            parsed = uuid.UUID(hex=sub_id)
        except ValueError:
            raise ResourceUnknown("no subscription %r (address /cddlm/subscriptions/ID)" % sub_id) from None
        given = req.resource_id()
        if given and given != nm.resource_id(parsed):
            raise ResourceUnknown("the address and the ResourceId name different subscriptions")
        return parsed.hex

    def renew(self, req: Request) -> etree._Element:
        when, now = self.subscriptions.renew(self.sub_id(req), req.body.find(WSNT + "TerminationTime"),
                                             principal=req.principal)
        return _wsnt("RenewResponse", rp.termination_time(when, WSNT + "TerminationTime"),
                     _time("CurrentTime", now))

    def unsubscribe(self, req: Request) -> etree._Element:
        self.subscriptions.unsubscribe(self.sub_id(req), principal=req.principal)
        return _wsnt("UnsubscribeResponse")

    def destroy(self, req: Request) -> etree._Element:
        self.subscriptions.unsubscribe(self.sub_id(req), principal=req.principal)
        return etree.Element(RL + "DestroyResponse", nsmap={"wsrf-rl": ns.WSRF_RL})

    def pause(self, req: Request) -> etree._Element:
        self.subscriptions.pause(self.sub_id(req), principal=req.principal)
        return _wsnt("PauseSubscriptionResponse")

    def resume(self, req: Request) -> etree._Element:
        self.subscriptions.resume(self.sub_id(req), principal=req.principal)
        return _wsnt("ResumeSubscriptionResponse")

    def properties(self, req: Request) -> rp.Properties:
        sub = self.subscriptions.get(self.sub_id(req), principal=req.principal)
        return rp.Properties(m.q("subscriptionProperties"), {
            WSNT + "ConsumerReference": lambda: [xmlsafe.parse(sub.consumer.encode("utf-8"))],
            WSNT + "Filter": lambda: [xmlsafe.parse(sub.filter_xml.encode("utf-8"))],
            WSNT + "CreationTime": lambda: [_time("CreationTime", sub.created)],
            RL + "CurrentTime": rp.current_time,
            RL + "TerminationTime": lambda: [rp.termination_time(sub.termination_time)],
            EXT + "subscriptionStatus": lambda: [status(sub, self.subscriptions.undelivered(sub.id))],
        })

    def manager_endpoint(self) -> Endpoint:
        return Endpoint("subscription", {
            WSNT + "Renew": Operation(self.renew, BW + "SubscriptionManager/RenewResponse"),
            WSNT + "Unsubscribe": Operation(self.unsubscribe, BW + "SubscriptionManager/UnsubscribeResponse"),
            WSNT + "PauseSubscription": Operation(
                self.pause, BW + "PausableSubscriptionManager/PauseSubscriptionResponse"),
            WSNT + "ResumeSubscription": Operation(
                self.resume, BW + "PausableSubscriptionManager/ResumeSubscriptionResponse"),
            RL + "Destroy": Operation(self.destroy, RLW + "ImmediateResourceTermination/DestroyResponse"),
            **rp.operations(self.properties, self.xpath),
        })


def status(sub: Subscription, undelivered: int) -> etree._Element:
    """``ext:subscriptionStatus``: how delivery to this subscription's consumer goes
    (``undelivered`` messages are queued for it)."""
    el = etree.Element(EXT + "subscriptionStatus", nsmap={"ext": ns.EXT})
    m.sub(el, "state", sub.state, ns.EXT)
    m.sub(el, "undelivered", undelivered, ns.EXT)
    m.sub(el, "delivered", sub.delivered, ns.EXT)
    if sub.last_delivered is not None:
        m.sub(el, "lastDelivery", format_datetime(sub.last_delivered), ns.EXT)
    if sub.failing_since is not None:
        m.sub(el, "failingSince", format_datetime(sub.failing_since), ns.EXT)
        if sub.due is not None and sub.state != "failed":
            m.sub(el, "nextAttempt", format_datetime(sub.due), ns.EXT)
    if sub.last_error:
        m.sub(el, "lastError", sub.last_error, ns.EXT)
    if sub.failure:
        m.sub(el, "failure", sub.failure, ns.EXT)
    return el
