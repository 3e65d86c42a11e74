import pytest

from cddlm.errors import DescriptorError, ResolutionError
from cddlm.lang import library, native
from cddlm.lang.model import Deployment, Lazy
from cddlm.lang.model import ResolveRequest

HEAD = '<application xmlns="urn:cddlm:lang:components:1">'


def resolve(body: str, **props):
    r = native.LANGUAGE.resolve(ResolveRequest((HEAD + body + "</application>").encode(),
                                               properties=props))
    return library.check(r.deployment)


def test_contract_example_resolves_to_a_tree():
    d = resolve('''<component name="db" type="process">
        <attribute name="argv"><item>sleep</item><item>600</item></attribute></component>
      <component name="site" type="compound"><component name="web" type="process">
        <attribute name="argv"><item>python3</item><item>-m</item><item>http.server</item><item>0</item></attribute>
      </component></component>''')
    assert [p for p, _ in d.walk()] == ["db", "site", "site/web"]
    assert d.find("site/web").attributes["argv"][-1] == "0"
    assert d.find("db").attributes["grace"] == 5.0   # library default filled


def test_properties_eager_lazy_integer_and_default():
    d = resolve('''<component name="x" type="process"><attribute name="argv"><item>run</item>
        <item><property name="who"/></item><item><property name="n" type="integer"/></item>
        <item><property name="missing" default="fallback"/></item></attribute>
        <attribute name="env"><item name="HOST"><property name="local.hostname" lazy="true"/></item></attribute>
      </component>''', who="me", n="42")
    attrs = d.find("x").attributes
    assert attrs["argv"] == ["run", "me", "42", "fallback"]
    assert attrs["env"]["HOST"] == Lazy("property", "local.hostname")


def test_missing_and_bad_integer_property_are_resolution_errors():
    with pytest.raises(ResolutionError) as e:
        resolve('<component name="x" type="process"><attribute name="argv"><property name="p"/></attribute></component>')
    assert e.value.path == "p" and "not set" in e.value.message
    with pytest.raises(ResolutionError):
        resolve('<component name="x" type="process"><attribute name="argv"><item>a</item></attribute>'
                '<attribute name="grace"><property name="g" type="integer"/></attribute></component>', g="soon")


def test_references_copy_values_and_detect_loops():
    d = resolve('''<component name="a" type="process"><attribute name="argv"><item>x</item></attribute>
        <attribute name="grace"><ref path="b/grace"/></attribute></component>
        <component name="b" type="process"><attribute name="argv"><item>y</item></attribute>
        <attribute name="grace">7</attribute></component>''')
    assert d.find("a").attributes["grace"] == 7.0
    with pytest.raises(ResolutionError) as e:
        resolve('''<component name="a" type="process"><attribute name="argv"><ref path="b/argv"/></attribute></component>
            <component name="b" type="process"><attribute name="argv"><ref path="a/argv"/></attribute></component>''')
    assert e.value.kind == "reference-loop"


@pytest.mark.parametrize("body,kind", [
    ('<component name="x" type="warp-drive"/>', "unknown-type"),
    ('<component name="x" type="process"/>', "missing-attribute"),
    ('<component name="x" type="process"><attribute name="argv"><item>a</item></attribute>'
     '<attribute name="colour">red</attribute></component>', "unknown-attribute"),
    ('<component name="a/b" type="compound"/>', "invalid-name"),
    ('<component name="x" type="compound"/><component name="x" type="compound"/>', "duplicate-name"),
    ('<component name="x" type="process"><attribute name="argv"><item>a</item></attribute>'
     '<attribute name="grace">soon</attribute></component>', "invalid-attribute"),
    ('<component name="x" type="process"><attribute name="argv"><item>a</item></attribute>'
     '<attribute name="restart">always</attribute></component>', "invalid-attribute"),
    ('', "empty"),
])
def test_library_check_errors(body, kind):
    with pytest.raises(DescriptorError) as e:
        resolve(body)
    assert e.value.kind == kind


def test_groups_and_policies_round_trip_through_json():
    d = resolve('''<component name="a" type="process"><attribute name="argv"><item>x</item></attribute></component>
      <component name="b" type="process"><attribute name="argv"><item>y</item></attribute></component>
      <group name="g"><member>a</member><member>b</member></group>
      <policy type="anti-collocation" level="host" group="g" hard="false" weight="2"/>
      <policy type="hop-limit" between="a b" hops="0"/>''')
    again = Deployment.from_json(d.to_json())
    assert again.to_json() == d.to_json()
    assert again.policies[0].hard is False and again.policies[0].weight == 2
    assert again.policies[1].params == {"between": ["a", "b"], "hops": 0}
    assert library.placed_members(again, "g") == ["a", "b"]


def test_group_with_unknown_member_is_refused():
    with pytest.raises(DescriptorError) as e:
        resolve('<component name="a" type="compound"/><group name="g"><member>zz</member></group>')
    assert e.value.kind == "unknown-member"


def test_wrong_root_and_foreign_elements():
    with pytest.raises(DescriptorError):
        native.LANGUAGE.resolve(ResolveRequest(b'<app xmlns="urn:x"/>'))
    with pytest.raises(DescriptorError):
        resolve('<x:thing xmlns:x="urn:x"/>')


@pytest.mark.parametrize("policy,kind,words", [
    ('<policy type="anti-colocation" level="host" group="g"/>', "unknown-policy", "unknown policy type"),
    ('<policy type="anti-collocation" level="host" group="g" bogus="1"/>', "invalid-policy", "bogus"),
    ('<policy type="anti-collocation" level="host" group="g" hard="yes"/>', "invalid-policy", "hard"),
    ('<policy type="anti-collocation" level="host" group="g" weight="nan"/>', "invalid-policy", "weight"),
    ('<policy type="anti-collocation" level="host"/>', "invalid-policy", "needs a group"),
])
def test_policies_are_checked_like_cdl_ones(policy, kind, words):
    with pytest.raises(DescriptorError) as e:
        resolve('<component name="a" type="process"><attribute name="argv"><item>x</item></attribute>'
                '</component><group name="g"><member>a</member></group>' + policy)
    assert e.value.kind == kind and words in e.value.message and e.value.line


def test_a_descriptor_that_is_not_xml_is_a_descriptor_error():
    with pytest.raises(DescriptorError) as e:
        native.LANGUAGE.resolve(ResolveRequest(b"<application"))
    assert e.value.kind == "not-well-formed" and e.value.line
