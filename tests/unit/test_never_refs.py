"""References that can never resolve are refused at once: at initialize (and by ``cddlm lang
resolve``) where the tree already tells (a key a value the descriptor gives lacks, a component
that is not there), and, on a front portal, when a host portal's ``ResolutionFault`` says so
(its ``api:kind``). Pure: the descriptor languages, ``descriptors.resolve`` and the portal's
own fault writer, no portal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from lxml import etree

from cddlm import ns
from cddlm.agents import resolution_error
from cddlm.application import descriptors
from cddlm.application.enactment.values import HostValues
from cddlm.client import PortalFault
from cddlm.errors import ResolutionError
from cddlm.lang.model import Component, Deployment, Lazy, RefTarget
from cddlm.portal import faults
from tests import schemas
from tests.lang.helpers import CDL_HEAD, LIBRARY_IMPORT, quickly

SECRET = "Vx7neverShown"


def native(*components: str) -> str:
    return '<application xmlns="urn:cddlm:lang:components:1">%s</application>' % "".join(components)


def process(name: str, env: str = "", extra: str = "") -> str:
    env = '<attribute name="env">%s</attribute>' % env if env else ""
    return ('<component name="%s" type="process"><attribute name="argv"><item>sleep</item>'
            '<item>9</item></attribute>%s%s</component>' % (name, env, extra))


# w's env is given: A (a literal), S (a secret literal), P (known only on its host)
W = process("w", '<item name="A">1</item><item name="S" secret="true">%s</item>'
                 '<item name="P"><property name="where" lazy="true" default="h"/></item>' % SECRET)


def reading(target: str) -> str:
    return process("r", '<item name="X"><ref path="%s" lazy="true"/></item>' % target)


def resolved(text: str, language: str = ns.NATIVE):
    return descriptors.resolve(text.encode() if language != ns.HOT else text, language)


@pytest.mark.parametrize("target, says", [
    ("w/env/B", "w/env/B does not exist: w/env has no key B (keys: A, P, S)"),
    ("w/env/A/deeper", "w/env/A is a single value, not a map or a list: it has no key deeper"),
    ("w/env/S/deeper", "w/env/S is secret: what it holds is not said"),    # (not its kind)
    ("w/argv/2", "w/argv is a list of 2 items: it has no item 2"),
    ("nope/pid", "nope/pid names no component"),
])
def test_a_lazy_reference_that_can_never_resolve_is_refused_at_initialize(target, says):
    with pytest.raises(ResolutionError) as e:
        resolved(native(W, reading(target)))
    assert e.value.kind == "dangling-reference"
    assert e.value.path == "r/env/X"                # where the reference stands
    assert says in e.value.message, e.value.message
    assert SECRET not in str(e.value)                # key names only, never a value


@pytest.mark.parametrize("target", [
    "w/env/A", "w/env/S", "w/argv/1",
    "w/env/P/deeper",       # through a value known only on w's host: judged there
    "w/pid", "w/ports/3",   # runtime values: not known before w runs
    "w/env",
])
def test_a_lazy_reference_the_tree_cannot_judge_yet_is_accepted(target):
    d = resolved(native(W, reading(target))).deployment
    assert d.find("r").attributes["env"] == {"X": Lazy("ref", target)}


def test_a_reference_into_a_value_itself_a_lazy_reference_is_judged_on_the_host():
    text = native(W, process("v", extra='<attribute name="description"><ref path="w/env/A" lazy="true"/>'
                                        '</attribute>'), reading("v/description/nope"))
    assert resolved(text).deployment.find("r") is not None


HOT = """heat_template_version: 2015-04-30
resources:
  w:
    type: CDDLM::Process
    properties: {argv: [sleep, '9'], env: {A: '1'}}
  r:
    type: CDDLM::Process
    properties:
      argv: [sleep, '9']
      env: {X: {get_attr: [w, env, %s]}}
"""


CDL = CDL_HEAD + LIBRARY_IMPORT + """<cdl:configuration/><cdl:system>
  <w cdl:extends="cmp:process"><argv><item>sleep</item></argv><env><A>1</A></env></w>
  <r cdl:extends="cmp:process"><argv><item>sleep</item></argv>
    <env><X cdl:ref="/w/env/%s" cdl:lazy="true"/></env></r>
</cdl:system></cdl:cdl>"""


@pytest.mark.parametrize("language, text", [(ns.HOT, HOT), (ns.CDL, CDL)])
def test_a_hot_get_attr_or_a_cdl_lazy_reference_to_a_missing_key_is_refused(language, text):
    assert resolved(text % "A", language).deployment.find("r").attributes["env"] == \
        {"X": Lazy("ref", "w/env/A")}
    with pytest.raises(ResolutionError) as e:
        resolved(text % "B", language)
    assert e.value.path == "r/env/X" and "w/env has no key B (keys: A)" in e.value.message


def test_many_references_into_a_wide_tree_are_checked_by_path_not_by_scanning():
    n = 10000       # (a scan of the siblings per reference: about 3 s of CPU here; by path 0.03)
    comps = [Component("c%d" % i, "process", {"env": {"K": Lazy("ref", "c%d/env/N" % (i - 1)),
                                                      "N": str(i)}}) for i in range(1, n)]
    d = Deployment([Component("c0", "process", {"env": {"N": "0"}})] + comps)
    with quickly(1.0):
        d.check_references()
    comps[-1].attributes["env"]["K"] = Lazy("ref", "c0/env/M")
    with pytest.raises(ResolutionError) as e:
        d.check_references()
    assert e.value.path == "c%d/env/K" % (n - 1) and "(keys: N)" in e.value.message


# -- as a component's host reads runtime values ---------------------------------------------------
def test_a_runtime_list_may_still_gain_an_item_but_a_runtime_map_never_gains_a_key():
    at = RefTarget("w/remote/nope", "w", "remote", ("nope",))
    with pytest.raises(ResolutionError) as e:
        at.select({"host": "h1"}, runtime=True)
    assert e.value.kind == "dangling-reference" and "(keys: host)" in e.value.message
    with pytest.raises(ResolutionError) as e:
        RefTarget("w/ports/1", "w", "ports", ("1",)).select([8080], runtime=True)
    assert e.value.kind == "unresolved-reference"
    with pytest.raises(ResolutionError) as e:   # an empty list, as another portal answers it
        RefTarget("w/ports/0", "w", "ports", ("0",)).select("", runtime=True)
    assert e.value.kind == "unresolved-reference"
    with pytest.raises(ResolutionError) as e:
        RefTarget("w/pid/0", "w", "pid", ("0",)).select(4242, runtime=True)
    assert e.value.kind == "dangling-reference"


def test_a_host_says_a_key_a_runtime_map_lacks_never_comes():
    tree = Deployment([Component("w", "process", {"argv": ["sleep", "9"]})])
    row = SimpleNamespace(host="", runtime={"remote": {"host": "h1"}}, pid=None, pid_start=None)
    app = SimpleNamespace(id="urn:uuid:0", name="a", properties={})
    hv = HostValues(app, tree, {"w": row}, "localhost", "w", lambda path: "/nowhere")
    assert hv.reference("w/remote/host") == "h1"
    with pytest.raises(ResolutionError) as e:
        hv.reference("w/remote/nope")
    assert e.value.kind == "dangling-reference"


# -- a host portal's ResolutionFault, as the front reads it ----------------------------------------
def fault_of(error: ResolutionError) -> PortalFault:
    """What a front's client makes of the fault a portal of ours answers with ``error``."""
    detail = faults.detail(error)
    assert not list(schemas.ours().iter_errors(detail))      # api:kind is in the schema
    detail = etree.fromstring(etree.tostring(detail))
    return PortalFault("ResolutionFault", str(error), detail, "soapenv:Client")


@pytest.mark.parametrize("kind, read", [
    ("dangling-reference", "dangling-reference"),
    ("reference-loop", "reference-loop"),
    ("unresolved-reference", "unresolved-reference"),     # none yet: waited for
    ("not-initialized", "unresolved-reference"),
])
def test_a_host_portals_fault_says_whether_a_value_never_comes(kind, read):
    e = resolution_error(fault_of(ResolutionError("w/env/NOPE does not exist: w/env has no key NOPE "
                                                  "(keys: A)", kind=kind, path="w/env/NOPE")),
                         "w/env/NOPE")
    assert (e.kind, e.path) == (read, "w/env/NOPE")
    assert e.message == "w/env/NOPE does not exist: w/env has no key NOPE (keys: A)"   # once


def test_a_portal_that_writes_no_kind_is_waited_for_as_before():
    bare = etree.Element("{%s}ResolutionFault" % ns.API)
    etree.SubElement(bare, "{%s}Description" % ns.WSRF_BF).text = "no such value"
    for detail in (bare, None):
        e = resolution_error(PortalFault("ResolutionFault", "no such value", detail), "w/x")
        assert (e.kind, e.message) == ("unresolved-reference", "no such value")


@pytest.mark.parametrize("target", ["w/port", "site/web/env/X/Y", "w/child", "w/child/env/P", "w/env/A",
                                    "nope/port", "w", "site/web"])
def test_a_target_reads_the_same_by_path_index_as_by_walking_the_tree(target):
    t = Deployment([Component("w", "process", {}, [Component("child", "process")]),
                    Component("site", "compound", {}, [Component("web", "process")])])
    index = dict(t.walk())
    try:
        walked = t.split_target(target)
    except ResolutionError as e:
        with pytest.raises(ResolutionError) as by_index:
            t.split_target(target, index)
        assert (by_index.value.kind, by_index.value.message) == (e.kind, e.message)
    else:
        assert t.split_target(target, index) == walked
