"""Mutated descriptors fail with a ``CddlmError`` (a precise descriptor or resolution error),
never with a Python exception: every value of a template, and every element of a CDL document,
is replaced in turn by odd things."""

from __future__ import annotations

import copy
import traceback

import yaml
from lxml import etree

from cddlm import ns
from cddlm.errors import CddlmError
from cddlm.lang import cdl, hot, library
from cddlm.lang.model import ResolveRequest
from tests.lang.helpers import cdl_doc, memory_loader

TEMPLATE = """
heat_template_version: 2015-04-30
parameters:
  port: {type: number, default: 80, constraints: [{range: {min: 1, max: 99}}]}
  host: {type: string, lazy: true}
resources:
  db: {type: CDDLM::Process, properties: {argv: [db, {get_param: port}]}}
  vm: {type: OS::Nova::Server, properties: {flavor: m1.tiny, user_data: run}}
  disk: {type: OS::Cinder::Volume, properties: {size: 1}}
  attach:
    type: OS::Cinder::VolumeAttachment
    properties: {instance_uuid: {get_resource: vm}, volume_id: {get_resource: disk}}
    policies: [{type: hop-limit, properties: {hops: 0}}]
  box: {type: CDDLM::Compound, properties: {children: [{get_resource: web}]}}
  web:
    type: CDDLM::Process
    properties:
      argv: [web, {str_replace: {template: "h:p", params: {p: {get_param: port}}}}]
      env: {PID: {get_attr: [db, pid]}, HOST: {get_param: host}}
groups:
  id: all
  members:
    - {id: front, members: [{get_resource: box}], policies: [{type: license, properties: {catalog: c, product: p}}]}
    - {id: back, members: [{get_resource: db}, {get_resource: vm}, {get_resource: disk}]}
  policies: [{type: anti-collocation, properties: {level: host, hard: false}}]
  relationships: [{related: {get_group: back}, policies: [{type: endpoint-access}]}]
"""
ODD = [None, 1, "x", [], {}, [1], {"a": 1}, {"get_resource": "nope"}, True, {"get_param": []}]

CMP = "{%s}" % ns.CMP
CDL = "{%s}" % ns.CDL
DOCUMENT = cdl_doc("""
    <server cdl:extends="cmp:process" mode="m"><argv><item>python3</item></argv></server>
    <defaults><port>80</port></defaults>""", """
    <db cdl:extends="cmp:process"><argv><item>db</item><item><cmp:property name="n"/></item></argv></db>
    <site cdl:extends="cmp:compound">
      <web cdl:extends="server">
        <readiness><tcp><cdl:expression value-of="$p + 1"><cdl:variable name="p" refroot="defaults"
          ref="port"/></cdl:expression></tcp></readiness>
        <env><A cdl:ref="/db/argv"/><B cdl:ref="/db/pid" cdl:lazy="true"/></env>
      </web>
    </site>
    <cmp:group name="g"><item>db</item><item>site/web</item></cmp:group>
    <cmp:policy type="anti-collocation" level="host" group="g"/>""",
                   imports='<cdl:import location="urn:cddlm:library:components.cdl"/>')
ODD_ATTRIBUTES = [(CDL + "extends", "server"), (CDL + "extends", "nope:x"), (CDL + "extends", ""),
                  (CDL + "ref", "/"), (CDL + "ref", ".."), (CDL + "ref", "/db"), (CDL + "ref", "x"),
                  (CDL + "refroot", "defaults"), (CDL + "lazy", "1"), (CMP + "type", "process"),
                  (CMP + "type", "compound"), (CMP + "type", "")]


def crash(resolve) -> str | None:
    try:
        result = resolve()   # a Resolution or a hot.Template: both have a deployment
        library.check(result.deployment, require_components=False)
        hot.expand_pairs(result.deployment)
    except CddlmError:
        return None
    except Exception as e:  # noqa: BLE001 - the point is to catch anything else
        return "".join(traceback.format_exception_only(type(e), e)).strip()
    return None


def paths(node, prefix=()):
    yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else []
    for key, value in children:
        yield from paths(value, prefix + (key,))


def test_mutated_templates_never_crash():
    data = yaml.safe_load(TEMPLATE)
    crashes = []
    for path in [p for p in paths(data) if p]:
        for odd in ODD:
            mutated = copy.deepcopy(data)
            node = mutated
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = copy.deepcopy(odd)
            problem = crash(lambda: hot.Template(ResolveRequest(source=mutated)))   # data, not text
            if problem:
                crashes.append((path, odd, problem))
    assert crashes == []


def test_mutated_cdl_documents_never_crash():
    root = etree.fromstring(DOCUMENT.encode())
    count = sum(1 for _ in root.iter())
    crashes = []

    def attempt(tree, what):
        text = etree.tostring(tree)
        problem = crash(lambda: cdl.LANGUAGE.resolve(ResolveRequest(
            source=text, base_url="file:///t/main.cdl", properties={"n": "1"},
            loader=memory_loader({}))))
        if problem:
            crashes.append((what, problem))

    for i in range(count):
        mutations = [("set", name, value) for name, value in ODD_ATTRIBUTES] + \
            [("remove",), ("dup",), ("text",), ("clear",)]
        for mutation in mutations:
            tree = copy.deepcopy(root)
            el = list(tree.iter())[i]
            if not isinstance(el.tag, str) or (mutation[0] != "set" and el.getparent() is None):
                continue
            if mutation[0] == "set":
                el.set(mutation[1], mutation[2])
            elif mutation[0] == "remove":
                el.getparent().remove(el)
            elif mutation[0] == "dup":
                el.addnext(copy.deepcopy(el))
            elif mutation[0] == "text":
                el.text = "x"
            else:
                el.clear()
            attempt(tree, (i, el.tag, mutation))
    assert crashes == []
