"""``cddlm lang resolve``: prints the resolved document or the native tree; errors exit 1 with
the kind, file, line and path."""

from __future__ import annotations

import json
from pathlib import Path

from lxml import etree

from cddlm import cli, ns
from tests.lang.helpers import LIBRARY_IMPORT, cdl_doc

FIXTURES = Path(__file__).parent / "fixtures"
APP = cdl_doc("", """
    <db cdl:extends="cmp:process"><argv><item>sleep</item><item><cmp:property name="t"/></item></argv></db>
    <web cdl:extends="cmp:process"><argv><item>web</item></argv>
      <env><DB_PID cdl:ref="/db/pid" cdl:lazy="true"/></env></web>""", imports=LIBRARY_IMPORT)


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_resolve_prints_the_resolved_system(tmp_path, capsys):
    path = tmp_path / "app.cdl"
    path.write_text(APP)
    code, out, err = run(capsys, "lang", "resolve", str(path), "-p", "t=30")
    assert code == 0, err
    system = etree.fromstring(out.encode())
    assert system.tag == "{%s}system" % ns.CDL
    assert [i.text for i in system.find("db/argv")] == ["sleep", "30"]


def test_native_format_prints_the_component_tree(tmp_path, capsys):
    path = tmp_path / "app.cdl"
    path.write_text(APP)
    code, out, _ = run(capsys, "lang", "resolve", str(path), "-p", "t=30", "--format", "native")
    assert code == 0
    tree = json.loads(out)
    web = tree["components"][1]
    assert web["attributes"]["env"] == {"DB_PID": {"$lazy": "ref", "target": "db/pid"}}
    assert tree["components"][0]["attributes"]["argv"] == ["sleep", "30"]


def test_errors_exit_1_with_kind_file_line_and_path(tmp_path, capsys):
    path = tmp_path / "app.cdl"
    path.write_text(APP)
    code, out, err = run(capsys, "lang", "resolve", str(path))
    assert code == 1 and out == ""
    assert "missing-property: %s:2: t: " % path in err
    path.write_text(cdl_doc("", "<a>\n<b cdl:ref='../../x'/></a>"))
    code, _, err = run(capsys, "lang", "resolve", str(path))
    assert code == 1 and "path-too-far-up: %s:2: /a/b: " % path in err


def test_a_document_without_components_resolves_but_has_no_native_tree(tmp_path, capsys):
    path = tmp_path / "plain.cdl"
    path.write_text(cdl_doc("", "<app><user>x</user></app>"))
    code, out, _ = run(capsys, "lang", "resolve", str(path))
    assert code == 0 and "<user>x</user>" in out
    code, _, err = run(capsys, "lang", "resolve", str(path), "--format", "native")
    assert code == 1 and "empty" in err


def test_import_path_serves_classpath_imports(tmp_path, capsys):
    lib = tmp_path / "lib" / "org" / "x"
    lib.mkdir(parents=True)
    (lib / "l.cdl").write_text(cdl_doc("<p><v>from the import path</v></p>"))
    path = tmp_path / "app.cdl"
    path.write_text(cdl_doc("", '<a cdl:extends="p"/>',
                            imports='<cdl:import location="classpath:/org/x/l.cdl"/>'))
    code, _, err = run(capsys, "lang", "resolve", str(path))
    assert code == 1 and "import" in err and "classpath:/org/x/l.cdl" in err
    code, out, _ = run(capsys, "lang", "resolve", str(path), "--import-path", str(tmp_path / "lib"))
    assert code == 0 and "from the import path" in out


def test_hot_templates_resolve_from_yaml_and_json(tmp_path, capsys):
    code, out, err = run(capsys, "lang", "resolve", str(FIXTURES / "hadoop_5vm.json"))
    assert code == 0, err
    assert "anti-collocation" in out and "volume-exclusive" in out and "not_enforced" not in out
    path = tmp_path / "t.yaml"
    path.write_text("heat_template_version: 2015-04-30\nparameters: {n: {type: number}}\n"
                    "resources:\n  p: {type: CDDLM::Process, properties: {argv: [sleep, {get_param: n}]}}\n")
    code, out, _ = run(capsys, "lang", "resolve", str(path), "-p", "n=5", "--format", "native")
    assert code == 0
    assert json.loads(out)["components"][0]["attributes"]["argv"] == ["sleep", "5"]
    code, _, err = run(capsys, "lang", "resolve", str(path), "--language", ns.HOT)
    assert code == 1 and "missing-property" in err and "t.yaml:2" in err
