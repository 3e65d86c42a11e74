"""CDL 1.0: extends, references, imports, expressions, deploy-time properties, lazy values."""

from __future__ import annotations

import pytest
from lxml import etree

from cddlm.errors import DescriptorError, ResolutionError
from cddlm.lang.model import Lazy
from tests.lang.helpers import CDL_HEAD, LIBRARY_IMPORT, cdl_doc, resolve_cdl, system_of


def child(el, path):
    for step in path.split("/"):
        matches = [c for c in el if etree.QName(c).localname == step]
        assert matches, "no %s under %s" % (step, etree.QName(el).localname)
        el = matches[0]
    return el


def names(el):
    return [etree.QName(c).localname for c in el]


def fails(kind, text, error=(DescriptorError, ResolutionError), **kw):
    with pytest.raises(error) as info:
        resolve_cdl(text, **kw)
    assert info.value.kind == kind, str(info.value)
    return info.value


# -- extends ------------------------------------------------------------------------------------
def test_extends_inherits_missing_attributes_and_keeps_its_own():
    result = resolve_cdl(cdl_doc('<p a="1" b="2"/>', '<x cdl:extends="p" b="3"/>'))
    x = child(system_of(result), "x")
    assert (x.get("a"), x.get("b")) == ("1", "3")
    assert not any("extends" in name for name in x.attrib)


def test_extends_overrides_elements_in_the_prototype_order_then_appends():
    result = resolve_cdl(cdl_doc(
        "<p><one>1</one><two>2</two><three>3</three></p>",
        '<x cdl:extends="p"><three>C</three><extra>e</extra><one>A</one></x>'))
    x = child(system_of(result), "x")
    assert names(x) == ["one", "two", "three", "extra"]
    assert [c.text for c in x] == ["A", "2", "C", "e"]


def test_overriding_element_replaces_wholesale_and_gains_attributes():
    result = resolve_cdl(cdl_doc('<p><env mode="x"><a>1</a><b>2</b></env></p>',
                                 '<x cdl:extends="p"><env><c>3</c></env></x>'))
    env = child(system_of(result), "x/env")
    assert names(env) == ["c"]          # no deep merge of grandchildren
    assert env.get("mode") == "x"


def test_repeated_names_override_in_order():
    result = resolve_cdl(cdl_doc("<p><i>1</i><i>2</i><i>3</i></p>",
                                 '<x cdl:extends="p"><i>A</i><i>B</i></x>'))
    assert [c.text for c in child(system_of(result), "x")] == ["A", "B", "3"]


def test_extends_chains_through_the_configuration():
    result = resolve_cdl(cdl_doc(
        '<p1 level="1"><a>1</a></p1><p2 cdl:extends="p1"><b>2</b></p2>'
        '<p3 cdl:extends="p2" level="3"><a>A</a></p3>',
        '<x cdl:extends="p3"><c>3</c></x>'))
    x = child(system_of(result), "x")
    assert names(x) == ["a", "b", "c"]
    assert child(x, "a").text == "A" and x.get("level") == "3"


def test_extends_inside_a_prototype_and_inside_the_system():
    result = resolve_cdl(cdl_doc('<leaf><v>1</v></leaf><tree><left cdl:extends="leaf"/></tree>',
                                 '<t cdl:extends="tree"><right cdl:extends="leaf"><w>2</w></right></t>'))
    t = child(system_of(result), "t")
    assert child(t, "left/v").text == "1"
    assert names(child(t, "right")) == ["v", "w"]


def test_the_text_of_a_value_prototype_is_inherited():
    result = resolve_cdl(cdl_doc("<greeting>hello</greeting>", '<g cdl:extends="greeting"/>'))
    assert child(system_of(result), "g").text == "hello"


def test_unprefixed_extends_has_no_default_namespace():
    text = (CDL_HEAD + '<cdl:configuration xmlns="urn:d"><p/></cdl:configuration>'
            '<cdl:system><x cdl:extends="p"/></cdl:system></cdl:cdl>')
    error = fails("unknown-prototype", text)
    assert "p" in error.message


@pytest.mark.parametrize("configuration", [
    '<p cdl:extends="p"/>',
    '<p cdl:extends="q"/><q cdl:extends="r"/><r cdl:extends="p"/>',
    '<p><inner cdl:extends="q"/></p><q cdl:extends="p"/>',
])
def test_extends_loops_are_detected(configuration):
    error = fails("extends-loop", cdl_doc(configuration, '<x cdl:extends="p"/>'))
    assert "recursive extension" in error.message


def test_extending_an_unknown_prototype_or_a_system_sibling_fails_with_its_line():
    error = fails("unknown-prototype", cdl_doc("", "<a/>\n<b cdl:extends='a'/>"))
    assert error.line == 2


def test_undeclared_prefix_in_extends():
    fails("unknown-prefix", cdl_doc("", '<x cdl:extends="nope:p"/>'))


def test_duplicate_prototypes_are_rejected():
    fails("duplicate-prototype", cdl_doc("<p/><p/>"))


# -- references ---------------------------------------------------------------------------------
def test_sibling_parent_grandparent_and_absolute_references():
    result = resolve_cdl(cdl_doc("", """
        <top><v>top</v>
          <mid><v>mid</v>
            <sib cdl:ref="v"/><dot cdl:ref="./v"/><up cdl:ref="../v"/><abs cdl:ref="/top/v"/>
          </mid>
        </top>"""))
    mid = child(system_of(result), "top/mid")
    assert [child(mid, n).text for n in ("sib", "dot", "up", "abs")] == ["mid", "mid", "top", "top"]


def test_reference_copies_the_target_subtree_drops_its_attributes_keeps_the_referrers():
    result = resolve_cdl(cdl_doc("", '<a t="1"><b>2</b></a><c mine="yes" cdl:ref="a"/>'))
    c = child(system_of(result), "c")
    assert names(c) == ["b"] and child(c, "b").text == "2"
    assert c.get("mine") == "yes" and c.get("t") is None


def test_chains_resolve_in_any_order():
    result = resolve_cdl(cdl_doc("", '<a cdl:ref="b"/><b cdl:ref="c"/><c>end</c>'))
    assert [e.text for e in system_of(result)] == ["end", "end", "end"]


def test_references_inside_a_copied_target_keep_their_own_position():
    result = resolve_cdl(cdl_doc("", """
        <a><w cdl:ref="../v"/></a><v>outer</v>
        <b><v>inner</v><c cdl:ref="../a"/></b>"""))
    assert child(system_of(result), "b/c/w").text == "outer"


def test_absolute_reference_in_a_prototype_means_the_extending_element():
    result = resolve_cdl(cdl_doc('<p><name>p</name><deep><n cdl:ref="/name"/></deep></p>',
                                 '<x cdl:extends="p"><name>x</name></x><y cdl:extends="p"/>'))
    system = system_of(result)
    assert child(system, "x/deep/n").text == "x"
    assert child(system, "y/deep/n").text == "p"


def test_references_in_prototypes_resolve_after_extends():
    result = resolve_cdl(cdl_doc('<p><home>/p</home><work cdl:ref="home"/></p>',
                                 '<x cdl:extends="p"><home>/x</home></x>'))
    assert child(system_of(result), "x/work").text == "/x"


def test_refroot_starts_at_a_prototype():
    result = resolve_cdl(cdl_doc("<defaults><port>80</port></defaults>",
                                 '<a cdl:refroot="defaults" cdl:ref="port"/>'
                                 '<b cdl:refroot="defaults"/>'))
    system = system_of(result)
    assert child(system, "a").text == "80"
    assert names(child(system, "b")) == ["port"]


@pytest.mark.parametrize("system", [
    '<a cdl:ref="a"/>',
    '<a cdl:ref="b"/><b cdl:ref="a"/>',
    '<a><b cdl:ref=".."/></a>',
    '<a><b cdl:ref="/a"/></a>',
])
def test_reference_loops_are_detected(system):
    error = fails("reference-loop", cdl_doc("", system))
    assert "loop" in error.message


@pytest.mark.parametrize("system,kind", [
    ('<a cdl:ref="../../x"/>', "path-too-far-up"),
    ('<a cdl:ref="nothere"/>', "dangling-reference"),
    ('<a cdl:ref="b/c"/><b/>', "dangling-reference"),
    ('<a cdl:ref="q:b"/>', "unknown-prefix"),
    ('<a cdl:refroot="nothere" cdl:ref="x"/>', "unknown-refroot"),
    ('<a cdl:ref="b//c"/>', "bad-reference"),
    ('<a cdl:ref="b"> </a><b/>', "reference-with-children"),
    ('<a cdl:ref="b"><c/></a><b/>', "reference-with-children"),
    ('<a cdl:ref="b" cdl:lazy="TRUE"/><b/>', "bad-boolean"),
    ('<a cdl:lazy="true"/>', "missing-attribute"),
    ('<a cdl:frobnicate="1"/>', "unexpected-attribute"),
])
def test_bad_references(system, kind):
    error = fails(kind, cdl_doc("", system))
    assert error.line == 1


def test_reference_error_names_its_path_and_the_reference():
    error = fails("dangling-reference", cdl_doc("", "<a>\n<b>\n<c cdl:ref='../zz'/></b></a>"))
    assert error.path == "/a/b/c" and "../zz" in error.message and error.line == 3


# -- lazy references ----------------------------------------------------------------------------
def test_lazy_references_stay_until_deployment():
    result = resolve_cdl(cdl_doc("", """
        <db cdl:extends="cmp:process"><argv><item>db</item></argv></db>
        <web cdl:extends="cmp:process">
          <argv><item>web</item></argv>
          <env><PID cdl:ref="/db/pid" cdl:lazy="true"/><COPY cdl:ref="PID"/></env>
        </web>""", imports=LIBRARY_IMPORT), check=True)
    web = result.deployment.find("web")
    assert web.attributes["env"] == {"PID": Lazy("ref", "db/pid"), "COPY": Lazy("ref", "db/pid")}
    pid = child(system_of(result), "web/env/PID")
    assert pid.get("{http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0}lazy") == "true"


def test_lazy_reference_to_a_constant_carries_the_constant():
    result = resolve_cdl(cdl_doc("<defaults><user>lazy-value</user></defaults>", """
        <app cdl:extends="cmp:process"><argv><item>x</item></argv>
          <env><USER cdl:refroot="defaults" cdl:ref="user" cdl:lazy="true"/></env></app>""",
                                 imports=LIBRARY_IMPORT), check=True)
    assert result.deployment.find("app").attributes["env"] == {"USER": "lazy-value"}


def test_lazy_reference_may_name_a_value_only():
    with pytest.raises(DescriptorError, match="names a component"):
        resolve_cdl(cdl_doc("", """
            <db cdl:extends="cmp:process"><argv><item>x</item></argv></db>
            <web cdl:extends="cmp:process"><argv><item>y</item></argv>
              <description cdl:ref="/db" cdl:lazy="true"/></web>""", imports=LIBRARY_IMPORT))


def test_eager_reference_through_a_lazy_one_fails():
    fails("lazy-reference", cdl_doc("", '<a cdl:ref="/x" cdl:lazy="1"/><b cdl:ref="a/y"/>'))


# -- imports ------------------------------------------------------------------------------------
LIB = CDL_HEAD + "<cdl:configuration><p><from>lib</from></p><x:q/></cdl:configuration></cdl:cdl>"


def test_relative_import_resolves_against_the_documents_location():
    result = resolve_cdl(cdl_doc("", '<a cdl:extends="p"/>',
                                 imports='<cdl:import location="lib/l.cdl"/>'),
                         files={"file:///t/lib/l.cdl": LIB})
    assert child(system_of(result), "a/from").text == "lib"


def test_import_of_an_import_is_relative_to_the_importing_document():
    middle = CDL_HEAD + '<cdl:import location="../common/l.cdl"/></cdl:cdl>'
    files = {"classpath:/org/lib/m.cdl": middle, "classpath:/org/common/l.cdl": LIB}
    result = resolve_cdl(cdl_doc("", '<a cdl:extends="p"/>',
                                 imports='<cdl:import location="classpath:/org/lib/m.cdl"/>'),
                         files=files)
    assert child(system_of(result), "a/from").text == "lib"


def test_namespaced_import_rehomes_only_unprefixed_prototypes():
    doc = (CDL_HEAD.replace('xmlns:x="urn:x"', 'xmlns:x="urn:x" xmlns:n="urn:n"')
           + '<cdl:import location="l.cdl" namespace="urn:n"/>'
           '<cdl:system><a cdl:extends="n:p"/><b cdl:extends="x:q"/></cdl:system></cdl:cdl>')
    result = resolve_cdl(doc, files={"file:///t/l.cdl": LIB})
    assert child(system_of(result), "a/from").text == "lib"
    error = fails("unknown-prototype", doc.replace('"n:p"', '"p"'), files={"file:///t/l.cdl": LIB})
    assert "p" in error.message


def test_importing_twice_is_harmless():
    imports = '<cdl:import location="l.cdl"/><cdl:import location="file:///t/l.cdl"/>'
    result = resolve_cdl(cdl_doc("", '<a cdl:extends="p"/>', imports=imports),
                         files={"file:///t/l.cdl": LIB})
    assert child(system_of(result), "a/from").text == "lib"


def test_recursive_imports_are_detected():
    a = CDL_HEAD + '<cdl:import location="b.cdl"/></cdl:cdl>'
    b = CDL_HEAD + '<cdl:import location="a.cdl"/></cdl:cdl>'
    error = fails("import-loop", cdl_doc(imports='<cdl:import location="a.cdl"/>'),
                  files={"file:///t/a.cdl": a, "file:///t/b.cdl": b})
    assert error.file == "file:///t/b.cdl"
    fails("import-loop", cdl_doc(imports='<cdl:import location="main.cdl"/>'))


def test_one_namespace_from_two_locations_clashes():
    imports = ('<cdl:import location="l.cdl" namespace="urn:n"/>'
               '<cdl:import location="m.cdl" namespace="urn:n"/>')
    fails("namespace-clash", cdl_doc(imports=imports),
          files={"file:///t/l.cdl": LIB, "file:///t/m.cdl": LIB})


def test_missing_import_names_the_importing_line():
    error = fails("import", cdl_doc(imports='\n<cdl:import location="gone.cdl"/>'))
    assert error.line == 2 and error.path == "file:///t/gone.cdl"


def test_relative_import_without_a_base_location():
    fails("import", cdl_doc(imports='<cdl:import location="l.cdl"/>'), base_url=None)


def test_errors_in_imported_documents_name_that_document():
    bad = CDL_HEAD + '<cdl:configuration><p cdl:extends="zz"/></cdl:configuration></cdl:cdl>'
    error = fails("unknown-prototype", cdl_doc(imports='<cdl:import location="bad.cdl"/>'),
                  files={"file:///t/bad.cdl": bad})
    assert error.file == "file:///t/bad.cdl"


# -- expressions --------------------------------------------------------------------------------
def test_expressions_are_evaluated_with_variables():
    result = resolve_cdl(cdl_doc("", """
        <base>8000</base><host>example.org</host>
        <port><cdl:expression value-of="$b + 80"><cdl:variable name="b" ref="base"/></cdl:expression></port>
        <url><cdl:expression value-of="concat('http://', $h, ':', $p, '/')">
          <cdl:variable name="h" ref="host"/><cdl:variable name="p" ref="port"/></cdl:expression></url>
        <big><cdl:expression value-of="$b &gt; 9000"><cdl:variable name="b" ref="base"/></cdl:expression></big>
        <half><cdl:expression value-of="$b div 3"><cdl:variable name="b" ref="base"/></cdl:expression></half>"""))
    system = system_of(result)
    assert child(system, "port").text == "8080"
    assert child(system, "url").text == "http://example.org:8080/"
    assert child(system, "big").text == "false"
    assert float(child(system, "half").text) == pytest.approx(8000 / 3)


def test_expression_in_a_prototype_is_evaluated_in_each_extending_element():
    result = resolve_cdl(cdl_doc(
        '<p><n>1</n><double><cdl:expression value-of="$n * 2"><cdl:variable name="n" ref="n"/>'
        "</cdl:expression></double></p>",
        '<a cdl:extends="p"><n>5</n></a><b cdl:extends="p"/>'))
    system = system_of(result)
    assert child(system, "a/double").text == "10" and child(system, "b/double").text == "2"


@pytest.mark.parametrize("expression,kind", [
    ('<cdl:expression value-of="$a"><cdl:variable name="a" ref="v"/>'
     '<cdl:variable name="a" ref="v"/></cdl:expression>', "duplicate-variable"),
    ('<cdl:expression value-of="1 +"/>', "expression"),
    ('<cdl:expression value-of="$nope"/>', "expression"),
    ('<cdl:expression value-of="$a"><cdl:variable name="a" ref="v" cdl:lazy="true"/>'
     "</cdl:expression>", "lazy-expression"),
    ('<cdl:expression value-of="$a"><x/></cdl:expression>', "unexpected-element"),
    ('<cdl:expression/>', "missing-attribute"),
])
def test_bad_expressions(expression, kind):
    fails(kind, cdl_doc("", "<v>1</v><r>%s</r>" % expression))


def test_expression_over_a_lazy_value_fails():
    fails("lazy-expression", cdl_doc("", '<v><cmp:property name="p" lazy="true"/></v>'
                                     '<r><cdl:expression value-of="$a"><cdl:variable name="a" '
                                     'ref="v"/></cdl:expression></r>'))


# -- deploy-time properties ---------------------------------------------------------------------
def test_eager_properties_are_substituted_and_reported():
    result = resolve_cdl(cdl_doc("", """
        <db><cmp:property name="hosts.database"/></db>
        <port><cmp:property name="db.port" type="integer"/></port>
        <user><cmp:property name="db.user" default="admin"/></user>
        <copy cdl:ref="port"/>"""), properties={"hosts.database": "db1", "db.port": " 5432 "})
    system = system_of(result)
    assert [child(system, n).text for n in ("db", "port", "user", "copy")] == \
        ["db1", "5432", "admin", "5432"]
    assert result.used_properties == ("db.port", "db.user", "hosts.database")


def test_missing_property_is_a_resolution_error_naming_it():
    error = fails("missing-property", cdl_doc("", '<db>\n<cmp:property name="database.password"/></db>'),
                  ResolutionError)
    assert error.path == "database.password" and error.line == 2
    assert "database.password" in str(error)


def test_integer_property_must_be_an_integer():
    fails("bad-property", cdl_doc("", '<p><cmp:property name="n" type="integer"/></p>'),
          ResolutionError, properties={"n": "eight"})


def test_lazy_property_is_resolved_on_the_host():
    result = resolve_cdl(cdl_doc("", """
        <web cdl:extends="cmp:process"><argv><item>x</item></argv>
          <env><HOST><cmp:property name="local.hostname" lazy="true"/></HOST>
               <PORT><cmp:property name="port" lazy="true" type="integer" default="80"/></PORT></env>
        </web>""", imports=LIBRARY_IMPORT), check=True)
    assert result.deployment.find("web").attributes["env"] == {
        "HOST": Lazy("property", "local.hostname"), "PORT": Lazy("property", "port", "80", True)}
    assert result.used_properties == ()


def test_property_must_be_the_only_content():
    fails("bad-property", cdl_doc("", '<p>x<cmp:property name="n"/></p>'))


# -- inline descriptors -------------------------------------------------------------------------
def test_an_inline_body_keeps_prefixes_declared_on_the_envelope():
    envelope = etree.fromstring(
        '<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/" xmlns:d="urn:d" '
        'xmlns:cdl="http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0"><s:Body><api:body '
        'xmlns:api="http://www.gridforum.org/cddlm/deployapi/2005/02"><cdl:cdl><cdl:configuration>'
        '<d:p><v>1</v></d:p></cdl:configuration><cdl:system><x cdl:extends="d:p"/></cdl:system>'
        "</cdl:cdl></api:body></s:Body></s:Envelope>")
    body = envelope.find(".//{http://www.gridforum.org/namespaces/2005/02/cddlm/CDL-1.0}cdl")
    from cddlm.lang import cdl
    from cddlm.lang.model import ResolveRequest
    result = cdl.LANGUAGE.resolve(ResolveRequest(source=body))
    assert child(system_of(result), "x/v").text == "1"
    assert len(envelope.find(".//{urn:d}p")) == 1   # the caller's tree is left alone
