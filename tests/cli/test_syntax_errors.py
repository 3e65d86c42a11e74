"""A descriptor with a syntax error says where (line and column) and what the parser expected
(issue 31): the file is the user's own, read on their machine, so its errors may quote the
parser. ``lang resolve`` and ``deploy`` alike, before any portal is asked."""

from __future__ import annotations

from tests.cli.helpers import cddlm

XML = """<application xmlns="urn:cddlm:lang:components:1">
  <component name="a" type="process">
    <attribute name="argv"><item>echo</item><item>a & b</item></attribute>
  </component>
</application>
"""

YAML = """heat_template_version: 2015-04-30
parameters:
  sleep: {type: number, default: 60}
resources:
  worker:
    type: CDDLM::Process
    properties:
     argv: [sleep, {get_param: sleep}]
      env: {A: b}
"""


def test_an_unescaped_ampersand_gives_line_column_and_reason(tmp_path):
    (tmp_path / "crash.xml").write_text(XML)
    for command in (("lang", "resolve"), ("deploy",)):
        r = cddlm(*command, "crash.xml", cwd=tmp_path, check=False, portal="127.0.0.1:1")
        assert r.returncode == 1
        assert "crash.xml:3: XML is not well-formed: xmlParseEntityRef: no name, line 3, " \
            "column 54" in r.stderr, r.stderr


def test_a_yaml_indentation_slip_gives_line_column_and_what_was_expected(tmp_path):
    (tmp_path / "typo2.yaml").write_text(YAML)
    for command in (("lang", "resolve"), ("deploy",)):
        r = cddlm(*command, "typo2.yaml", cwd=tmp_path, check=False, portal="127.0.0.1:1")
        assert r.returncode == 1
        assert "typo2.yaml:9: not valid YAML at column 7: did not find expected key (while " \
            "parsing a block mapping at line 8, column 6)" in r.stderr, r.stderr
