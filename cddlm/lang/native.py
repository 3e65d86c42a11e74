"""The native descriptor language ``urn:cddlm:lang:components:1`` (CONTRACT section 11):
the component model itself, written as XML.

    <application xmlns="urn:cddlm:lang:components:1">
      <component name="db" type="process">
        <attribute name="argv"><item>sleep</item><item>600</item></attribute>
        <attribute name="env"><item name="PGPORT"><property name="db.port"/></item></attribute>
        <attribute name="host"><property name="local.hostname" lazy="true"/></attribute>
      </component>
      <group name="pair"><member>db</member><member>web</member></group>
      <policy type="anti-collocation" level="host" group="pair" hard="false" weight="2"/>
    </application>

Values: text; ``item`` children for a list (or a map when every item has ``name``);
``property`` (a deploy-time property: eager by default, ``lazy="true"`` to resolve on the
host, ``type="integer"``, ``default``); ``ref path="db/port"`` (another component's attribute
or runtime value; eager references are copied at initialize, lazy ones resolved on the host).
Policies take their parameters as attributes; list parameters (``between``, ``groups``,
``required``, ``forbidden``) are space-separated.
"""

from __future__ import annotations

import copy
from typing import Collection

from lxml import etree

from cddlm import ns
from cddlm.errors import DescriptorError, ResolutionError
from cddlm.lang import policies
from cddlm.lang.model import Component, Deployment, Group, Lazy, Policy, Value
from cddlm.lang.documents import parse_xml
from cddlm.lang.model import Resolution, ResolveRequest

N = ns.NATIVE


class _Native:
    uri = ns.NATIVE
    name = "cddlm-components"
    version = "1"
    body = "xml"

    def resolve(self, request: ResolveRequest) -> Resolution:
        root = request.source
        if not isinstance(root, etree._Element):
            root = parse_xml(root, request.limits, quote=request.quotes(request.base_url))
        if root.tag != ns.qname(N, "application"):
            found = ", not %s" % root.tag if request.quotes(request.base_url) else ""
            raise DescriptorError("the root element must be {%s}application%s" % (N, found),
                                  kind="wrong-root", line=root.sourceline)
        reader = _Reader(request, _secret_properties(root))
        dep = Deployment()
        for el in root:
            if not isinstance(el.tag, str):
                continue
            local = _local(el)
            if local == "component":
                dep.components.append(reader.component(el))
            elif local == "group":
                dep.groups.append(reader.group(el))
            elif local == "policy":
                dep.policies.append(reader.policy(el))
            elif local != "documentation":
                raise _unexpected(el)
        reader.resolve_refs(dep)
        dep.secrets, dep.secret_properties = reader.secrets, reader.secret_properties
        return Resolution(dep, lambda: etree.tostring(root, pretty_print=True).decode(),
                          tuple(sorted(reader.used)))


def _local(el: etree._Element) -> str:
    q = etree.QName(el)
    if q.namespace != N:
        raise DescriptorError("element %s is not in the %s namespace" % (el.tag, N),
                              kind="unexpected-element", line=el.sourceline)
    return q.localname


def _unexpected(el: etree._Element) -> DescriptorError:
    return DescriptorError("unexpected element %s" % etree.QName(el).localname,
                           kind="unexpected-element", line=el.sourceline)


def _required(el: etree._Element, attr: str) -> str:
    value = el.get(attr)
    if value is None or not value.strip():
        raise DescriptorError("<%s> needs a %s attribute" % (etree.QName(el).localname, attr),
                              kind="missing-attribute", line=el.sourceline)
    return value.strip()


def _secret(el: etree._Element) -> bool:
    """``secret="true"`` on an ``attribute`` or ``item``: its value is a secret."""
    return (el.get("secret") or "").strip().lower() in ("true", "1")


def _secret_properties(root: etree._Element) -> set[str]:
    """The deploy-time properties read inside a value marked secret: secrets wherever else
    they are used (known before the document is read, in whatever order it uses them)."""
    return {(p.get("name") or "").strip() for el in root.iter() if isinstance(el.tag, str)
            and _secret(el) for p in el.iter(ns.qname(N, "property"))} - {""}


class _Reader:
    def __init__(self, request: ResolveRequest, secret_properties: set[str]):
        self.properties = request.properties
        self.used: set[str] = set()
        # comp, attr, slot (the keys of an item within the attribute), path, line
        self.eager_refs: list[tuple[Component, str, tuple[str, ...], str, int]] = []
        self.secrets: set[str] = set()              # value paths marked secret
        self.secret_properties = secret_properties  # properties read inside them
        self.secret_values = request.secret_values  # their values, and the literal secrets
        self.secret_values.update(str(v) for k, v in request.properties.items()
                                  if k in secret_properties)

    def component(self, el: etree._Element, path: str = "") -> Component:
        name = _required(el, "name")
        comp = Component(name=name, type=_required(el, "type"),
                         source="line %d" % el.sourceline if el.sourceline else None)
        here = path + "/" + name if path else name
        for child in el:
            if not isinstance(child.tag, str):
                continue
            local = _local(child)
            if local == "attribute":
                attr = _required(child, "name")
                if attr in comp.attributes:
                    raise DescriptorError("duplicate attribute %s" % attr, kind="duplicate-name",
                                          path=here, line=child.sourceline)
                where = here + "/" + attr
                if _secret(child):
                    self.secrets.add(where)
                comp.attributes[attr] = self.value(child, comp, attr, where, _secret(child))
            elif local == "component":
                comp.children.append(self.component(child, here))
            elif local != "documentation":
                raise _unexpected(child)
        return comp

    def value(self, el: etree._Element, comp: Component, attr: str, where: str = "",
              secret: bool = False, slot: tuple[str, ...] = ()) -> Value:
        """The value of an ``attribute`` or ``item`` at ``where`` (``web/env``, ``web/env/KEY``);
        ``secret``: inside a value marked secret; ``slot``: the item's keys within the
        attribute (a map's key, a list's index: ``("KEY",)``)."""
        kids = [c for c in el if isinstance(c.tag, str)]
        if not kids:
            if secret and el.text:
                self.secret_values.add(el.text)
            return el.text or ""
        if (el.text or "").strip():
            raise DescriptorError("a value holds text or elements, not both", kind="mixed-value",
                                  line=el.sourceline)
        if len(kids) == 1 and _local(kids[0]) in ("property", "ref"):
            if _local(kids[0]) == "property" and where \
                    and (kids[0].get("name") or "").strip() in self.secret_properties:
                self.secrets.add(where)     # a secret property, wherever it is used
            return self.reference(kids[0], comp, attr, slot)
        if any(_local(k) != "item" for k in kids):
            raise _unexpected(next(k for k in kids if _local(k) != "item"))
        named = [k.get("name") is not None for k in kids]
        if all(named):
            out = {}
            for k in kids:
                if k.get("name") in out:
                    raise DescriptorError("duplicate item %s" % k.get("name"), kind="duplicate-name",
                                          line=k.sourceline)
                key = where + "/" + k.get("name")
                if _secret(k) and where:
                    self.secrets.add(key)
                out[k.get("name")] = self.value(k, comp, attr, key, secret or _secret(k),
                                                  slot + (k.get("name"),))
            return out
        if any(named):
            raise DescriptorError("either every item has a name (a map) or none (a list)",
                                  kind="mixed-value", line=el.sourceline)
        if where and any(_secret(k) for k in kids):
            self.secrets.add(where)         # a list is secret as a whole
        return [self.value(k, comp, attr, where, secret or _secret(k), slot + (str(i),))
                for i, k in enumerate(kids)]

    def reference(self, el: etree._Element, comp: Component, attr: str,
                  slot: tuple[str, ...] = ()) -> Value:
        lazy = (el.get("lazy") or "false").strip().lower() in ("true", "1")
        integer = (el.get("type") or "string").strip() == "integer"
        if _local(el) == "ref":
            target = _required(el, "path").strip("/")
            if lazy:
                return Lazy("ref", target)
            self.eager_refs.append((comp, attr, slot, target, el.sourceline or 0))
            return None
        name = _required(el, "name")
        default = el.get("default")
        if name in self.secret_properties and default is not None:
            self.secret_values.add(default)
        if lazy:
            return Lazy("property", name, default, integer)
        self.used.add(name)
        if name in self.properties:
            raw = self.properties[name]
        elif default is not None:
            raw = default
        else:
            raise ResolutionError("deploy-time property %s is not set" % name, kind="missing-property",
                                  path=name, line=el.sourceline)
        if integer:
            try:
                return int(str(raw).strip())
            except ValueError:
                raise ResolutionError("property %s must be an integer, got %r" % (name, raw),
                                      kind="bad-property", path=name, line=el.sourceline) from None
        return raw

    def resolve_refs(self, dep: Deployment) -> None:
        """Copy eagerly referenced values into the attributes (or items of them) that refer to
        them; chains resolve in any order, loops fail."""
        pending = {(id(c), a, slot): (c, a, slot, t, line) for c, a, slot, t, line in self.eager_refs}
        inside: dict[tuple[int, str], set[tuple[str, ...]]] = {}   # (comp, attr) -> their slots
        for key in pending:
            inside.setdefault(key[:2], set()).add(key[2])
        resolving: set[tuple] = set()

        def value_at(target: str, line: int) -> Value:
            try:
                at = dep.split_target(target)
            except ResolutionError:
                at = None
            comp = dep.find(at.component) if at is not None else None
            if comp is None or at.name not in comp.attributes:
                raise ResolutionError("reference %s names nothing" % target, kind="dangling-reference",
                                      path=target, line=line)
            # the references within the part named, or holding it, are copied first
            n = len(at.keys)
            for slot in sorted(inside.get((id(comp), at.name), ())):
                if (slot[:n] == at.keys or at.keys[:len(slot)] == slot) \
                        and (id(comp), at.name, slot) in pending:
                    settle((id(comp), at.name, slot))
            try:
                return copy.deepcopy(at.select(comp.attributes[at.name],     # (w/env/KEY: a key)
                                               secret=dep.within_secret))
            except ResolutionError as e:
                e.line = line
                raise

        def settle(key: tuple) -> None:
            comp, attr, slot, target, line = pending[key]
            if key in resolving:
                raise ResolutionError("reference loop through %s" % target, kind="reference-loop",
                                      path=target, line=line)
            resolving.add(key)
            where = _place(comp.attributes, attr, slot, value_at(target, line))
            if any(s == target or s.startswith(target + "/") or target.startswith(s + "/")
                   for s in self.secrets):      # a copy of a secret is one
                self.secrets.add("/".join([self.path_of(dep, comp), attr] + where))
            resolving.discard(key)
            del pending[key]
            inside[key[:2]].discard(slot)

        while pending:
            settle(next(iter(pending)))

    @staticmethod
    def path_of(dep: Deployment, comp: Component) -> str:
        return next(p for p, c in dep.walk() if c is comp)

    def group(self, el: etree._Element) -> Group:
        members = []
        for m in el:
            if not isinstance(m.tag, str):
                continue
            if _local(m) != "member":
                raise _unexpected(m)
            members.append((m.text or "").strip().strip("/"))
        return Group(_required(el, "name"), members, "line %d" % (el.sourceline or 0))

    def policy(self, el: etree._Element) -> Policy:
        return policies.from_attributes(
            dict(el.attrib), source="line %d" % (el.sourceline or 0),
            error=lambda message, kind: DescriptorError(message, kind=kind, line=el.sourceline))


LANGUAGE = _Native()


def _place(attributes: dict, attr: str, slot: tuple[str, ...], value: Value) -> list[str]:
    """Put ``value`` at ``slot`` within the attribute ``attr`` (the attribute itself when
    ``slot`` is empty); returns the keys of the map items on the way, up to any list: what a
    secret path names (a list is secret as a whole)."""
    if not slot:
        attributes[attr] = value
        return []
    holder, keys, in_list = attributes[attr], [], False
    for step, key in enumerate(slot):
        in_list = in_list or isinstance(holder, list)
        if not in_list:
            keys.append(key)
        index = int(key) if isinstance(holder, list) else key
        if step == len(slot) - 1:
            holder[index] = value
        else:
            holder = holder[index]
    return keys


# -- writing: a component tree as a native document (what a front portal sends a host portal) --
def to_xml(components: list[Component], secrets: Collection[str] = frozenset()) -> etree._Element:
    """``components`` (with their children) as an ``application`` document of this language.
    Lazy values stay lazy (``lazy="true"``): the receiving portal resolves them on its host.
    ``secrets``: the value paths (``web/env/PGPASSWORD``, ``db/password``; a
    ``Deployment.secrets``) written ``secret="true"``, so that the receiving portal keeps them
    as secret as this one does (a list's path marks the whole list, as the reader takes it)."""
    root = etree.Element(ns.qname(N, "application"), nsmap={None: N})
    for comp in components:
        _write_component(root, comp, "", secrets)
    return root


def _write_component(parent: etree._Element, comp: Component, path: str,
                     secrets: Collection[str]) -> None:
    here = path + "/" + comp.name if path else comp.name
    el = etree.SubElement(parent, ns.qname(N, "component"), name=comp.name, type=comp.type)
    for name, value in comp.attributes.items():
        if value == {} or value == [] or value is None:
            continue    # the language has no empty map or list: the type's default is that
        _write_value(etree.SubElement(el, ns.qname(N, "attribute"), name=name), value,
                     here + "/" + name, secrets)
    for child in comp.children:
        _write_component(el, child, here, secrets)


def _write_value(el: etree._Element, value: Value, path: str, secrets: Collection[str]) -> None:
    if path in secrets:
        el.set("secret", "true")
    if isinstance(value, Lazy):
        if value.kind == "ref":
            etree.SubElement(el, ns.qname(N, "ref"), path=value.target, lazy="true")
        else:
            ref = etree.SubElement(el, ns.qname(N, "property"), name=value.target, lazy="true")
            if value.default is not None:
                ref.set("default", str(value.default))
            if value.integer:
                ref.set("type", "integer")
    elif isinstance(value, dict):
        for key, item in value.items():
            _write_value(etree.SubElement(el, ns.qname(N, "item"), name=str(key)), item,
                         path + "/" + str(key), secrets)
    elif isinstance(value, list):
        for item in value:
            _write_value(etree.SubElement(el, ns.qname(N, "item")), item, path, ())
    elif isinstance(value, bool):
        el.text = "true" if value else "false"
    elif value is not None:
        el.text = str(value)
