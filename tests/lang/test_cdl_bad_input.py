"""Hostile or broken CDL fails quickly with a precise error, never a hang or a crash."""

from __future__ import annotations

import pytest

from cddlm.config import Limits
from cddlm.errors import DescriptorError, ResolutionError
from tests.lang.helpers import CDL_HEAD, cdl_doc, quickly, resolve_cdl


def rejected(text: str, kind: str, **kw):
    with quickly():
        with pytest.raises((DescriptorError, ResolutionError)) as info:
            resolve_cdl(text, **kw)
    assert info.value.kind == kind, str(info.value)
    return info.value


def test_extends_that_multiply_stop_at_the_node_budget():
    # each prototype holds ten copies of the previous one: 10^9 nodes from a few hundred bytes
    levels = ["<p0><v>x</v></p0>"] + [
        "<p%d>%s</p%d>" % (i, "".join('<c%d cdl:extends="p%d"/>' % (j, i - 1) for j in range(10)), i)
        for i in range(1, 10)]
    text = cdl_doc("".join(levels), '<top cdl:extends="p9"/>')
    assert len(text) < 5000
    error = rejected(text, "too-large")
    assert "exceed" in error.message


def test_references_that_multiply_stop_at_the_node_budget():
    system = "<r0><v>x</v><v>y</v></r0>" + "".join(
        '<r%d><a cdl:ref="/r%d"/><b cdl:ref="/r%d"/><c cdl:ref="/r%d"/></r%d>' % (i, i - 1, i - 1, i - 1, i)
        for i in range(1, 40))
    rejected(cdl_doc("", system), "too-large")


def test_the_node_budget_is_configurable():
    text = cdl_doc("<p><a/><b/><c/></p>", "".join('<x%d cdl:extends="p"/>' % i for i in range(50)))
    resolve_cdl(text)
    rejected(text, "too-large", limits=Limits(max_resolved_nodes=150))


def test_deep_xml_nesting():
    rejected(cdl_doc("", "<a>" * 300 + "</a>" * 300), "too-deep")


def test_long_extends_chain():
    chain = "".join('<p%d cdl:extends="p%d"/>' % (i, i + 1) for i in range(300)) + "<p300/>"
    error = rejected(cdl_doc(chain, '<x cdl:extends="p0"/>'), "too-deep")
    assert "100" in error.message


def test_long_reference_chain():
    chain = "".join('<r%d cdl:ref="r%d"/>' % (i, i + 1) for i in range(300)) + "<r300>v</r300>"
    rejected(cdl_doc("", chain), "reference-loop")


def test_chains_below_the_limit_resolve():
    chain = "".join('<r%d cdl:ref="r%d"/>' % (i, i + 1) for i in range(50)) + "<r50>v</r50>"
    extends = "".join('<p%d cdl:extends="p%d"/>' % (i, i + 1) for i in range(50)) + "<p50>w</p50>"
    with quickly():
        result = resolve_cdl(cdl_doc(extends, chain + '<x cdl:extends="p0"/>'))
    assert "<r0>v</r0>" in result.display and "<x>w</x>" in result.display


@pytest.mark.parametrize("text,kind", [
    ("<cdl:cdl", "not-well-formed"),
    (CDL_HEAD + "<cdl:system><a></b></cdl:system></cdl:cdl>", "not-well-formed"),
    (CDL_HEAD + "<cdl:system><nope:a/></cdl:system></cdl:cdl>", "not-well-formed"),
    ('<!DOCTYPE x [<!ENTITY a "aaaa">]>' + CDL_HEAD + "<cdl:system>&a;</cdl:system></cdl:cdl>",
     "not-well-formed"),
    ('<cdl xmlns="urn:other"/>', "wrong-namespace"),
    ('<cdl:system xmlns:cdl="http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0"/>',
     "wrong-root"),
    (CDL_HEAD + "<cdl:system/><cdl:configuration/></cdl:cdl>", "element-order"),
    (CDL_HEAD + "<cdl:system/><cdl:system/></cdl:cdl>", "element-order"),
    (CDL_HEAD + "<cdl:bogus/></cdl:cdl>", "unknown-element"),
    (CDL_HEAD.replace("<cdl:cdl ", '<cdl:cdl pathlanguage="x" ') + "</cdl:cdl>",
     "unexpected-attribute"),
    (cdl_doc("", "<a><cdl:import location='x'/></a>"), "unknown-element"),
    (cdl_doc("<cdl:system/>"), "unknown-element"),
    (cdl_doc(imports="<cdl:import/>"), "missing-attribute"),
    (cdl_doc("", '<a cdl:extends="p" cdl:ref="b"/>', ), "bad-reference"),
    (cdl_doc("", '<a cdl:extends="1p"/>'), "bad-qname"),
])
def test_malformed_documents(text, kind):
    rejected(text, kind)


def test_import_loop_and_extends_loop_are_quick():
    a = CDL_HEAD + '<cdl:import location="a.cdl"/></cdl:cdl>'
    rejected(cdl_doc(imports='<cdl:import location="a.cdl"/>'), "import-loop",
             files={"file:///t/a.cdl": a})
    rejected(cdl_doc('<p cdl:extends="q"/><q cdl:extends="p"/>', '<x cdl:extends="p"/>'),
             "extends-loop")


def test_many_siblings_referencing_each_other_stay_fast():
    system = "".join('<n%d><v>%d</v><w cdl:ref="../n%d/v"/></n%d>' % (i, i, (i + 1) % 5000, i)
                     for i in range(5000))
    with quickly():
        result = resolve_cdl(cdl_doc("", system))
    assert "<w>1</w>" in result.display and "<w>0</w>" in result.display
