"""The messages the portal publishes (CONTRACT section 8) and the ``wsnt:Notify`` requests
that carry them.

An event row holds its payload as data (JSON, written in the transaction of the state change);
here it becomes ``api:lifecycleEvent`` or ``api:applicationCreatedEvent``. A Notify is
assembled from serialized pieces, because one event goes to many subscribers and one
subscriber receives many events: each payload is serialized once, each subscription's
``NotificationMessage`` head (SubscriptionReference, Topic, ProducerReference) once, and a
request is their concatenation. Every piece is a standalone serialization by lxml that
declares the namespaces it uses, so the concatenation is well-formed and its text escaped.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from lxml import etree

from cddlm import ns, wsa, xmlsafe
from cddlm.errors import CddlmError
from cddlm.notify import topics
from cddlm.xmlsafe import clean
from cddlm.xsdtypes import format_datetime

A = "{%s}" % ns.API
WSNT = "{%s}" % ns.WSNT
NOTIFY_ACTION = ns.WSNTW + "/NotificationConsumer/Notify"


def _sub(parent: etree._Element, local: str, value: object) -> etree._Element:
    el = etree.SubElement(parent, A + local)
    if value is not None:
        el.text = clean(value)
    return el


def termination_info(info: dict) -> etree._Element:
    """``api:terminationInfo`` from the recorded dict (events, ping, resource properties);
    an abnormal end carries its fault (spec 5.2: message, fault, any), an
    ``api:DeploymentFault`` whose Timestamp is the failure's time and Description its reason."""
    el = etree.Element(A + "terminationInfo", nsmap={"api": ns.API})
    _sub(el, "normal", "true" if info.get("normal") else "false")
    for key in ("reason", "component", "exitCode", "signal"):
        if info.get(key) is not None:
            _sub(el, key, info[key])
    if info.get("time") is not None:
        _sub(el, "time", format_datetime(float(info["time"])))
    if info.get("stderr"):
        _sub(el, "stderr", info["stderr"])
    if not info.get("normal"):
        remote = info.get("remote")
        # a failure on a host portal is an api:RemoteFault, the host portal's own fault inside
        fault = etree.SubElement(_sub(el, "fault", None), A + ("RemoteFault" if remote else
                                                               "DeploymentFault"),
                                 nsmap={"wsrf-bf": ns.WSRF_BF})
        bf = "{%s}" % ns.WSRF_BF
        etree.SubElement(fault, bf + "Timestamp").text = format_datetime(
            float(info["time"]) if info.get("time") is not None else 0.0)
        etree.SubElement(fault, bf + "Description").text = clean(
            info.get("reason") or "the application failed")
        cause = _remote_cause(remote) if remote else None
        if cause is not None:
            etree.SubElement(fault, bf + "FaultCause").append(cause)
    return el


def _remote_cause(remote: dict) -> etree._Element | None:
    """The host portal's fault element, kept as XML text; None when there is none or it does
    not parse (a host portal may send anything)."""
    if not remote.get("fault"):
        return None
    try:
        return xmlsafe.parse(str(remote["fault"]).encode("utf-8"))
    except CddlmError:
        return None


def lifecycle_event(data: dict) -> etree._Element:
    el = etree.Element(A + "lifecycleEvent", nsmap={"api": ns.API})
    _sub(el, "ResourceId", data["ResourceId"])
    if data.get("name"):
        _sub(el, "name", data["name"])
    _sub(el, "state", data["state"])
    if data.get("previousState"):
        _sub(el, "previousState", data["previousState"])
    _sub(el, "timestamp", format_datetime(float(data["timestamp"])))
    _sub(el, "sequence", int(data["sequence"]))
    if data.get("stateInfo"):
        _sub(el, "stateInfo", data["stateInfo"])
    if data.get("terminationInfo"):
        el.append(termination_info(data["terminationInfo"]))
    return el


def created_event(data: dict) -> etree._Element:
    el = etree.Element(A + "applicationCreatedEvent", nsmap={"api": ns.API})
    _sub(el, "ResourceId", data["ResourceId"])
    if data.get("name"):
        _sub(el, "name", data["name"])
    el.append(wsa.epr(A + "applicationReference", ns.app_address(data["portal"], data["view"]),
                      data["ResourceId"]))
    _sub(el, "timestamp", format_datetime(float(data["timestamp"])))
    return el


def payload(topic: str, data: dict) -> etree._Element:
    """The message of an event on ``topic``."""
    return lifecycle_event(data) if topic == topics.LIFECYCLE else created_event(data)


SAMPLES = {  # a message of each producer kind, to try message-content filters on
    topics.APPLICATION: lambda: lifecycle_event({
        "ResourceId": "urn:uuid:00000000-0000-0000-0000-000000000000", "name": "sample",
        "state": "initialized", "previousState": "instantiated", "timestamp": 0.0, "sequence": 2}),
    topics.PORTAL: lambda: created_event({
        "ResourceId": "urn:uuid:00000000-0000-0000-0000-000000000000", "name": "sample",
        "portal": "http://127.0.0.1", "view": "0", "timestamp": 0.0}),
}


# -- references -------------------------------------------------------------------------------
def portal_address(portal: str) -> str:
    """The portal endpoint of the portal at base URL ``portal``."""
    return portal.rstrip("/") + ns.PORTAL_PATH


def manager_address(portal: str, sub_id: str) -> str:
    return portal.rstrip("/") + ns.MANAGER_PATH + sub_id


def resource_id(sub_id: str | uuid.UUID) -> str:
    """The subscription's ``api:ResourceId`` (its id as a URN)."""
    return "urn:uuid:" + str(sub_id if isinstance(sub_id, uuid.UUID) else uuid.UUID(hex=sub_id))


def subscription_reference(tag: str, portal: str, sub_id: str) -> etree._Element:
    return wsa.epr(tag, manager_address(portal, sub_id), resource_id(sub_id))


def producer_reference(tag: str, portal: str, producer: str, view: str | None) -> etree._Element:
    if producer == ns.PORTAL_PRODUCER:
        return wsa.epr(tag, portal_address(portal))
    return wsa.epr(tag, ns.app_address(portal, view or ""), producer)


# -- Notify -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Route:
    """Where one subscription's messages go and what each of them names."""
    sub_id: str
    portal: str
    producer: str
    view: str | None
    topic: str
    consumer: wsa.Reference

    def head(self) -> tuple[bytes, bytes]:
        """The serialized NotificationMessage around its payload: (before, after)."""
        holder = etree.Element(WSNT + "NotificationMessage", nsmap={"wsnt": ns.WSNT, "wsa": ns.WSA})
        holder.append(subscription_reference(WSNT + "SubscriptionReference", self.portal, self.sub_id))
        holder.append(topics.topic_element(WSNT + "Topic", self.topic))
        holder.append(producer_reference(WSNT + "ProducerReference", self.portal, self.producer,
                                         self.view))
        etree.SubElement(holder, WSNT + "Message")
        text = etree.tostring(holder)
        before, marker, after = text.partition(b"<wsnt:Message/>")
        assert marker, text
        return before + b"<wsnt:Message>", b"</wsnt:Message>" + after


_ENVELOPE = (b'<soapenv:Envelope xmlns:soapenv="' + ns.SOAP11_ENV.encode() + b'">'
             b'<soapenv:Header>%s</soapenv:Header><soapenv:Body>'
             b'<wsnt:Notify xmlns:wsnt="' + ns.WSNT.encode() + b'">%s</wsnt:Notify>'
             b'</soapenv:Body></soapenv:Envelope>')


def notify_request(route: Route, head: tuple[bytes, bytes], payloads: list[bytes]) -> bytes:
    """One ``wsnt:Notify`` envelope holding one NotificationMessage per payload, in order."""
    headers = b"".join(etree.tostring(h) for h in wsa.headers_for(route.consumer, NOTIFY_ACTION))
    before, after = head
    return _ENVELOPE % (headers, b"".join(before + p + after for p in payloads))
