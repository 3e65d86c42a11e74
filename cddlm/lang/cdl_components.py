"""From a resolved ``cdl:system`` to the component tree (the rules are in docs/languages.md).

* An element with ``cmp:type`` (inherited from the library prototypes ``cmp:process``,
  ``cmp:file``, ... through ``cdl:extends``) is a component named by its local name; its
  component children are its children, every other child element is one of its attributes.
* A value is: the text of a leaf (stripped, unless ``xml:space="preserve"``); a list when every
  child is ``item``; a map (name → value) when every child is ``item name="..."``, or from the
  children's local names otherwise; a lazy property (``cmp:property lazy="true"``) or a lazy
  reference, as ``Lazy``.
* ``cmp:group`` and ``cmp:policy`` children of ``cdl:system`` state placement groups and
  policies (as in the native language). Other elements outside components are shared values
  for references; a component must not hide inside one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lxml import etree

from cddlm import ns
from cddlm.errors import DescriptorError, ResolutionError
from cddlm.lang import policies
from cddlm.lang.model import Component, Deployment, Group, Lazy, Policy, Value

if TYPE_CHECKING:  # pragma: no cover
    from cddlm.lang.cdl import _Resolver

TYPE = "{%s}type" % ns.CMP
PROPERTY = "{%s}property" % ns.CMP
GROUP = "{%s}group" % ns.CMP
POLICY = "{%s}policy" % ns.CMP
SPACE = "{%s}space" % ns.XML
SECRET = "{%s}secret" % ns.CMP      # cmp:secret="true": the element's value is a secret


def to_deployment(system: etree._Element, resolver: "_Resolver") -> Deployment:
    return _Mapper(system, resolver).deployment()


def _local(el: etree._Element) -> str:
    return el.tag.rpartition("}")[2]


class _Mapper:
    def __init__(self, system: etree._Element, resolver: "_Resolver"):
        self.system = system
        self.resolver = resolver
        self.paths: set[str] = set()
        self.active: set[etree._Element] = set()   # lazy references being followed
        self.secrets: set[str] = set()

    def error(self, message: str, kind: str, el: etree._Element, path: str | None = None):
        return DescriptorError(message, kind=kind, path=path, **self.resolver.where(el))

    def deployment(self) -> Deployment:
        dep = Deployment()
        roots = [el for el in self.system if el.get(TYPE) is not None]
        for el in roots:
            self.collect(el, "")
        for el in self.system:
            if el.get(TYPE) is not None:
                dep.components.append(self.component(el, ""))
            elif el.tag == GROUP:
                dep.groups.append(self.group(el))
            elif el.tag == POLICY:
                dep.policies.append(self.policy(el))
            else:
                self.no_component_inside(el)
        dep.secrets = self.secrets
        dep.secret_properties = set(self.resolver.secret_properties)
        return dep

    def collect(self, el: etree._Element, parent: str) -> None:
        path = parent + "/" + _local(el) if parent else _local(el)
        self.paths.add(path)
        for child in el:
            if child.get(TYPE) is not None:
                self.collect(child, path)

    def no_component_inside(self, el: etree._Element) -> None:
        for inner in el.iter():
            if inner.get(TYPE) is not None:
                raise self.error("component %s is inside the value %s; put components in a "
                                 "container (cmp:compound) instead" % (_local(inner), _local(el)),
                                 "invalid-structure", inner)

    def where(self, el: etree._Element) -> str:
        w = self.resolver.where(el)
        return "%s:%s" % (w["file"], w["line"]) if w["file"] else "line %s" % w["line"]

    def component(self, el: etree._Element, parent: str) -> Component:
        name = _local(el)
        path = parent + "/" + name if parent else name
        comp = Component(name=name, type=el.get(TYPE).strip(), source=self.where(el))
        for child in el:
            if child.get(TYPE) is not None:
                comp.children.append(self.component(child, path))
                continue
            attr = _local(child)
            if child.tag in (GROUP, POLICY):
                raise self.error("cmp:%s belongs directly in cdl:system" % attr, "invalid-structure",
                                 child, path)
            if attr in comp.attributes:
                raise self.error("attribute %s is given twice; use <item> children for a list"
                                 % attr, "duplicate-name", child, path + "/" + attr)
            comp.attributes[attr] = self.value(child, path + "/" + attr)
        return comp

    def value(self, el: etree._Element, path: str) -> Value:
        if el.get(TYPE) is not None:
            raise self.error("a component cannot be part of a value", "invalid-structure", el, path)
        if (el.get(SECRET) or "").strip().lower() in ("true", "1"):
            self.secrets.add(path.split("[", 1)[0])     # a list is secret as a whole
        if self.resolver.is_lazy(el):
            return self.lazy_reference(el, path)
        kids = list(el)
        if not kids:
            text = el.text or ""
            return text if el.get(SPACE) == "preserve" else text.strip()
        if (el.text or "").strip():
            raise self.error("a value holds text or elements, not both", "mixed-value", el, path)
        if len(kids) == 1 and kids[0].tag == PROPERTY:
            p = kids[0]
            return Lazy("property", p.get("name").strip(), p.get("default"),
                        (p.get("type") or "string").strip() == "integer")
        if all(_local(k) == "item" for k in kids):
            named = [k.get("name") is not None for k in kids]
            if not any(named):
                return [self.value(k, "%s[%d]" % (path, i)) for i, k in enumerate(kids)]
            if not all(named):
                raise self.error("either every item has a name (a map) or none (a list)",
                                 "mixed-value", el, path)
            keys = [k.get("name") for k in kids]
        else:
            keys = [_local(k) for k in kids]
        out: dict[str, Value] = {}
        for key, kid in zip(keys, kids):
            if key in out:
                raise self.error("%s is given twice in %s" % (key, path), "duplicate-name", kid, path)
            out[key] = self.value(kid, path + "/" + key)
        return out

    def lazy_reference(self, el: etree._Element, path: str) -> Value:
        """A lazy reference into a component is resolved on the host; one to a constant (outside
        every component, or in a prototype) is that constant."""
        refroot, steps = self.resolver.lazy_target(el)
        names = [etree.QName(s).localname for s in steps]
        if refroot is None:
            for cut in range(len(names), 0, -1):
                if "/".join(names[:cut]) in self.paths:
                    if cut == len(names):
                        raise self.error("lazy reference %s names a component, not a value"
                                         % "/".join(names), "lazy-reference", el, path)
                    return Lazy("ref", "/".join(names))
        target = self.resolver.static(refroot, steps, self.system)
        if target is None:
            raise ResolutionError("lazy reference /%s names nothing" % "/".join(names),
                                  kind="dangling-reference", path=path, **self.resolver.where(el))
        if el in self.active:
            raise ResolutionError("lazy reference loop through %s" % path, kind="reference-loop",
                                  path=path, **self.resolver.where(el))
        self.active.add(el)
        try:
            return self.value(target, path)
        finally:
            self.active.discard(el)

    def group(self, el: etree._Element) -> Group:
        name = (el.get("name") or "").strip()
        if not name:
            raise self.error("cmp:group needs a name", "missing-attribute", el)
        members = self.value(el, name)
        if members == "":
            members = []
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise self.error("cmp:group holds <item> children naming components or groups",
                             "invalid-structure", el, name)
        return Group(name, [m.strip("/") for m in members], self.where(el))

    def policy(self, el: etree._Element) -> Policy:
        """``<cmp:policy type="anti-collocation" level="host" group="g" hard="false" weight="2"/>``"""
        return policies.from_attributes(
            {k: v for k, v in el.attrib.items() if not k.startswith("{")}, source=self.where(el),
            error=lambda message, kind: self.error(message, kind, el))
