"""Reading API request elements into use-case arguments, and writing response elements.
Bodies arrive schema-valid; these functions add the checks a schema cannot express."""

from __future__ import annotations

from typing import Any

from lxml import etree

from cddlm import ns, wsa
from cddlm.application.options import Option
from cddlm.application.repository import View
from cddlm.application.secrets import HIDDEN
from cddlm.application.service import DescriptorInput
from cddlm.errors import MAX_DIGITS, BadArgument
from cddlm.xmlsafe import clean
from cddlm.xsdtypes import format_datetime, parse_boolean

A = "{%s}" % ns.API


def q(local: str) -> str:
    return A + local


def child(el: etree._Element, local: str) -> etree._Element | None:
    return el.find(q(local))


def text(el: etree._Element, local: str) -> str | None:
    c = el.find(q(local))
    return None if c is None else (c.text or "")


def integer(value: str | None, what: str) -> int | None:
    """A schema-valid integer's text as an int (None: absent); ``BadArgument`` for one of more
    than ``MAX_DIGITS`` digits (no count or offset is that large, and int() refuses one of
    more than 4,300 digits with an error that is no caller's fault)."""
    if value is None:
        return None
    value = value.strip()
    if len(value.lstrip("+-").lstrip("0")) > MAX_DIGITS:
        raise BadArgument("%s %s... is too large (more than %d digits)" % (what, value[:20], MAX_DIGITS))
    return int(value)


def element(local: str, *children: etree._Element, value: Any = None) -> etree._Element:
    el = etree.Element(q(local), nsmap={"api": ns.API})
    if value is not None:
        el.text = clean(value)
    for c in children:
        el.append(c)
    return el


def sub(parent: etree._Element, local: str, value: Any = None,
        namespace: str = ns.API) -> etree._Element:
    el = etree.SubElement(parent, "{%s}%s" % (namespace, local))
    if value is not None:
        el.text = clean(value)
    return el


def timestamp(local: str, ts: float) -> etree._Element:
    return element(local, value=format_datetime(ts))


def app_reference(view: View, tag: str = q("applicationReference")) -> etree._Element:
    return wsa.epr(tag, ns.app_address(view.portal, view.id), view.app_id)


# -- options, properties, descriptors ----------------------------------------------------------
def options(holder: etree._Element | None) -> list[Option]:
    out: list[Option] = []
    if holder is None:
        return out
    for opt in holder.iterfind(q("option")):
        name = (opt.get("name") or "").strip()
        must = parse_boolean(opt.get("mustUnderstand", "false"))
        value_el = next((c for c in opt if isinstance(c.tag, str)), None)
        if value_el is None:
            raise BadArgument("option %s has no value" % name)
        kind = etree.QName(value_el).localname
        if kind == "data":
            data = [c for c in value_el if isinstance(c.tag, str)]
            value: Any = data[0] if len(data) == 1 else value_el
            canonical = etree.tostring(value_el, method="c14n").decode()
        elif kind == "integer":
            value = integer(value_el.text or "", "option %s's integer" % name)
            canonical = str(value)
        elif kind == "boolean":
            value = parse_boolean(value_el.text or "")
            canonical = "true" if value else "false"
        else:
            value = value_el.text or ""
            canonical = value
        out.append(Option(name, must, kind, value, canonical))
    return out


def options_element(local: str, stored: list[dict]) -> etree._Element:
    """Options as recorded (deploymentInfo), in the request's own shape."""
    from cddlm import xmlsafe
    holder = element(local)
    for o in stored:
        opt = sub(holder, "option")
        opt.set("name", o["name"])
        if o.get("mustUnderstand"):
            opt.set("mustUnderstand", "true")
        if o["kind"] == "data":
            opt.append(xmlsafe.parse(o["value"].encode("utf-8")))
        else:
            sub(opt, o["kind"], o["value"])
    return holder


def properties(holder: etree._Element | None) -> list[tuple[str, str]]:
    if holder is None:
        return []
    return [((text(p, "name") or "").strip(), text(p, "value") or "")
            for p in holder.iterfind(q("property"))]


HIDDEN_ATTR = "{%s}hidden" % ns.EXT     # on a value the portal does not return (a secret)


def properties_element(local: str, props: dict[str, str], hidden: list[str] = ()) -> etree._Element:
    """Deploy-time properties; the ``hidden`` ones (secrets) by name only."""
    holder = element(local)
    for name, value in props.items():
        p = sub(holder, "property")
        sub(p, "name", name)
        sub(p, "value", value)
    for name in hidden:
        p = sub(holder, "property")
        sub(p, "name", name)
        sub(p, "value").set(HIDDEN_ATTR, "true")
    return holder


def descriptor(el: etree._Element) -> DescriptorInput:
    language = (el.get("language") or "").strip()
    if not language:
        raise BadArgument("the descriptor names no language")
    d = DescriptorInput(language=language, version=el.get("version"))
    body = child(el, "body")
    if body is not None:
        elements = [c for c in body if isinstance(c.tag, str)]
        if len(elements) != 1:
            raise BadArgument("descriptor body must hold exactly one element, not %d" % len(elements))
        d.body = elements[0]
    d.text = text(el, "text")
    ref = text(el, "reference")
    d.reference = ref.strip() if ref is not None else None
    return d


def value_element(local: str, value: Any) -> etree._Element:
    """A resolved value: text, or ``api:item`` children for lists and maps."""
    el = element(local)

    def fill(target: etree._Element, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                item = sub(target, "item")
                item.set("name", str(k))
                fill(item, x)
        elif isinstance(v, list):
            for x in v:
                fill(sub(target, "item"), x)
        elif isinstance(v, bool):
            target.text = "true" if v else "false"
        elif v is HIDDEN:
            target.set(HIDDEN_ATTR, "true")   # a secret: stored and used, never returned
        elif v is not None:
            target.text = clean(v)

    fill(el, value)
    return el
