"""The portal's topics, WS-Topics expressions and message-content filters. Pure: elements in,
names and compiled filters out; every problem is the WS-BaseNotification fault that names it.

Each producer publishes one root topic with no children (``wsnt:FixedTopicSet`` is true):

    portal        api:ApplicationCreated     one api:applicationCreatedEvent per create
    application   api:Lifecycle              one api:lifecycleEvent per entered state

Topic expressions (WS-Topics 1.3) are read in two dialects. Simple: a QName naming a root
topic. Concrete: a path of a QName and NCNames (``api:Lifecycle`` is the only path that names
a topic here). Prefixes resolve against the expression element's in-scope namespaces, as XML
QNames in text do. The Full dialect (wildcards, unions) is not supported and is refused as an
unknown dialect, so clients fall back to Simple.

A ``wsnt:MessageContent`` filter is an XPath 1.0 expression evaluated with the message
payload (``api:lifecycleEvent`` ...) as the context node and document element; the message
passes when the result is true by XPath's ``boolean()`` rules. Several filters are ANDed.
Filters are only compiled here; they are evaluated by ``cddlm.xpathsafe`` (a helper process
with a time budget): ``parse_filter`` takes the function that tries them on a sample message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Callable

from lxml import etree

from cddlm import ns
from cddlm.budget import ExpressionError, check_xpath
from cddlm.errors import NotificationError

LIFECYCLE, CREATED = ns.LIFECYCLE_TOPIC, ns.CREATED_TOPIC
# producer kinds; the portal's own events are stored under the producer id "portal" as well
# (repository.PORTAL_PRODUCER), an application's under its id
PORTAL, APPLICATION = "portal", "application"
TOPICS = {PORTAL: CREATED, APPLICATION: LIFECYCLE}       # producer kind -> its one topic
DIALECTS = (ns.TOPIC_SIMPLE, ns.TOPIC_CONCRETE)
WSNT = "{%s}" % ns.WSNT

_NCNAME = r"[^\W\d][\w.\-]*"
_SIMPLE = re.compile(r"^(?:(%s):)?(%s)$" % (_NCNAME, _NCNAME))
_CONCRETE = re.compile(r"^(?:(%s):)?(%s)((?:/%s)*)$" % (_NCNAME, _NCNAME, _NCNAME))


def fault(name: str, message: str, *children: tuple[str, str]) -> NotificationError:
    return NotificationError(name, message, children)


def topic_of(expression: etree._Element, kind: str) -> str:
    """The topic a TopicExpression (or GetCurrentMessage's Topic) names, if this producer
    publishes it."""
    dialect = (expression.get("Dialect") or "").strip()
    if dialect not in DIALECTS:
        raise fault("TopicExpressionDialectUnknownFault",
                    "topic expression dialect %r is not supported (supported: %s)"
                    % (dialect, ", ".join(DIALECTS)))
    if any(isinstance(c.tag, str) for c in expression):
        raise fault("InvalidTopicExpressionFault", "a topic expression is text, not elements")
    text = (expression.text or "").strip()
    match = (_SIMPLE if dialect == ns.TOPIC_SIMPLE else _CONCRETE).match(text)
    if match is None:
        raise fault("InvalidTopicExpressionFault", "%r is not a topic expression of the %s dialect"
                    % (text, dialect.rsplit("/", 1)[-1]))
    prefix, local = match.group(1), match.group(2)
    rest = match.group(3) if dialect == ns.TOPIC_CONCRETE else ""
    namespace = expression.nsmap.get(prefix)
    if prefix is not None and namespace is None:
        raise fault("InvalidTopicExpressionFault", "the prefix %r of %r is not declared" % (prefix, text))
    topic = ("{%s}%s" % (namespace, local) if namespace else local) + rest
    if topic != TOPICS[kind]:
        raise fault("TopicNotSupportedFault", "this %s publishes only the topic %s, not %s"
                    % (kind, TOPICS[kind], topic))
    return topic


@dataclass(frozen=True)
class Filter:
    topic: str
    message_filters: tuple[tuple[str, dict], ...]    # (XPath, namespaces), ANDed
    xml: str                                          # the wsnt:Filter element, for the RP

    def message_filter_json(self) -> str | None:
        return json.dumps([list(f) for f in self.message_filters]) if self.message_filters else None


Tryer = Callable[[list[tuple[str, dict]]], None]
"""Tries message-content filters on a sample message of the producer's kind (errors an XPath
shows only when evaluated: an undeclared prefix, an unknown function, too costly), raising
``InvalidMessageContentExpressionFault``."""


def parse_filter(holder: etree._Element | None, kind: str, try_filters: Tryer | None = None,
                 max_chars: int = 4096) -> Filter:
    """A Subscribe's ``wsnt:Filter`` (None: everything the producer publishes)."""
    topic = TOPICS[kind]
    if holder is None:
        return Filter(topic, (), implied_filter(topic))
    filters: list[tuple[str, dict]] = []
    for child in holder:
        if not isinstance(child.tag, str):
            continue
        if child.tag == WSNT + "TopicExpression":
            topic_of(child, kind)
        elif child.tag == WSNT + "MessageContent":
            filters.append(compile_message_filter(child, max_chars))
        else:
            raise fault("InvalidFilterFault", "filter %s is not supported (supported: "
                        "wsnt:TopicExpression, wsnt:MessageContent)" % child.tag,
                        (WSNT + "UnknownFilter", child.tag))
    if filters and try_filters is not None:
        try_filters(filters)
    return Filter(topic, tuple(filters), etree.tostring(holder, encoding="unicode"))


def topic_element(tag: str, topic: str) -> etree._Element:
    """A Simple-dialect topic expression naming ``topic`` (prefix ``api`` declared on it):
    a Notify's Topic, a Subscribe's TopicExpression, the producers' wsnt:TopicExpression
    property."""
    qn = etree.QName(topic)
    el = etree.Element(tag, nsmap={"wsnt": ns.WSNT, "api": qn.namespace})
    el.set("Dialect", ns.TOPIC_SIMPLE)
    el.text = "api:" + qn.localname
    return el


def topic_set(topic: str) -> etree._Element:
    """The producer's ``wstop:TopicSet`` document: its one root topic, an element of the
    topic's QName marked ``wstop:topic="true"`` (WS-Topics 1.3, section 6.1)."""
    qn = etree.QName(topic)
    holder = etree.Element("{%s}TopicSet" % ns.WSTOP, nsmap={"wstop": ns.WSTOP})
    el = etree.SubElement(holder, topic, nsmap={"api": qn.namespace})
    el.set("{%s}topic" % ns.WSTOP, "true")
    return holder


def implied_filter(topic: str) -> str:
    """The Filter a subscription without one behaves as: its producer's topic."""
    holder = etree.Element(WSNT + "Filter", nsmap={"wsnt": ns.WSNT})
    holder.append(topic_element(WSNT + "TopicExpression", topic))
    return etree.tostring(holder, encoding="unicode")


def compile_message_filter(el: etree._Element, max_chars: int = 4096) -> tuple[str, dict]:
    dialect = (el.get("Dialect") or "").strip()
    if dialect != ns.XPATH_DIALECT:
        raise fault("InvalidMessageContentExpressionFault",
                    "message content dialect %r is not supported (only XPath 1.0, %s)"
                    % (dialect, ns.XPATH_DIALECT))
    if any(isinstance(c.tag, str) for c in el):
        raise fault("InvalidMessageContentExpressionFault", "the XPath expression must be text")
    text = (el.text or "").strip()
    try:
        namespaces = check_xpath(text, {k: v for k, v in el.nsmap.items() if k}, max_chars)
        etree.XPath(text, namespaces=namespaces)
    except (ExpressionError, etree.XPathError) as e:
        raise fault("InvalidMessageContentExpressionFault",
                    "%r is not a usable XPath 1.0 expression: %s" % (text[:200], e)) from None
    return text, namespaces
