"""From a resolved cdl:system to the component tree, and the component library in CDL."""

from __future__ import annotations

import pytest
from lxml import etree

from cddlm import ns
from cddlm.application.loader import Loader
from cddlm.errors import DescriptorError
from cddlm.lang import library, policies
from tests.lang.helpers import LIBRARY_IMPORT, cdl_doc, resolve_cdl


def deploy(system: str, configuration: str = "", **kw):
    return resolve_cdl(cdl_doc(configuration, system, imports=LIBRARY_IMPORT), check=True, **kw)


def test_every_library_type_has_a_prototype_marking_its_type():
    root = etree.fromstring(Loader()(ns.LIBRARY_PREFIX + "components.cdl"))
    prototypes = root.find("{%s}configuration" % ns.CDL)
    marked = {etree.QName(p).localname: p.get("{%s}type" % ns.CMP) for p in prototypes
              if isinstance(p.tag, str)}
    assert marked == {name: name for name in library.TYPES}


def test_elements_extending_library_prototypes_become_components():
    result = deploy("""
        <db cdl:extends="cmp:process"><argv><item>sleep</item><item>600</item></argv></db>
        <site cdl:extends="cmp:compound">
          <web cdl:extends="cmp:process"><argv><item>python3</item></argv>
            <grace>2.5</grace><restart>on-failure</restart></web>
          <conf cdl:extends="cmp:file"><path>site.conf</path>
            <content xml:space="preserve">  a = 1
</content></conf>
        </site>
        <shared>not a component</shared>""")
    dep = result.deployment
    assert [p for p, _ in dep.walk()] == ["db", "site", "site/web", "site/conf"]
    assert [c.type for _, c in dep.walk()] == ["process", "compound", "process", "file"]
    web = dep.find("site/web")
    assert web.attributes["argv"] == ["python3"]
    assert web.attributes["grace"] == 2.5 and web.attributes["restart"] == "on-failure"
    assert dep.find("site/conf").attributes["content"] == "  a = 1\n"


def test_components_inherit_from_user_prototypes():
    result = deploy('<a cdl:extends="sleeper"/><b cdl:extends="sleeper"><argv><item>true</item></argv></b>',
                    '<sleeper cdl:extends="cmp:process"><argv><item>sleep</item><item>9</item></argv>'
                    '</sleeper>')
    dep = result.deployment
    assert dep.find("a").attributes["argv"] == ["sleep", "9"]
    assert dep.find("b").attributes["argv"] == ["true"]


def test_values_lists_maps_named_items_and_trimmed_text():
    result = deploy("""
        <p cdl:extends="cmp:process">
          <argv><item>  x  </item></argv>
          <env><HOME>/h</HOME></env>
          <readiness><tcp>8080</tcp><timeout>3</timeout></readiness>
        </p>""")
    attrs = result.deployment.find("p").attributes
    assert attrs["argv"] == ["x"]
    assert attrs["env"] == {"HOME": "/h"}
    assert attrs["readiness"] == {"tcp": "8080", "timeout": "3"}
    named = deploy('<p cdl:extends="cmp:process"><argv><item>x</item></argv>'
                   '<env><item name="A B">1</item><item name="C">2</item></env></p>')
    assert named.deployment.find("p").attributes["env"] == {"A B": "1", "C": "2"}


@pytest.mark.parametrize("system,kind", [
    ('<p cdl:extends="cmp:process"><argv><item>x</item></argv><argv><item>y</item></argv></p>',
     "duplicate-name"),
    ('<p cdl:extends="cmp:process"><argv>x<item>y</item></argv></p>', "mixed-value"),
    ('<p cdl:extends="cmp:process"><argv><item name="a">x</item><item>y</item></argv></p>',
     "mixed-value"),
    ('<wrapper><p cdl:extends="cmp:process"><argv><item>x</item></argv></p></wrapper>',
     "invalid-structure"),
    ('<p cdl:extends="cmp:process"><argv><item>x</item></argv>'
     '<env><q cdl:extends="cmp:process"/></env></p>', "invalid-structure"),
])
def test_bad_component_structure(system, kind):
    with pytest.raises(DescriptorError) as info:
        deploy(system)
    assert info.value.kind == kind


def test_library_check_applies_to_cdl_components():
    with pytest.raises(DescriptorError) as info:
        deploy('<p cdl:extends="cmp:process"><argv><item>x</item></argv><port>80</port></p>')
    assert info.value.kind == "unknown-attribute" and info.value.path == "p"


def test_groups_and_policies_in_the_system():
    result = deploy("""
        <a cdl:extends="cmp:process"><argv><item>a</item></argv></a>
        <b cdl:extends="cmp:process"><argv><item>b</item></argv></b>
        <c cdl:extends="cmp:process"><argv><item>c</item></argv></c>
        <cmp:group name="front"><item>a</item><item>b</item></cmp:group>
        <cmp:policy type="anti-collocation" level="host" group="front" hard="false" weight="2"/>
        <cmp:policy type="hop-limit" hops="0" between="a c"/>""")
    dep = result.deployment
    assert [(g.name, g.members) for g in dep.groups] == [("front", ["a", "b"])]
    soft, hop = dep.policies
    assert (soft.type, soft.hard, soft.weight, soft.params) == \
        ("anti-collocation", False, 2.0, {"level": "host", "group": "front"})
    assert hop.params == {"hops": 0, "between": ["a", "c"]}
    assert {(a.type, a.members) for a in policies.expand(dep)} == \
        {("anti-collocation", ("a", "b")), ("hop-limit", ("a", "c"))}


@pytest.mark.parametrize("policy", [
    '<cmp:policy type="teleport" group="g"/>',
    '<cmp:policy type="anti-collocation" group="g"/>',
    '<cmp:policy type="hop-limit" hops="x" between="a b"/>',
    '<cmp:policy type="license" catalog="c" product="p" between="a b"/>',
    '<cmp:policy type="endpoint-access" between="a g"/>',   # no network access rules
    '<cmp:policy type="volume-exclusive" group="g"/>',       # HOT volumes only
])
def test_bad_policies(policy):
    with pytest.raises(DescriptorError):
        deploy('<a cdl:extends="cmp:process"><argv><item>a</item></argv></a>'
               '<cmp:group name="g"><item>a</item></cmp:group>' + policy)


def test_a_document_without_components_resolves_but_does_not_deploy():
    result = resolve_cdl(cdl_doc("", "<app><user>x</user></app>"))
    assert result.deployment.components == []
    with pytest.raises(DescriptorError) as info:
        library.check(result.deployment)
    assert info.value.kind == "empty"
