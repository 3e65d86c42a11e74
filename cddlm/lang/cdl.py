"""CDL 1.0 (``http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0``): parse, import,
extend, reference, evaluate, and map the resolved ``cdl:system`` to the component tree.

The phases, as the reference implementation ordered them (notes/cddlm-reference.md section 3):

1. Load each document (the descriptor, then its imports depth-first): parse through
   ``xmlsafe``, check the root and the order of its children, and *prepare* its configuration
   and system (the few elements that need it are found by XPath). Preparing resolves every QName while the element is still in its own
   document (``cdl:extends``, ``cdl:refroot``, prefixed reference steps: prefixes mean what they
   mean where they are written), replaces each ``cdl:extends``/``cdl:ref``/expression by an
   internal stamp, substitutes eager deploy-time properties, drops documentation and comments,
   and rejects what is malformed (unknown CDL elements or attributes, reference elements with
   content, bad booleans, duplicate expression variables, unknown prefixes).
2. Register the configuration's children as prototypes under their QNames (unprefixed names
   move into the ``namespace`` of a namespaced import), then import.
3. Extends: every prototype, then the system. A prototype is resolved once and kept as a
   template; an element extending it is merged with a copy (see ``merge``).
4. Values, under ``cdl:system``: eager references copy their target, lazy references record
   their absolute target, expressions are evaluated. Each is settled on demand, so chains
   resolve in any order; a loop, or a chain longer than ``MAX_CHAIN``, is an error.
5. The resolved system is printed (``display``) and mapped to a ``Deployment``
   (``cdl_components``).

Cost: each prototype is resolved once; a reference step is a dictionary lookup (children are
indexed per parent on first use); every copied node is counted against
``limits.max_resolved_nodes`` *before* it is copied, so a small document that would expand
exponentially fails at once.
"""

from __future__ import annotations

import posixpath
import re
from collections import deque
from dataclasses import dataclass, field

from lxml import etree

from cddlm import ns
from cddlm.budget import ExpressionError, check_xpath
from cddlm.errors import DescriptorError, ResolutionError
from cddlm.lang import cdl_components
from cddlm.lang.documents import parse_xml
from cddlm.lang.model import Resolution, ResolveRequest

CDL, CMP = ns.CDL, ns.CMP
INTERNAL = "urn:cddlm:internal:cdl"     # stamps on working elements; never printed
_PENDING = "{%s}p" % INTERNAL            # "r<n>": reference n; "e<n>": holds expression n
_EXTENDS = "{%s}x" % INTERNAL            # index into _Resolver.extends
_LAZY = "{%s}l" % INTERNAL               # index into _Resolver.lazy_targets (a settled lazy ref)
_DOC = "{%s}d" % INTERNAL                # index of the document an element comes from (not 0)
_ROOT = "{%s}root" % INTERNAL
STAMPS = (_PENDING, _EXTENDS, _LAZY, _DOC)
# scans of whole subtrees run in libxml2, not in Python
_SIZE = etree.XPath("count(descendant-or-self::*)")
_PENDING_BELOW = etree.XPath(".//*[@i:p]", namespaces={"i": INTERNAL})
_PENDING_IN = etree.XPath("descendant-or-self::*[@i:p]", namespaces={"i": INTERNAL})
_LAZY_IN = etree.XPath("descendant-or-self::*[@i:l]", namespaces={"i": INTERNAL})
_X = {"cdl": CDL, "cmp": CMP}
_NOISE = etree.XPath(".//comment() | .//cdl:documentation", namespaces=_X)
_CDL_ELEMENTS = etree.XPath(".//cdl:*[not(self::cdl:variable and parent::cdl:expression)]",
                            namespaces=_X)
_PROPERTIES = etree.XPath(".//cmp:property", namespaces=_X)
_CDL_ATTRIBUTED = etree.XPath("descendant-or-self::*[@cdl:*][not(self::cdl:*)]", namespaces=_X)
_BLANKS = etree.XPath("descendant-or-self::*[*]/text()[not(normalize-space())]")

MAX_CHAIN = 100                          # references / extends in progress at once
BOOLEANS = {"true": True, "1": True, "false": False, "0": False}
NCNAME = re.compile(r"^[^\W\d][\w.\-]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]+:")
URL_HEAD = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:(?://[^/]*)?")   # scheme: and //authority
ROOT_ORDER = {"documentation": 0, "import": 1, "types": 2, "configuration": 3, "system": 4}
REPEATABLE = {"import"}
CDL_ATTRIBUTES = {"extends", "ref", "refroot", "lazy", "use", "type"}


def _q(local: str, namespace: str = CDL) -> str:
    return "{%s}%s" % (namespace, local)


SYSTEM, CONFIGURATION = _q("system"), _q("configuration")
EXPRESSION, VARIABLE, PROPERTY = _q("expression"), _q("variable"), _q("property", CMP)
CDL_PREFIX = "{%s}" % CDL


@dataclass
class _Doc:
    index: int
    label: str | None        # where errors say it is; None: the descriptor (the caller names it)
    url: str | None          # base of its relative imports
    rehome: str | None       # namespace of a namespaced import
    configuration: etree._Element | None = None
    system: etree._Element | None = None


@dataclass
class _Proto:
    qname: str
    element: etree._Element
    doc: _Doc
    extending: list = field(default_factory=list)   # stamped elements inside, document order
    state: int = 0                                  # 0 new, 1 resolving, 2 resolved
    sizes: list[int] = field(default_factory=list)  # node count of each resolved child


@dataclass(frozen=True)
class _Extends:
    target: str
    doc: int
    line: int | None
    text: str


@dataclass(frozen=True)
class _Ref:
    text: str                 # as written, for messages
    refroot: str | None       # Clark name of a prototype, or None
    absolute: bool
    steps: tuple[str, ...]    # ".." or a Clark name
    lazy: bool
    doc: int
    line: int | None


@dataclass(frozen=True)
class _Expr:
    value_of: str
    xpath: etree.XPath
    variables: tuple[tuple[str, _Ref], ...]
    doc: int
    line: int | None


class _Cdl:
    uri = ns.CDL
    name = "CDL"
    version = "1.0"
    body = "xml"

    def resolve(self, request: ResolveRequest) -> Resolution:
        resolver = _Resolver(request)
        try:
            return resolver.run()
        except RecursionError:
            raise DescriptorError("the document nests extends, references or elements too deeply",
                                  kind="too-deep") from None


class _Resolver:
    def __init__(self, request: ResolveRequest):
        self.request = request
        self.limits = request.limits
        self.docs: list[_Doc] = []
        self.protos: dict[str, _Proto] = {}
        self.extends: list[_Extends] = []
        self.refs: list[_Ref] = []
        self.exprs: list[_Expr] = []
        self.lazy_targets: list[tuple[str | None, tuple[str, ...]]] = []
        self.used: set[str] = set()
        self.secret_properties: set[str] = set()   # properties read inside values marked secret
        self.nodes = 0
        self.loading: list[tuple[str | None, str | None]] = []
        self.loaded: set[tuple[str | None, str | None]] = set()
        self.namespaces: dict[str, str] = {}          # namespaced import -> its location
        self.resolving: list[str] = []                # prototypes being resolved (extends loop)
        self.active: dict[etree._Element, None] = {}  # values being settled (reference loop)
        self.index: dict[etree._Element, dict[str, etree._Element]] = {}
        self.settled: dict[etree._Element, int] = {}  # settled subtrees and their sizes
        self.proto_names: dict[etree._Element, str] = {}
        self.doc_roots: list[etree._Element] = []
        self.root_index: dict[etree._Element, int] = {}
        self.system_extending: list[etree._Element] = []

    # -- errors --------------------------------------------------------------------------------
    def where(self, el: etree._Element | None = None, doc: int | None = None,
              line: int | None = None) -> dict:
        """file and line of an element: a copy carries the index of its document; an original
        is found by the root of its document."""
        if doc is None and el is not None:
            stamp = el.get(_DOC)
            doc = int(stamp) if stamp is not None else \
                self.root_index.get(el.getroottree().getroot(), 0)
        if line is None and el is not None:
            line = el.sourceline
        return {"file": self.docs[doc or 0].label, "line": line}

    def descriptor_error(self, message: str, kind: str, el=None, *, doc: int | None = None,
                         line: int | None = None, path: str | None = None) -> DescriptorError:
        return DescriptorError(message, kind=kind, path=path, **self.where(el, doc, line))

    def resolution_error(self, message: str, kind: str, el=None, *, doc: int | None = None,
                         line: int | None = None, path: str | None = None) -> ResolutionError:
        return ResolutionError(message, kind=kind, path=path, **self.where(el, doc, line))

    def charge(self, count: int) -> None:
        self.nodes += count
        if self.nodes > self.limits.max_resolved_nodes:
            raise DescriptorError("the resolved document would exceed %d nodes: extends and "
                                  "references expand it too much" % self.limits.max_resolved_nodes,
                                  kind="too-large")

    # -- the whole run -------------------------------------------------------------------------
    def run(self) -> Resolution:
        source = self.request.source
        if isinstance(source, etree._Element):
            # a SOAP body: serialising keeps the namespaces declared on its ancestors
            source = etree.tostring(source)
        top = self.load(source, None, self.request.base_url, None)
        for proto in list(self.protos.values()):
            self.resolve_prototype(proto)
        system = top.system
        if system is None:
            system = etree.SubElement(self.doc_roots[0], SYSTEM)
        for el in reversed(self.system_extending):
            self.merge(el)
        self.settle_below(system, inclusive=True)
        deployment = cdl_components.to_deployment(system, self)
        return Resolution(deployment, lambda: self.display(system), tuple(sorted(self.used)))

    # -- phase 1 and 2: documents and imports ---------------------------------------------------
    def load(self, data: bytes | str, label: str | None, url: str | None,
             rehome: str | None) -> _Doc:
        doc = _Doc(len(self.docs), label, url, rehome)
        self.docs.append(doc)
        root = parse_xml(data, self.limits, label, quote=self.request.quotes(url))
        # an internal attribute on the root declares the internal namespace there, once, so
        # stamps below add no declarations of their own
        root.set(_ROOT, "")
        self.doc_roots.append(root)
        self.root_index[root] = doc.index
        self.charge(int(_SIZE(root)))
        imports = self.check_root(root, doc)
        for node in _NOISE(root):   # comments and documentation mean nothing
            _drop(node)
        key = (url, rehome)
        self.loading.append(key)
        if doc.configuration is not None:
            for proto_el in list(doc.configuration):
                self.add_prototype(proto_el, doc)
        if doc.system is not None:
            extending = self.prepare(doc.system, doc, is_system=True)
            if doc.index == 0:
                self.system_extending = extending
        for el in imports:
            self.do_import(el, doc)
        self.loading.pop()
        self.loaded.add(key)
        return doc

    def check_root(self, root: etree._Element, doc: _Doc) -> list[etree._Element]:
        qn = etree.QName(root)
        quoted = self.request.quotes(doc.url)
        if qn.namespace != CDL:
            raise self.descriptor_error(
                "not a CDL 1.0 document: the root element is %s; CDL 1.0 documents are in "
                "the namespace %s" % ("{%s}%s" % (qn.namespace or "", qn.localname) if quoted
                                      else "in another namespace", CDL), "wrong-namespace", root)
        if qn.localname != "cdl":
            raise self.descriptor_error("the root element must be cdl:cdl%s"
                                        % (", not cdl:%s" % qn.localname if quoted else ""),
                                        "wrong-root", root)
        for name in root.attrib:
            if not name.startswith("{") and name != "targetNamespace":  # the internal one has {
                raise self.descriptor_error("unexpected attribute %s on cdl:cdl" % name,
                                            "unexpected-attribute", root)
        imports, last = [], -1
        for child in root:
            if not isinstance(child.tag, str):
                continue
            cq = etree.QName(child)
            if cq.namespace != CDL:
                continue  # the reference implementation ignores foreign elements here
            order = ROOT_ORDER.get(cq.localname)
            if order is None:
                raise self.descriptor_error("unknown element cdl:%s" % cq.localname,
                                            "unknown-element", child)
            if order < last or (order == last and cq.localname not in REPEATABLE):
                raise self.descriptor_error(
                    "cdl:%s is out of place: the order is documentation, import*, types, "
                    "configuration, system, each at most once" % cq.localname, "element-order", child)
            last = order
            if cq.localname == "import":
                imports.append(child)
            elif cq.localname == "configuration":
                doc.configuration = child
            elif cq.localname == "system":
                doc.system = child
        return imports

    def add_prototype(self, el: etree._Element, doc: _Doc) -> None:
        if etree.QName(el).namespace == CDL:
            raise self.descriptor_error("unknown element %s in cdl:configuration"
                                        % etree.QName(el).localname, "unknown-element", el)
        qname = el.tag
        if doc.rehome and not qname.startswith("{"):
            qname = "{%s}%s" % (doc.rehome, qname)
        existing = self.protos.get(qname)
        if existing is not None:
            if existing.doc is not doc and doc.url is not None and existing.doc.url == doc.url:
                doc.configuration.remove(el)  # the same document imported in another way
                return
            raise self.descriptor_error("duplicate prototype %s (first declared in %s)"
                                        % (qname, existing.doc.label or "the descriptor"),
                                        "duplicate-prototype", el)
        proto = _Proto(qname, el, doc)
        proto.extending = self.prepare(el, doc, is_system=False)
        self.protos[qname] = proto
        self.proto_names[el] = qname

    def do_import(self, el: etree._Element, doc: _Doc) -> None:
        for name in el.attrib:
            if name not in ("location", "namespace") and not name.startswith("{"):
                raise self.descriptor_error("unexpected attribute %s on cdl:import" % name,
                                            "unexpected-attribute", el)
        location = (el.get("location") or "").strip()
        if not location:
            raise self.descriptor_error("cdl:import needs a location", "missing-attribute", el)
        namespace = (el.get("namespace") or "").strip() or None
        url = self.absolute(location, doc, el)
        key = (url, namespace)
        if key in self.loading:
            raise self.resolution_error("recursive import of %s%s" % (
                url, " into " + namespace if namespace else ""), "import-loop", el, path=location)
        if key in self.loaded:
            return
        if namespace is not None:
            there = self.namespaces.get(namespace)
            if there is not None and there != url:
                raise self.resolution_error("cannot import %s into %s: %s is there already"
                                            % (url, namespace, there), "namespace-clash", el)
            self.namespaces[namespace] = url
        try:
            data = self.request.loader(url)
        except ResolutionError as e:
            if not e.file:
                e.file, e.line = doc.label, el.sourceline
            raise
        self.load(data, url, url, namespace)

    def absolute(self, location: str, doc: _Doc, el: etree._Element) -> str:
        if SCHEME.match(location):
            return location
        if doc.url is None:
            raise self.resolution_error("cannot resolve the relative import %s: the descriptor has "
                                        "no location of its own" % location, "import", el,
                                        path=location)
        # file:///a/b.cdl, http://host/a/b.cdl, classpath:/a/b.cdl, urn:cddlm:library:b.cdl
        base = doc.url
        head = URL_HEAD.match(base)
        prefix = ns.LIBRARY_PREFIX if base.startswith(ns.LIBRARY_PREFIX) else head[0] if head else ""
        path = base[len(prefix):]
        joined = location if location.startswith("/") else \
            posixpath.join(posixpath.dirname(path), location)
        return prefix + posixpath.normpath(joined)

    # -- phase 1: preparing a subtree ----------------------------------------------------------
    def prepare(self, top: etree._Element, doc: _Doc, *, is_system: bool) -> list[etree._Element]:
        """Prepare a prototype or the system (see the module docstring); the few elements that
        need it are found by XPath. Returns the elements that extend a prototype, in document
        order. In a prototype an absolute reference path means the prototype's root, so it
        becomes a relative one that keeps that meaning in every element extending it."""
        def depth(el: etree._Element) -> int | None:
            return None if is_system else _depth_below(el, top)

        for el in _CDL_ELEMENTS(top):
            if el.tag != EXPRESSION:
                raise self.descriptor_error("unknown element cdl:%s here"
                                            % etree.QName(el).localname, "unknown-element", el)
            self.prepare_expression(el, doc, depth(el.getparent()))
        for el in _PROPERTIES(top):
            self.prepare_property(el, doc)
        extending: list[etree._Element] = []
        for el in _CDL_ATTRIBUTED(top):
            if el is not top or not is_system:
                self.prepare_attributes(el, doc, extending, depth(el))
        if doc.index:
            for el in top.iter(etree.Element):
                el.set(_DOC, str(doc.index))
        return extending

    def prepare_attributes(self, el: etree._Element, doc: _Doc, extending: list,
                           depth: int | None) -> None:
        attrs = el.attrib
        for name in [n for n in attrs if n.startswith(CDL_PREFIX)]:
            if name[len(CDL) + 2:] not in CDL_ATTRIBUTES:
                raise self.descriptor_error("unknown CDL attribute cdl:%s" % name[len(CDL) + 2:],
                                            "unexpected-attribute", el)
        extends = attrs.get(_q("extends"))
        if extends is not None:
            target = self.qname(extends, el, doc, rehome=True)
            self.extends.append(_Extends(target, doc.index, el.sourceline, extends.strip()))
            el.set(_EXTENDS, str(len(self.extends) - 1))
            del attrs[_q("extends")]
            extending.append(el)
        ref, refroot, lazy = attrs.get(_q("ref")), attrs.get(_q("refroot")), attrs.get(_q("lazy"))
        if lazy is not None and ref is None and refroot is None:
            raise self.descriptor_error("cdl:lazy without cdl:ref", "missing-attribute", el)
        if ref is None and refroot is None:
            return
        if len(el) or el.text:
            raise self.descriptor_error("a reference element (cdl:ref) must have no content, not "
                                        "even whitespace", "reference-with-children", el)
        if _EXTENDS in attrs:
            raise self.descriptor_error("an element cannot both extend a prototype and be a "
                                        "reference", "bad-reference", el)
        self.refs.append(self.parse_ref(ref if ref is not None else "/", refroot, lazy, el, doc,
                                        depth))
        el.set(_PENDING, "r%d" % (len(self.refs) - 1))
        for name in ("ref", "refroot", "lazy"):
            attrs.pop(_q(name), None)

    def boolean(self, text: str, el: etree._Element, what: str) -> bool:
        value = BOOLEANS.get(text.strip())
        if value is None:
            raise self.descriptor_error("%s must be an XML Schema boolean (true, false, 1, 0), "
                                        "not %r" % (what, text), "bad-boolean", el)
        return value

    def qname(self, text: str, el: etree._Element, doc: _Doc, rehome: bool = False) -> str:
        prefix, _, local = text.strip().rpartition(":")
        if not NCNAME.match(local) or (prefix and not NCNAME.match(prefix)):
            raise self.descriptor_error("%r is not a QName" % text, "bad-qname", el)
        if not prefix:
            return "{%s}%s" % (doc.rehome, local) if rehome and doc.rehome else local
        uri = el.nsmap.get(prefix)
        if uri is None:
            raise self.descriptor_error("undeclared namespace prefix %r in %r" % (prefix, text),
                                        "unknown-prefix", el)
        return "{%s}%s" % (uri, local)

    def parse_ref(self, text: str, refroot: str | None, lazy: str | None,
                  el: etree._Element, doc: _Doc, depth: int | None) -> _Ref:
        body = text.strip()
        absolute = body.startswith("/")
        rest = body[1:] if absolute else body
        steps: list[str] = []
        for part in rest.split("/") if rest else []:
            if part == ".":
                continue
            if part == "..":
                steps.append("..")
            elif not part:
                raise self.descriptor_error("empty step in reference %r" % text, "bad-reference", el)
            else:
                steps.append(self.qname(part, el, doc))
        if not body and refroot is None:
            raise self.descriptor_error("empty reference", "bad-reference", el)
        root = self.qname(refroot, el, doc) if refroot is not None else None
        if absolute and root is None and depth:   # inside a prototype: from its root
            steps = [".."] * (depth - 1) + steps
            absolute = False
        return _Ref(text, root, absolute, tuple(steps),
                    self.boolean(lazy, el, "cdl:lazy") if lazy is not None else False,
                    doc.index, el.sourceline)

    def prepare_expression(self, el: etree._Element, doc: _Doc, depth: int | None) -> None:
        holder = el.getparent()
        value_of = el.get("value-of")
        if value_of is None:
            raise self.descriptor_error("cdl:expression needs a value-of attribute",
                                        "missing-attribute", el)
        namespaces = {p: u for p, u in el.nsmap.items() if p and u != INTERNAL}
        if "http://exslt.org/regular-expressions" in namespaces.values():
            raise self.descriptor_error("regular expressions are not allowed in expressions",
                                        "expression", el)
        try:   # XPath 1.0 only: EXSLT's functions (str:padding ...) are not offered
            namespaces = check_xpath(value_of, namespaces, self.limits.max_expression_chars)
        except ExpressionError as e:
            raise self.descriptor_error(str(e), "too-large", el) from None
        variables: dict[str, _Ref] = {}
        for var in el:   # comments and documentation are gone already
            if var.tag != VARIABLE:
                raise self.descriptor_error("unexpected element %s in cdl:expression" % var.tag,
                                            "unexpected-element", var)
            name = (var.get("name") or "").strip()
            if not name or var.get("ref") is None:
                raise self.descriptor_error("cdl:variable needs name and ref", "missing-attribute", var)
            if name in variables:
                raise self.descriptor_error("duplicate variable in expression: %s" % name,
                                            "duplicate-variable", var)
            ref = self.parse_ref(var.get("ref"), var.get("refroot"), var.get(_q("lazy")), var, doc,
                                 depth)
            if ref.lazy:
                raise self.descriptor_error("variable %s is lazy, but expressions are evaluated at "
                                            "resolution" % name, "lazy-expression", var)
            variables[name] = ref
        try:
            xpath = etree.XPath(value_of, namespaces=namespaces, smart_strings=False)
        except etree.XPathSyntaxError as e:
            raise self.descriptor_error("bad XPath %r: %s" % (value_of, e), "expression", el) from None
        if _not_alone(el):
            raise self.descriptor_error("cdl:expression must be the only content of its element",
                                        "expression", el)
        self.exprs.append(_Expr(value_of, xpath, tuple(variables.items()), doc.index, el.sourceline))
        holder.set(_PENDING, "e%d" % (len(self.exprs) - 1))

    def prepare_property(self, el: etree._Element, doc: _Doc) -> None:
        """``<x><cmp:property name="db.port" type="integer" lazy="false" default="5432"/></x>``:
        an eager property becomes x's text now; a lazy one stays for the host."""
        holder = el.getparent()
        if _not_alone(el):
            raise self.descriptor_error("cmp:property must be the only content of its element",
                                        "bad-property", el)
        name = (el.get("name") or "").strip()
        if not name:
            raise self.descriptor_error("cmp:property needs a name", "missing-attribute", el)
        kind = (el.get("type") or "string").strip()
        if kind not in ("string", "integer"):
            raise self.descriptor_error("cmp:property type must be string or integer, not %r"
                                        % kind, "bad-property", el)
        if any((a.get(cdl_components.SECRET) or "").strip().lower() in ("true", "1")
               for a in holder.iterancestors()) or \
                (holder.get(cdl_components.SECRET) or "").strip().lower() in ("true", "1"):
            self.secret_properties.add(name)     # read inside a value marked secret
        if self.boolean(el.get("lazy", "false"), el, "lazy"):
            return
        self.used.add(name)
        value = self.request.properties.get(name, el.get("default"))
        if value is None:
            raise self.resolution_error("deploy-time property %s is not set" % name,
                                        "missing-property", el, path=name)
        if kind == "integer":
            try:
                value = str(int(str(value).strip()))
            except ValueError:
                raise self.resolution_error("deploy-time property %s must be an integer, not %r"
                                            % (name, value), "bad-property", el, path=name) from None
        holder.remove(el)
        holder.text = value

    # -- phase 3: extends ----------------------------------------------------------------------
    def resolve_prototype(self, proto: _Proto) -> None:
        if proto.state == 2:
            return
        if proto.state == 1:
            cycle = self.resolving[self.resolving.index(proto.qname):] + [proto.qname]
            raise self.resolution_error("recursive extension: %s" % " -> ".join(cycle),
                                        "extends-loop", proto.element)
        if len(self.resolving) >= MAX_CHAIN:
            raise self.descriptor_error("extends nested deeper than %d prototypes" % MAX_CHAIN,
                                        "too-deep", proto.element)
        proto.state = 1
        self.resolving.append(proto.qname)
        for el in reversed(proto.extending):   # descendants before their ancestors
            self.merge(el)
        proto.sizes = [int(_SIZE(c)) for c in proto.element]
        self.resolving.pop()
        proto.state = 2

    def merge(self, el: etree._Element) -> None:
        """``el`` extends a prototype: inherit its attributes, replace its elements by el's own
        elements of the same name (the k-th by the k-th, wholesale, gaining missing attributes),
        copy the others in the prototype's order, then append el's remaining elements."""
        ext = self.extends[int(el.attrib.pop(_EXTENDS))]
        proto = self.protos.get(ext.target)
        if proto is None:
            raise self.resolution_error("unknown prototype %s in cdl:extends=%r" % (ext.target, ext.text),
                                        "unknown-prototype", doc=ext.doc, line=ext.line)
        self.resolve_prototype(proto)
        template = proto.element
        own: dict[str, deque] = {}
        for child in el:
            own.setdefault(child.tag, deque()).append(child)
        used: set[etree._Element] = set()
        merged = []
        for parent_child, size in zip(template, proto.sizes):
            mine = own.get(parent_child.tag)
            if mine:
                child = mine.popleft()
                _inherit(child, parent_child)
                used.add(child)
                merged.append(child)
            else:
                self.charge(size)
                merged.append(_copy(parent_child))
        merged.extend(c for c in el if c not in used)
        for child in list(el):
            el.remove(child)
        el.extend(merged)
        _inherit(el, template)
        if not (el.text or "").strip():
            el.text = None if len(el) else template.text

    # -- phase 4: values -----------------------------------------------------------------------
    def settle_below(self, top: etree._Element, *, inclusive: bool = False) -> None:
        """Settle every value pending under ``top`` (and ``top`` itself when ``inclusive``)."""
        for el in (_PENDING_IN if inclusive else _PENDING_BELOW)(top):
            if el.get(_PENDING) is not None:   # settling an earlier one may have settled it
                self.settle(el)

    def settle(self, el: etree._Element) -> None:
        pending = el.get(_PENDING)
        if el in self.active:
            chain = [self.describe(e) for e in self.active] + [self.describe(el)]
            raise self.resolution_error("reference loop: %s" % " -> ".join(chain), "reference-loop",
                                        el, path=self.path_of(el))
        if len(self.active) >= MAX_CHAIN:
            raise self.resolution_error("reference chain deeper than %d; suspected recursive "
                                        "resolution" % MAX_CHAIN, "reference-loop", el,
                                        path=self.path_of(el))
        self.active[el] = None
        try:
            if pending[0] == "e":
                self.evaluate(el, self.exprs[int(pending[1:])])
            else:
                ref = self.refs[int(pending[1:])]
                if ref.lazy:
                    self.mark_lazy(el, ref)
                else:
                    self.copy_target(el, ref)
        finally:
            del self.active[el]

    def describe(self, el: etree._Element) -> str:
        pending = el.get(_PENDING) or ""
        if pending.startswith("r"):
            return "%s (%s)" % (self.path_of(el), self.refs[int(pending[1:])].text)
        return self.path_of(el)

    def start(self, el: etree._Element, ref: _Ref) -> tuple[etree._Element, etree._Element]:
        """The root a reference is resolved under, and the element its steps start from."""
        if ref.refroot is not None:
            proto = self.protos.get(ref.refroot)
            if proto is None:
                raise self.resolution_error("unknown cdl:refroot %s" % ref.refroot, "unknown-refroot",
                                            doc=ref.doc, line=ref.line, path=self.path_of(el))
            return proto.element, proto.element
        root = _root_of(el)
        if ref.absolute:
            return root, root
        parent = el.getparent()
        if el is root or parent is None:
            raise self.too_far(el, ref)
        return root, parent

    def too_far(self, el, ref: _Ref) -> ResolutionError:
        return self.resolution_error("reference %r goes too far up, above %s" % (
            ref.text, "its prototype" if _root_of(el).tag != SYSTEM else "cdl:system"),
            "path-too-far-up", doc=ref.doc, line=ref.line, path=self.path_of(el))

    def locate(self, el: etree._Element, ref: _Ref) -> etree._Element:
        root, node = self.start(el, ref)
        for step in ref.steps:
            if step == "..":
                if node is root:
                    raise self.too_far(el, ref)
                node = node.getparent()
                continue
            if node.get(_PENDING) is not None:
                self.settle(node)
            if node.get(_LAZY) is not None:
                raise self.resolution_error("reference %r passes through the lazy reference %s"
                                            % (ref.text, self.path_of(node)), "lazy-reference",
                                            doc=ref.doc, line=ref.line, path=self.path_of(el))
            child = self.child(node, step)
            if child is None:
                raise self.resolution_error("reference %r: no element %s under %s" % (
                    ref.text, step, self.path_of(node)), "dangling-reference",
                    doc=ref.doc, line=ref.line, path=self.path_of(el))
            node = child
        if node.get(_PENDING) is not None:
            self.settle(node)
        return node

    def child(self, parent: etree._Element, tag: str) -> etree._Element | None:
        index = self.index.get(parent)
        if index is None:
            index = {}
            for c in parent:
                index.setdefault(c.tag, c)
            self.index[parent] = index
        return index.get(tag)

    def copy_target(self, el: etree._Element, ref: _Ref) -> None:
        target = self.locate(el, ref)
        if target.get(_LAZY) is not None:  # the value of a lazy reference is that reference
            del el.attrib[_PENDING]
            el.set(_LAZY, target.get(_LAZY))
            return
        size = 1 if not len(target) else self.settled.get(target)   # a leaf holds nothing pending
        if size is None:
            # settle what the target holds first (el itself among it is a loop); a settled
            # subtree never changes again, so its size is remembered
            self.settle_below(target)
            size = self.settled[target] = int(_SIZE(target))
        self.charge(size - 1)
        del el.attrib[_PENDING]
        if target.get(cdl_components.SECRET) is not None:   # a copy of a secret is one
            el.set(cdl_components.SECRET, target.get(cdl_components.SECRET))
        el.text = target.text
        for c in target:
            el.append(_copy(c))
        if size > 1:
            self.settled[el] = size

    def mark_lazy(self, el: etree._Element, ref: _Ref) -> None:
        root, start = self.start(el, ref)
        path = self.steps_from(root, start)
        for step in ref.steps:
            if step != "..":
                path.append(step)
            elif path:
                path.pop()
            else:
                raise self.too_far(el, ref)
        self.lazy_targets.append((self.proto_names.get(root), tuple(path)))
        del el.attrib[_PENDING]
        el.set(_LAZY, str(len(self.lazy_targets) - 1))

    def evaluate(self, holder: etree._Element, expr: _Expr) -> None:
        values = {}
        for name, ref in expr.variables:
            target = self.locate(holder, ref)
            self.settle_below(target)
            if _LAZY_IN(target) or next(target.iter(PROPERTY), None) is not None:
                raise self.resolution_error("expression variable %s names a lazy value; expressions "
                                            "are evaluated at resolution" % name, "lazy-expression",
                                            doc=expr.doc, line=expr.line, path=self.path_of(holder))
            _strip_blanks(target)
            values[name] = "".join(target.itertext())
        # XPath 1.0 over a one-element document makes no string longer than its inputs put
        # together, each as often as the expression names it: bound that before evaluating
        bound = len(expr.value_of) + sum(len(v) * expr.value_of.count("$" + k)
                                         for k, v in values.items())
        if bound > self.limits.max_value_chars:
            raise self.resolution_error("expression %r could make a value longer than %d "
                                        "characters" % (expr.value_of[:60], self.limits.max_value_chars),
                                        "too-large", doc=expr.doc, line=expr.line,
                                        path=self.path_of(holder))
        try:
            result = expr.xpath(etree.Element("context"), **values)
        except etree.XPathError as e:
            raise self.resolution_error("cannot evaluate %r: %s" % (expr.value_of, e), "expression",
                                        doc=expr.doc, line=expr.line,
                                        path=self.path_of(holder)) from None
        for c in list(holder):
            holder.remove(c)
        holder.text = _xpath_string(result)
        del holder.attrib[_PENDING]

    # -- paths ---------------------------------------------------------------------------------
    def steps_from(self, root: etree._Element, el: etree._Element) -> list[str]:
        steps = []
        while el is not root:
            steps.append(el.tag)
            el = el.getparent()
        steps.reverse()
        return steps

    def path_of(self, el: etree._Element) -> str:
        root = _root_of(el)
        names = [etree.QName(t).localname for t in self.steps_from(root, el)]
        head = "" if root.tag == SYSTEM else etree.QName(root).localname
        return head + "/" + "/".join(names)

    @staticmethod
    def is_lazy(el: etree._Element) -> bool:
        return el.get(_LAZY) is not None

    def lazy_target(self, el: etree._Element) -> tuple[str | None, tuple[str, ...]]:
        return self.lazy_targets[int(el.get(_LAZY))]

    def static(self, refroot: str | None, steps: tuple[str, ...],
               system: etree._Element) -> etree._Element | None:
        """The element at an absolute path, when there is one (for lazy references to constants)."""
        node = self.protos[refroot].element if refroot else system
        for step in steps:
            node = self.child(node, step)
            if node is None or node.get(_LAZY) is not None:
                return None
        return node

    # -- phase 5: the printed form -------------------------------------------------------------
    def display(self, system: etree._Element) -> str:
        for el in _LAZY_IN(system) if self.lazy_targets else ():
            refroot, steps = self.lazy_target(el)
            inverse = {u: p for p, u in el.nsmap.items() if p}
            el.set(_q("lazy"), "true")
            el.set(_q("ref"), "/" + "/".join(_prefixed(s, inverse) for s in steps))
            if refroot:
                el.set(_q("refroot"), _prefixed(refroot, inverse))
        etree.strip_attributes(system, *STAMPS)
        # declare, once on top, the prefixes of every document the elements came from
        nsmap: dict[str | None, str] = {}
        for source in [system] + self.doc_roots:
            for prefix, uri in source.nsmap.items():
                if uri != INTERNAL and prefix not in nsmap and uri not in nsmap.values():
                    nsmap[prefix] = uri
        out = etree.Element(system.tag, attrib=dict(system.attrib), nsmap=nsmap)
        out.text = system.text
        out.extend(list(system))
        _strip_blanks(out)
        etree.cleanup_namespaces(out, keep_ns_prefixes=[p for p in system.nsmap if p])
        return etree.tostring(out, pretty_print=True).decode()


def _drop(el: etree._Element) -> None:
    """Remove an element (or comment), keeping the text that follows it."""
    parent = el.getparent()
    if parent is None:
        return
    tail = el.tail
    if tail and tail.strip():
        previous = el.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "") + tail
        else:
            parent.text = (parent.text or "") + tail
    parent.remove(el)


def _strip_blanks(top: etree._Element) -> None:
    """Whitespace between elements means nothing in CDL (the text of leaves is kept)."""
    for text in _BLANKS(top):
        owner = text.getparent()
        if text.is_tail:
            owner.tail = None
        else:
            owner.text = None


def _not_alone(el: etree._Element) -> bool:
    """Whether el shares its parent with other elements or text."""
    holder = el.getparent()
    return holder is None or len(holder) != 1 or bool((holder.text or "").strip()) \
        or bool((el.tail or "").strip())


def _depth_below(el: etree._Element, top: etree._Element) -> int:
    depth = 0
    while el is not top:
        el = el.getparent()
        depth += 1
    return depth


def _copy(el: etree._Element) -> etree._Element:
    """A deep copy (lxml's own, without the copy module's memo)."""
    return el.__deepcopy__(None)


def _inherit(child: etree._Element, parent: etree._Element) -> None:
    """Give ``child`` the attributes of ``parent`` it lacks. Internal stamps are not inherited,
    except a pending value: a reference, by an element with no content of its own (an element
    with a value overrides a reference), and an expression, by an element holding it."""
    attrs = child.attrib
    for name, value in parent.attrib.items():
        if name in attrs:
            continue
        if name == _PENDING:
            if value[0] == "r" and not len(child) and not child.text:
                attrs[name] = value
            elif value[0] == "e" and len(child) == 1 and child[0].tag == EXPRESSION:
                attrs[name] = value
        elif not name.startswith("{" + INTERNAL + "}"):
            attrs[name] = value


def _root_of(el: etree._Element) -> etree._Element:
    """The nearest root of an element: cdl:system, or the top-level prototype it is inside."""
    while True:
        if el.tag == SYSTEM:
            return el
        parent = el.getparent()
        if parent is None or parent.tag == CONFIGURATION:
            return el
        el = parent


def _prefixed(clark: str, inverse: dict[str, str]) -> str:
    if not clark.startswith("{"):
        return clark
    uri, local = clark[1:].split("}", 1)
    prefix = inverse.get(uri)
    return "%s:%s" % (prefix, local) if prefix else clark


def _xpath_string(result) -> str:
    """XPath 1.0 string() of a result; whole numbers print without a decimal point."""
    if isinstance(result, bool):
        return "true" if result else "false"
    if isinstance(result, float):
        if result != result:
            return "NaN"
        if result.is_integer() and abs(result) < 1e18:
            return str(int(result))
        return repr(result)
    if isinstance(result, list):
        if not result:
            return ""
        first = result[0]
        return first if isinstance(first, str) else "".join(first.itertext())
    return str(result)


LANGUAGE = _Cdl()
