"""The project's own schema files for the standard namespaces agree with the standards.

``xsd/`` holds cddlm's restatement of the OASIS WSRF 1.2 / WSN 1.3 and W3C WS-Addressing
schemas (the project does not ship the standard files). These tests check that

* every file loads on its own, with xmlschema and with lxml, and its imports resolve
  inside ``xsd/``;
* the files keep the shipping rules: our header, relative sibling imports, an explicit
  ``schemaLocation`` for the XML namespace, no documentation text;
* every instance of ``standard_corpus.CASES`` gets the expected verdict from validators
  built from our files, and the same verdict from validators built from the unmodified
  standard files (read in place from the shared folder, never copied);
* every global component we declare has the same shape (content model, occurrences,
  wildcards, attributes, nillable, defaults, block, identity constraints) as the
  standard's component of that name, and we leave out nothing but what is listed.

The comparisons with the standard are skipped when the standard files are absent; the
checks of our own files still run.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import xmlschema
from lxml import etree

from standard_corpus import CASES, TOPIC_EXPRESSION_SAMPLES, Case

REPO = Path(__file__).resolve().parents[2]
XSD_DIR = REPO / "xsd"

XS = "http://www.w3.org/2001/XMLSchema"
XS_ANY_TYPE = "{%s}anyType" % XS

# namespace -> file name; the same names in xsd/ and in the standards folder.
FILES = {
    "http://www.w3.org/XML/1998/namespace": "xml.xsd",
    "http://www.w3.org/2005/08/addressing": "ws-addr.xsd",
    "http://docs.oasis-open.org/wsrf/bf-2": "bf-2.xsd",
    "http://docs.oasis-open.org/wsrf/r-2": "r-2.xsd",
    "http://docs.oasis-open.org/wsrf/rp-2": "rp-2.xsd",
    "http://docs.oasis-open.org/wsrf/rl-2": "rl-2.xsd",
    "http://docs.oasis-open.org/wsn/t-1": "t-1.xsd",
    "http://docs.oasis-open.org/wsn/b-2": "b-2.xsd",
}

STANDARD_NAMES = {
    "xml.xsd": "the XML namespace attributes",
    "ws-addr.xsd": "W3C WS-Addressing 1.0",
    "bf-2.xsd": "OASIS WS-BaseFaults 1.2",
    "r-2.xsd": "OASIS WS-Resource 1.2",
    "rp-2.xsd": "OASIS WS-ResourceProperties 1.2",
    "rl-2.xsd": "OASIS WS-ResourceLifetime 1.2",
    "t-1.xsd": "OASIS WS-Topics 1.3",
    "b-2.xsd": "OASIS WS-BaseNotification 1.3",
}

# Global components of the standard files that xsd/ deliberately does not restate,
# as (kind, Clark name). Empty: every file restates its whole standard schema.
DELIBERATELY_OMITTED: set[tuple[str, str]] = set()

# Cases where a validation library gives the wrong verdict, for our files and the
# standard files alike: {library: {case name: why}}. For these the library must give the
# opposite of the expected verdict (so a fixed library makes the test fail and the entry
# gets removed), and still the same verdict for both sets of files.
_WILDCARD_ONLY = (
    "Unsubscribe", "UnsubscribeResponse", "PauseSubscription", "PauseSubscriptionResponse",
    "ResumeSubscription", "ResumeSubscriptionResponse", "CreatePullPoint", "DestroyPullPoint",
    "DestroyPullPointResponse",
)
LIBRARY_DEVIATIONS: dict[str, dict[str, str]] = {
    "xmlschema": {
        f"b/{name}-text": "xmlschema 4.3 accepts character data in element-only content "
        "whose model is only an optional wildcard"
        for name in _WILDCARD_ONLY
    },
    "lxml": {},
}


def _find_standards() -> Path | None:
    """The folder of standard files; $CDDLM_STANDARDS, when set, is the only candidate."""
    if "CDDLM_STANDARDS" in os.environ:
        candidates = [Path(os.environ["CDDLM_STANDARDS"])]
    else:
        candidates = [Path("/work/shared/standards"), REPO.parent / "shared" / "standards"]
    for candidate in candidates:
        if all((candidate / name).is_file() for name in FILES.values()):
            return candidate
    return None


STANDARDS = _find_standards()
needs_standards = pytest.mark.skipif(
    STANDARDS is None,
    reason="standard schema files not found in /work/shared/standards or "
    "<repo>/../shared/standards (or $CDDLM_STANDARDS); only our own files are checked",
)


# ----------------------------------------------------------------------------- builders


class _Guard(etree.Resolver):
    """Records every URL libxml2 loads while building a schema; loads nothing itself."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def resolve(self, url, pubid, context):  # noqa: ARG002 - lxml's signature
        self.urls.append(url)
        return None


def _parser(guard: _Guard) -> etree.XMLParser:
    parser = etree.XMLParser(no_network=True, resolve_entities=False)
    parser.resolvers.add(guard)
    return parser


def _inside(url: str, directory: Path) -> bool:
    parts = urlsplit(url)
    path = Path(unquote(parts.path)) if parts.scheme in ("", "file") else None
    return path is not None and path.resolve().parent == directory.resolve()


def build_xmlschema(directory: Path) -> xmlschema.XMLSchema10:
    """One validator for all eight namespaces, confined to ``directory``."""
    sources = [str(directory / name) for name in FILES.values()]
    return xmlschema.XMLSchema10(sources, allow="sandbox", base_url=str(directory))


def build_lxml(directory: Path) -> etree.XMLSchema:
    """One validator for all eight namespaces: a wrapper importing each by absolute path."""
    imports = "".join(
        f'<xs:import namespace="{ns}" schemaLocation="{(directory / name).as_uri()}"/>'
        for ns, name in FILES.items()
    )
    guard = _Guard()
    wrapper = etree.fromstring(
        f'<xs:schema xmlns:xs="{XS}">{imports}</xs:schema>',
        _parser(guard),
        base_url=(directory / "wrapper.xsd").as_uri(),
    )
    schema = etree.XMLSchema(wrapper)
    outside = [url for url in guard.urls if not _inside(url, directory)]
    assert not outside, f"schema build left {directory}: {outside}"
    return schema


class Validators:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.xmlschema = build_xmlschema(directory)
        self.lxml = build_lxml(directory)

    def verdicts(self, case: Case) -> dict[str, tuple[bool, str]]:
        """{library: (valid, first error)} for one instance."""
        root = etree.fromstring(case.document)
        errors = list(self.xmlschema.iter_errors(root))
        by_xmlschema = (not errors, errors[0].reason if errors else "")
        valid = self.lxml.validate(root)
        by_lxml = (valid, "" if valid else str(self.lxml.error_log.last_error.message))
        return {"xmlschema": by_xmlschema, "lxml": by_lxml}


@pytest.fixture(scope="module")
def ours() -> Validators:
    return Validators(XSD_DIR)


@pytest.fixture(scope="module")
def standard() -> Validators:
    assert STANDARDS is not None
    return Validators(STANDARDS)


def expected(case: Case, library: str) -> bool:
    """The verdict ``library`` should give: the standards' one, unless a known deviation."""
    return case.valid != (case.name in LIBRARY_DEVIATIONS[library])


def _explain(case: Case, side: str, verdicts: dict[str, tuple[bool, str]]) -> str:
    lines = [f"{case.name}: the standards make it {'valid' if case.valid else 'invalid'}; {side} gives"]
    for library, (valid, error) in verdicts.items():
        note = LIBRARY_DEVIATIONS[library].get(case.name, "")
        lines.append(f"  {library}: {'valid' if valid else 'invalid'} {error}  {note}".rstrip())
    return "\n".join(lines)


def _as_expected(case: Case, verdicts: dict[str, tuple[bool, str]]) -> bool:
    return all(valid == expected(case, library) for library, (valid, _) in verdicts.items())


# ------------------------------------------------------------------- our files alone

OUR_FILES = sorted(FILES.values())


@pytest.mark.parametrize("name", OUR_FILES)
def test_file_loads_with_xmlschema(name: str) -> None:
    # The sandbox forbids reading anything outside xsd/.
    schema = xmlschema.XMLSchema10(str(XSD_DIR / name), allow="sandbox")
    namespace = next(ns for ns, file in FILES.items() if file == name)
    assert schema.target_namespace == namespace


@pytest.mark.parametrize("name", OUR_FILES)
def test_file_loads_with_lxml(name: str) -> None:
    guard = _Guard()
    document = etree.parse(str(XSD_DIR / name), _parser(guard))
    etree.XMLSchema(document)
    outside = [url for url in guard.urls if not _inside(url, XSD_DIR)]
    assert not outside, f"{name} pulled in files outside xsd/: {outside}"


@pytest.mark.parametrize("name", OUR_FILES)
def test_file_follows_shipping_rules(name: str) -> None:
    text = (XSD_DIR / name).read_text(encoding="utf-8")
    header = re.search(r"<!--(.*?)-->", text, re.S)
    assert header and header.group(1).strip().startswith(
        f"cddlm's restatement of the names and types of {STANDARD_NAMES[name]}"
    ), f"{name} lacks the project header"
    assert "see the W3C specification" in header.group(1) or "see the OASIS specification" in header.group(1)
    # Nothing of the standard files' prose: no documentation, no copyright notices.
    root = etree.parse(str(XSD_DIR / name)).getroot()
    assert not root.findall(f".//{{{XS}}}annotation"), f"{name} carries annotations"
    for phrase in ("Copyright", "OASIS takes no position", "All Rights Reserved", "$Id"):
        assert phrase not in text, f"{name} contains {phrase!r}"
    # Imports: every one names a sibling file of xsd/ for its namespace.
    for imp in root.findall(f"{{{XS}}}import"):
        location = imp.get("schemaLocation")
        assert location, f"{name}: import of {imp.get('namespace')} without schemaLocation"
        assert "/" not in location and ":" not in location, f"{name}: {location} is not a sibling"
        assert location == FILES[imp.get("namespace")], f"{name}: {location} for {imp.get('namespace')}"
        assert (XSD_DIR / location).is_file()
    # The XML namespace is only ever imported, never declared inline (wsdl-interop.md).
    assert name == "xml.xsd" or root.get("targetNamespace") != "http://www.w3.org/XML/1998/namespace"


def test_xsd_dir_has_a_file_per_standard_namespace() -> None:
    present = {p.name for p in XSD_DIR.glob("*.xsd")}
    assert set(OUR_FILES) <= present


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_our_verdict(ours: Validators, case: Case) -> None:
    verdicts = ours.verdicts(case)
    assert _as_expected(case, verdicts), _explain(case, "xsd/", verdicts)


# ------------------------------------------------------------- agreement with the standard


@needs_standards
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_standard_verdict_agrees(ours: Validators, standard: Validators, case: Case) -> None:
    theirs = standard.verdicts(case)
    assert _as_expected(case, theirs), _explain(case, "the standard files", theirs)
    mine = ours.verdicts(case)
    assert {lib: v for lib, (v, _) in mine.items()} == {lib: v for lib, (v, _) in theirs.items()}, (
        _explain(case, "xsd/", mine) + "\n" + _explain(case, "the standard files", theirs)
    )


@needs_standards
def test_corpus_touches_every_global_element(standard: Validators) -> None:
    """Every global element of the standards is the root of at least one valid case."""
    roots = set()
    for case in CASES:
        if case.valid:
            roots.add(etree.fromstring(case.document).tag)
    elements = {
        name
        for name in standard.xmlschema.maps.elements
        if _namespace(name) in FILES
    }
    assert sorted(elements - roots) == []


# Structural comparison, on xmlschema's view of both sets of files.

KINDS = ("elements", "types", "attributes", "attribute_groups", "groups")


def _namespace(clark: str) -> str:
    return clark[1:].split("}")[0] if clark.startswith("{") else ""


def _globals(schema: xmlschema.XMLSchema10) -> dict[tuple[str, str], object]:
    found = {}
    for kind in KINDS:
        for name, component in getattr(schema.maps, kind).items():
            if _namespace(name) in FILES:
                found[(kind, name)] = component
    return found


def _type_sig(t) -> tuple:
    if t.name is not None:  # a named (global or built-in) type: compared on its own
        return ("type", t.name)
    return _describe_type(t)


def _describe_type(t) -> tuple:
    if t.is_complex():
        if t.has_simple_content():
            content = ("simple-content", _type_sig(t.content))
        else:
            content = _group_sig(t.content)
        derivation = t.derivation
        base = t.base_type.name if t.base_type is not None else None
        if derivation == "extension" and base == XS_ANY_TYPE:
            # extending xs:anyType adds to what every type holds anyway (mixed content, any
            # elements and attributes, lax): compared as the content model it amounts to, so
            # that a restatement spelling it out (what zeep can print) has the same shape
            derivation = base = None
        return (
            "complex",
            t.abstract,
            t.mixed,
            t.block,
            t.final,
            derivation,
            base,
            content,
            _attributes_sig(t.attributes),
        )
    facets = []
    for tag, facet in sorted((t.facets or {}).items(), key=lambda item: str(item[0])):
        local = str(tag).split("}")[-1]
        if local == "enumeration":
            facets.append((local, tuple(sorted(str(v) for v in facet.enumeration))))
        elif local == "pattern":
            # Patterns are written in our own words; test_patterns_agree compares them
            # on sample strings instead.
            facets.append((local, len(facet.patterns)))
        elif facet is not None:
            facets.append((local, str(getattr(facet, "value", facet))))
    return (
        "simple",
        type(t).__name__,
        _type_sig(t.base_type) if getattr(t, "base_type", None) is not None else None,
        tuple(facets),
        tuple(_type_sig(m) for m in getattr(t, "member_types", ()) or ()),
        _type_sig(t.item_type) if getattr(t, "item_type", None) is not None else None,
        t.white_space if hasattr(t, "white_space") else None,
    )


def _occurs(p) -> tuple:
    return (p.min_occurs, p.max_occurs)


def _particle_sig(p) -> tuple:
    kind = type(p).__name__
    if kind == "XsdGroup":
        return _group_sig(p)
    if kind == "XsdAnyElement":
        return (
            "any",
            tuple(sorted(p.namespace)),
            tuple(sorted(p.not_namespace or ())),
            tuple(sorted(p.not_qname or ())),
            p.process_contents,
            *_occurs(p),
        )
    return _element_sig(p, local=True)


def _group_sig(g) -> tuple:
    particles = list(g)
    if (g.model == "sequence" and _occurs(g) == (1, 1) and len(particles) == 1
            and type(particles[0]).__name__ == "XsdGroup" and particles[0].model == "sequence"
            and _occurs(particles[0]) == (1, 1)):
        return _group_sig(particles[0])   # a sequence holding one sequence is that sequence
    return ("group", g.model, *_occurs(g), tuple(_particle_sig(p) for p in particles))


def _element_sig(e, local: bool) -> tuple:
    occurs = _occurs(e) if local else ()
    if e.ref is not None:
        return ("element-ref", e.name, *occurs)
    identities = tuple(
        sorted(
            (type(i).__name__, i.name, i.selector.path, tuple(f.path for f in i.fields))
            for i in e.identities
        )
    )
    return (
        "element",
        e.name,
        *occurs,
        e.qualified,
        e.nillable,
        e.default,
        e.fixed,
        e.abstract,
        e.block,
        e.final,
        e.substitution_group,
        _type_sig(e.type),
        identities,
    )


def _attribute_sig(name, a) -> tuple:
    if name is None:  # the attribute wildcard
        return (
            "anyAttribute",
            tuple(sorted(a.namespace)),
            tuple(sorted(a.not_namespace or ())),
            a.process_contents,
        )
    return (
        "attribute-ref" if a.ref is not None else "attribute",
        name,
        a.use,
        a.default,
        a.fixed,
        a.qualified,
        _type_sig(a.type),
    )


def _attributes_sig(group) -> tuple:
    return tuple(sorted((_attribute_sig(name, a) for name, a in group.items()), key=repr))


def _sig(kind: str, component) -> tuple:
    if kind == "elements":
        return _element_sig(component, local=False)
    if kind == "types":
        return _describe_type(component)
    if kind == "attributes":
        return _attribute_sig(component.name, component)
    if kind == "attribute_groups":
        return _attributes_sig(component)
    return _group_sig(component)


@pytest.fixture(scope="module")
def global_components(ours: Validators, standard: Validators):
    return _globals(ours.xmlschema), _globals(standard.xmlschema)


@needs_standards
def test_we_declare_only_standard_names(global_components) -> None:
    mine, theirs = global_components
    invented = sorted(set(mine) - set(theirs))
    assert invented == [], f"xsd/ declares components the standards do not have: {invented}"


@needs_standards
def test_we_leave_out_only_what_is_listed(global_components) -> None:
    mine, theirs = global_components
    assert set(theirs) - set(mine) == DELIBERATELY_OMITTED


@needs_standards
@pytest.mark.parametrize("namespace", list(FILES), ids=list(FILES.values()))
def test_components_have_the_standard_shape(global_components, namespace: str) -> None:
    mine, theirs = global_components
    differences = []
    for key, component in sorted(mine.items()):
        if _namespace(key[1]) != namespace or key not in theirs:
            continue
        ours_sig, standard_sig = _sig(key[0], component), _sig(key[0], theirs[key])
        if ours_sig != standard_sig:
            differences.append(f"{key}:\n  ours     {ours_sig}\n  standard {standard_sig}")
    assert not differences, "\n".join(differences)


@needs_standards
@pytest.mark.parametrize(
    "type_name", ["FullTopicExpression", "ConcreteTopicExpression", "SimpleTopicExpression"]
)
def test_topic_expression_patterns_agree(ours: Validators, standard: Validators, type_name: str) -> None:
    qname = "{http://docs.oasis-open.org/wsn/t-1}" + type_name
    mine = ours.xmlschema.maps.types[qname]
    theirs = standard.xmlschema.maps.types[qname]
    namespaces = {"api": "urn:a"}

    def verdict(t, text: str) -> bool:
        try:
            t.decode(text, namespaces=namespaces)
        except (xmlschema.XMLSchemaValidationError, ValueError):
            return False
        return True

    disagreements = [
        (text, verdict(mine, text), verdict(theirs, text))
        for text in TOPIC_EXPRESSION_SAMPLES
        if verdict(mine, text) != verdict(theirs, text)
    ]
    assert not disagreements, disagreements
