"""Secrets marked in every language, and the bounds on what resolution may build (issue 16)."""

from __future__ import annotations

import pytest
from lxml import etree

from cddlm import ns
from cddlm.application import descriptors
from cddlm.application.secrets import HIDDEN, redact, redact_descriptor
from cddlm.config import Limits
from cddlm.errors import DescriptorError, ResolutionError
from cddlm.lang import hot_yaml
from cddlm.lang import native as native_language
from tests.lang.helpers import CDL_HEAD, LIBRARY_IMPORT, quickly, resolve_cdl, resolve_hot

HOT = """heat_template_version: 2015-04-30
parameters:
  pw: {type: string, hidden: true}
  plain: {type: string, default: shown}
resources:
  w:
    type: CDDLM::Process
    properties:
      argv: [sleep, '1']
      env:
        PGPASSWORD: {get_param: pw}
        DSN: {str_replace: {template: 'user:P@db', params: {P: {get_param: pw}}}}
        PLAIN: {get_param: plain}
  v:
    type: CDDLM::Process
    properties:
      argv: [echo, {get_param: pw}]
      env: {PEER: {get_attr: [w, env, PGPASSWORD]}}
"""


def native(body: str) -> str:
    return '<application xmlns="%s">%s</application>' % (ns.NATIVE, body)


def test_hot_hidden_parameters_mark_every_value_they_flow_into():
    dep = resolve_hot(HOT, properties={"pw": "s3cret"}).deployment
    assert dep.secrets >= {"w/env/PGPASSWORD", "w/env/DSN", "v/argv", "v/env/PEER"}
    assert "w/env/PLAIN" not in dep.secrets and dep.secret_properties == {"pw"}
    assert dep.is_secret("w") and dep.is_secret("w/env") and not dep.is_secret("w/argv")
    env = dep.find("w").attributes["env"]
    assert redact(dep, "w/env", env) == {"PGPASSWORD": HIDDEN, "DSN": HIDDEN, "PLAIN": "shown"}
    assert env["DSN"] == "user:s3cret@db"                     # the components get the value


def test_native_and_cdl_secret_markers_and_copies():
    result = descriptors.resolve(native(
        '<component name="db" type="process"><attribute name="argv"><item>sleep</item><item>1</item>'
        '</attribute><attribute name="env"><item name="TOKEN" secret="true"><property name="tok"/></item>'
        '<item name="OPEN">x</item></attribute></component>'
        '<component name="copy" type="process"><attribute name="argv" secret="true"><item>a</item></attribute>'
        '<attribute name="env"><ref path="db/env"/></attribute></component>'
        '<component name="lazy" type="process"><attribute name="argv"><item>b</item></attribute>'
        '<attribute name="env"><item name="T"><ref path="db/env" lazy="true"/></item></attribute></component>'),
        ns.NATIVE, properties={"tok": "t0k"})
    dep = result.deployment
    assert {"db/env/TOKEN", "copy/argv", "copy/env", "lazy/env/T"} <= dep.secrets
    assert "db/env/OPEN" not in dep.secrets and dep.secret_properties == {"tok"}
    cdl = CDL_HEAD + LIBRARY_IMPORT + (
        '<cdl:system><db cdl:extends="cmp:process"><argv><item>sleep</item></argv>'
        '<env><PW cmp:secret="true"><cmp:property name="pw"/></PW><OPEN>o</OPEN></env></db>'
        '<web cdl:extends="cmp:process"><argv><item>x</item></argv>'
        '<env><COPY cdl:ref="/db/env/PW"/></env></web></cdl:system></cdl:cdl>')
    dep = resolve_cdl(cdl, properties={"pw": "p"}, check=True).deployment
    assert {"db/env/PW", "web/env/COPY"} <= dep.secrets and "db/env/OPEN" not in dep.secrets
    assert dep.secret_properties == {"pw"}


def test_a_share_for_a_host_portal_keeps_the_secrets_of_every_language():
    # a front portal writes each host's share in the native language, whatever the descriptor's
    cdl = CDL_HEAD + LIBRARY_IMPORT + (
        '<cdl:system><db cdl:extends="cmp:process"><argv><item>sleep</item></argv>'
        '<env><PW cmp:secret="true">cdl-secret</PW><OPEN>o</OPEN></env></db>'
        '<web cdl:extends="cmp:process"><argv cmp:secret="true"><item>arg-secret</item></argv>'
        '<env><COPY cdl:ref="/db/env/PW"/></env></web></cdl:system></cdl:cdl>')
    for dep, values in ((resolve_hot(HOT, properties={"pw": "s3cret"}).deployment, {"s3cret"}),
                        (resolve_cdl(cdl, check=True).deployment, {"cdl-secret", "arg-secret"})):
        share = etree.tostring(native_language.to_xml(dep.components, dep.secrets), encoding="unicode")
        again = descriptors.resolve(share, ns.NATIVE).deployment
        assert again.secrets == dep.secrets and dep.secrets
        assert values <= again.secret_strings()
        assert not any(v in redact_descriptor(ns.NATIVE, share) for v in values)


def test_descriptor_text_is_shown_with_its_literal_secrets_masked():
    text = native('<component name="w" type="process"><attribute name="env">'
                  '<item name="K" secret="true">literal-secret</item></attribute></component>')
    shown = redact_descriptor(ns.NATIVE, text)
    assert "literal-secret" not in shown and "********" in shown
    hot = "heat_template_version: 2015-04-30\nparameters:\n  pw: {type: string, hidden: true, default: hunter2}\n"
    assert "hunter2" not in redact_descriptor(ns.HOT, hot)
    assert redact_descriptor(ns.HOT, "heat_template_version: x\n") == "heat_template_version: x\n"


def test_every_secret_of_a_descriptor_text_is_masked_after_a_secret_list():
    # masking the list (its items removed) ended the walk there: the secrets after it were shown
    text = native('<component name="w" type="process">'
                  '<attribute name="argv" secret="true"><item>run</item><item>list-secret</item></attribute>'
                  '<attribute name="env"><item name="K" secret="true">item-secret</item>'
                  '<item name="P">plain</item></attribute></component>')
    shown = redact_descriptor(ns.NATIVE, text)
    assert "list-secret" not in shown and "item-secret" not in shown and "plain" in shown


def test_merge_keys_are_merged_once_each_and_bounded():
    data = hot_yaml.load("a: &a {x: 1, y: 2}\nb: &b {y: 3, z: 4}\nc: {<<: [*a, *b], x: 9}\n",
                         max_nodes=100)
    assert data["c"] == {"x": 9, "y": 2, "z": 4}      # explicit keys win, then earlier mappings
    lines = ["p0: &p0 {a: 1}"] + ["p%d: &p%d {<<: [*p%d, *p%d], k%d: 1}" % (i, i, i - 1, i - 1, i)
                                  for i in range(1, 45)]      # 2^44 keys unmerged
    with quickly(1.0):
        data = hot_yaml.load("\n".join(lines), max_nodes=10_000)
    assert len(data["p44"]) == 45
    with pytest.raises(DescriptorError) as e:
        hot_yaml.load("\n".join(lines), max_nodes=500)
    assert e.value.kind == "too-large"


def test_templates_are_bounded_before_anything_is_built():
    # the largest template a request may send (512 KiB): refused before a value is constructed
    with quickly(2.0), pytest.raises(DescriptorError) as e:
        hot_yaml.load("k:\n" + "- a\n" * 130_000, max_nodes=10_000)
    assert e.value.kind == "too-large"
    with pytest.raises(DescriptorError) as e:
        resolve_hot("heat_template_version: 2015-04-30\n#" + "x" * 600_000 + "\n")
    assert e.value.kind == "too-large" and e.value.message.startswith("the template is larger")


@pytest.mark.parametrize("expression,kind", [
    ("{str_replace: {template: 'vvvvvvvvvv', params: {v: {str_replace: {template: 'vvvvvvvvvv', "
     "params: {v: 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'}}}}}}", "too-large"),
    ("{str_replace: {template: 'abcdefgh', params: {'': 'xxxxxxxxxxxxxxxxxxxxxxxxxx'}}}", "too-large"),
    ("{list_join: ['xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', ['a', 'b', 'c', 'd', 'e', 'f']]}", "too-large"),
])
def test_intrinsic_functions_refuse_to_build_oversized_values(expression, kind):
    template = ("heat_template_version: 2015-04-30\nresources:\n  w:\n    type: CDDLM::Process\n"
                "    properties: {argv: [echo], env: {X: %s}}\n" % expression)
    with pytest.raises(DescriptorError) as e:
        resolve_hot(template, limits=Limits(max_value_chars=200))
    assert e.value.kind == kind


def test_allowed_pattern_is_matched_whole_by_re2():
    template = ("heat_template_version: 2015-04-30\nparameters:\n  p: {type: string, constraints: "
                "[{allowed_pattern: '%s'}]}\nresources:\n  w: {type: CDDLM::Process, properties: "
                "{argv: [echo, {get_param: p}]}}\n")
    resolve_hot(template % "[a-z]+", properties={"p": "abc"})
    with pytest.raises(ResolutionError):
        resolve_hot(template % "[a-z]+", properties={"p": "abc1"})   # the whole value
    with quickly(0.5), pytest.raises(ResolutionError):
        resolve_hot(template % "(a+)+$", properties={"p": "a" * 50 + "b"})
    with pytest.raises(DescriptorError) as e:
        resolve_hot(template % "(a)\\1", properties={"p": "aa"})       # a backreference
    assert e.value.kind == "invalid-pattern"


@pytest.mark.parametrize("attribute,kind", [
    ('<attribute name="readiness"><item name="http">file:///etc/passwd</item></attribute>', "invalid-attribute"),
    ('<attribute name="readiness"><item name="tcp">99999</item></attribute>', "invalid-attribute"),
    ('<attribute name="readiness"><item name="file">/etc/passwd</item></attribute>', "invalid-attribute"),
    ('<attribute name="readiness"><item name="log">(?&lt;=a)b</item></attribute>', "invalid-pattern"),
    ('<attribute name="env"><item name="BIG">%s</item></attribute>' % ("x" * 300), "too-large"),
])
def test_the_library_refuses_unsafe_or_oversized_attributes(attribute, kind):
    body = native('<component name="w" type="process"><attribute name="argv"><item>sleep</item>'
                  '</attribute>%s</component>' % attribute)
    with pytest.raises(DescriptorError) as e:
        descriptors.resolve(body, ns.NATIVE, limits=Limits(max_value_chars=200))
    assert e.value.kind == kind


def test_cdl_expressions_have_no_exslt_and_a_bounded_result():
    doc = CDL_HEAD.replace(">", ' xmlns:str="http://exslt.org/strings">', 1) + LIBRARY_IMPORT + (
        '<cdl:system><w cdl:extends="cmp:process"><argv><item>x</item></argv><env><A>%s</A>'
        '<B><cdl:expression value-of="%s"><cdl:variable name="a" ref="/w/env/A"/></cdl:expression></B>'
        '</env></w></cdl:system></cdl:cdl>')
    with pytest.raises((DescriptorError, ResolutionError)):
        resolve_cdl(doc % ("a", "str:padding(1000000000, 'x')"))
    with quickly(1.0), pytest.raises(ResolutionError) as e:
        resolve_cdl(doc % ("y" * 100, "concat(" + ",".join(["$a"] * 30) + ")"),
                    limits=Limits(max_value_chars=1000))
    assert e.value.kind == "too-large"
