"""HOT templates: parameters as deploy-time properties, functions, resources, bad input."""

from __future__ import annotations

import textwrap

import pytest

from cddlm.config import Limits
from cddlm.errors import DescriptorError, ResolutionError
from cddlm.lang import registry
from cddlm.lang.model import Lazy
from tests.lang.helpers import quickly, resolve_hot


def template(body: str, parameters: str = "") -> str:
    head = "heat_template_version: 2015-04-30\n"
    if parameters:
        head += "parameters:\n" + textwrap.indent(textwrap.dedent(parameters), "  ")
    return head + "resources:\n" + textwrap.indent(textwrap.dedent(body), "  ")


PROCESS = """
    web:
      type: CDDLM::Process
      properties:
        argv: [sleep, {get_param: delay}]
        env: {HOST: {get_param: host}, PORT: {get_param: port}}
"""
PARAMS = """
    delay: {type: string, default: "60"}
    host: {type: string}
    port: {type: number, default: 8080}
"""


def rejected(text: str, kind: str, error=(DescriptorError, ResolutionError), **kw):
    with quickly():
        with pytest.raises(error) as info:
            resolve_hot(text, **kw)
    assert info.value.kind == kind, str(info.value)
    return info.value


def test_the_language_is_registered():
    lang = registry.get("urn:cddlm:lang:hot:1")
    assert lang.body == "text"


def test_parameters_come_from_properties_then_defaults():
    result = resolve_hot(template(PROCESS, PARAMS), properties={"host": "db1", "port": "9000"})
    web = result.deployment.find("web")
    assert web.attributes["argv"] == ["sleep", "60"]
    assert web.attributes["env"] == {"HOST": "db1", "PORT": "9000"}
    assert result.used_properties == ("host", "port")


def test_missing_parameter_is_a_resolution_error_naming_it():
    error = rejected(template(PROCESS, PARAMS), "missing-property", ResolutionError)
    assert error.path == "host" and error.line == 5


@pytest.mark.parametrize("kind,raw,expected", [
    ("number", "42", 42), ("number", "2.5", 2.5), ("boolean", "yes", True),
    ("boolean", "off", False), ("comma_delimited_list", "a, b,c", ["a", "b", "c"]),
    ("json", '{"k": [1, 2]}', {"k": [1, 2]}), ("string", "x y", "x y"),
])
def test_parameter_types(kind, raw, expected):
    text = template("""
        f:
          type: CDDLM::File
          properties: {path: out, content: {str_replace: {template: "$v", params: {$v: "x"}}}}
        """, "p: {type: %s}\n" % kind)
    from cddlm.lang import hot
    from cddlm.lang.model import ResolveRequest
    t = hot.Template(ResolveRequest(source=text, properties={"p": raw}))
    assert t.evaluate({"get_param": "p"}, "x") == expected


@pytest.mark.parametrize("spec,raw", [
    ("{type: number, constraints: [{range: {min: 1, max: 10}}]}", "11"),
    ("{type: string, constraints: [{allowed_values: [a, b]}]}", "c"),
    ("{type: string, constraints: [{length: {max: 3}}]}", "abcd"),
    ("{type: number}", "many"),
    ("{type: boolean}", "perhaps"),
    ("{type: json}", "{not json"),
])
def test_parameter_constraints_and_bad_values(spec, raw):
    text = template("f: {type: CDDLM::File, properties: {path: {get_param: p}}}\n", "p: %s\n" % spec)
    rejected(text, "bad-property", ResolutionError, properties={"p": raw})


def test_lazy_parameters_are_resolved_on_the_host():
    text = template("""
        web:
          type: CDDLM::Process
          properties: {argv: [run], env: {HOST: {get_param: local.hostname}, N: {get_param: n}}}
        """, "local.hostname: {type: string, lazy: true}\nn: {type: number, lazy: true, default: 3}\n")
    result = resolve_hot(text)
    assert result.deployment.find("web").attributes["env"] == {
        "HOST": Lazy("property", "local.hostname"), "N": Lazy("property", "n", "3", True)}
    assert result.used_properties == ()


def test_get_attr_get_resource_str_replace_list_join():
    text = template("""
        db: {type: CDDLM::Process, properties: {argv: [db]}}
        site:
          type: CDDLM::Compound
          properties: {children: [{get_resource: web}]}
        web:
          type: CDDLM::Process
          properties:
            argv: [web, {list_join: [",", [a, b], [c]]}]
            env:
              DB_PID: {get_attr: [db, pid]}
              DB: {get_resource: db}
              URL: {str_replace: {template: "http://H:P/", params: {H: {get_param: h}, P: 80}}}
        """, "h: {type: string, default: example.org}\n")
    web = resolve_hot(text).deployment.find("site/web")
    assert web.attributes["argv"] == ["web", "a,b,c"]
    assert web.attributes["env"] == {"DB_PID": Lazy("ref", "db/pid"), "DB": "db",
                                     "URL": "http://example.org:80/"}


def test_servers_and_volumes_map_to_processes_and_files_with_demand():
    text = template("""
        vm: {type: OS::Nova::Server, properties: {flavor: m1.small, image: cirros, user_data: "echo hi"}}
        idle: {type: OS::Nova::Server, properties: {flavor: m1.tiny}}
        "data volume": {type: OS::Cinder::Volume, properties: {size: 10}}
        attach:
          type: OS::Cinder::VolumeAttachment
          properties: {instance_uuid: {get_resource: vm}, volume_id: {get_resource: data volume}}
        """)
    dep = resolve_hot(text).deployment
    assert [p for p, _ in dep.walk()] == ["vm", "idle", "data_volume"]
    vm = dep.find("vm")
    assert vm.type == "process" and vm.attributes["argv"] == ["/bin/sh", "-c", "echo hi"]
    assert vm.attributes["demand"] == {"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20}
    assert dep.find("idle").attributes["argv"] == ["sleep", "infinity"]
    volume = dep.find("data_volume")
    assert volume.type == "file" and volume.attributes["demand"] == {"DISK_GB": 10}


@pytest.mark.parametrize("body,kind", [
    ("x: {type: OS::Heat::Nothing}\n", "unknown-resource-type"),
    ("x: {type: CDDLM::Process, properties: {argv: {get_param: nope}}}\n", "bad-function"),
    ("x: {type: CDDLM::Process, properties: {argv: [{get_resource: nope}]}}\n", "bad-function"),
    ("x: {type: CDDLM::Process, properties: {argv: [{get_attr: [x]}]}}\n", "bad-function"),
    ("x: {type: CDDLM::Process, properties: {argv: [{get_file: /etc/passwd}]}}\n",
     "unsupported-function"),
    ("x: {type: CDDLM::Process, properties: {argv: [{Fn::Join: [a, b]}]}}\n",
     "unsupported-function"),
    ("x: {type: CDDLM::Process, properties: {argv: [{str_replace: {template: a}}]}}\n",
     "bad-function"),
    ("x: {type: CDDLM::Process, properties: {argv: [a]}, colour: red}\n", "invalid-template"),
    ("x: {type: OS::Nova::Server, properties: {flavor: m9.huge}}\n", "invalid-attribute"),
    ("x: {type: OS::Nova::Server, properties: {flavor: m1.tiny, rocket: yes}}\n",
     "invalid-template"),
    ("x: {type: OS::Cinder::Volume, properties: {size: -1}}\n", "invalid-attribute"),
    ("x: {type: CDDLM::Compound, properties: {children: [{get_resource: x}]}}\n",
     "containment-loop"),
    ("x: {type: CDDLM::Compound, properties: {children: [x]}}\n", "bad-function"),
    ("x: {type: OS::Cinder::VolumeAttachment, properties: {instance_uuid: abc, volume_id: d}}\n",
     "bad-function"),
    ("a b: {type: CDDLM::Probe, properties: {tcp: 'h:1'}}\na_b: {type: CDDLM::Probe}\n",
     "duplicate-name"),
    ("x: {type: CDDLM::Process, depends_on: [y], properties: {argv: [a]}}\n", "invalid-template"),
    ("x: {type: CDDLM::Process, depends_on: {y: 1}, properties: {argv: [a]}}\n",
     "invalid-template"),
    ("a: {type: CDDLM::Compound, properties: {children: [{get_resource: b}]}}\n"
     "b: {type: CDDLM::Compound, properties: {children: [{get_resource: a}]}}\n"
     "c: {type: CDDLM::Probe, properties: {tcp: 'h:1'}}\n", "containment-loop"),
])
def test_bad_resources(body, kind):
    error = rejected(template(body), kind)
    assert error.line is not None and error.path


def test_component_attributes_are_checked_by_the_library():
    with pytest.raises(DescriptorError) as info:
        resolve_hot(template("x: {type: CDDLM::Process, properties: {argv: [a], port: 80}}\n"))
    assert info.value.kind == "unknown-attribute"


@pytest.mark.parametrize("text,kind", [
    ("resources: [", "not-well-formed"),
    ("heat_template_version: 2015-04-30\nresources:\n  x: {type: CDDLM::Process}\n  x: {}\n",
     "duplicate-key"),
    ("- a list\n", "invalid-template"),
    ("resources: {x: {type: CDDLM::Probe}}\n", "invalid-template"),
    ("heat_template_version: 1\nresources: {}\n", "invalid-template"),
    ("heat_template_version: 1\nconditions: {}\nresources: {x: {type: CDDLM::Probe}}\n",
     "invalid-template"),
    ("[" * 5000 + "]" * 5000, "too-deep"),
    ("a: &a [*a]\n", "alias-loop"),
    ("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        "%s: &%s [%s]\n" % (n, n, ",".join(["*" + p] * 10))
        for p, n in zip("abcdefgh", "bcdefghi")), "too-large"),
    (b"\xff\xfe", "not-well-formed"),
])
def test_bad_yaml(text, kind):
    rejected(text, kind)


def test_alias_expansion_limit_is_the_node_budget():
    text = template("x: {type: CDDLM::Process, properties: {argv: &a [a, b, c]}}\n"
                    "y: {type: CDDLM::Process, properties: {argv: *a}}\n")
    assert resolve_hot(text).deployment.find("y").attributes["argv"] == ["a", "b", "c"]
    rejected(text, "too-large", limits=Limits(max_resolved_nodes=10))


def test_deeply_nested_containers_fail_quickly():
    body = "".join("c%d: {type: CDDLM::Compound, properties: {children: [{get_resource: c%d}]}}\n"
                   % (i, i + 1) for i in range(3000)) + "c3000: {type: CDDLM::Probe}\n"
    rejected(template(body), "too-deep")


def test_outputs_must_be_a_mapping():
    rejected(template("x: {type: CDDLM::Probe, properties: {tcp: 'h:1'}}\n") + "outputs: [1]\n",
             "invalid-template")


def test_json_templates_are_read_too():
    text = ('{"heat_template_version": "2015-04-30", "resources": {"p": {"type": "CDDLM::Probe",'
            ' "properties": {"http": "http://localhost/"}}}}')
    assert resolve_hot(text).deployment.find("p").attributes["http"] == "http://localhost/"
