"""A descriptor with a syntax error says where (line and column) and what the parser expected
(issue 31): the file is the user's own, read on their machine, so its errors may quote the
parser. ``lang resolve`` and ``deploy`` alike, before any portal is asked."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("name, text, expected", [
    # an unescaped &
    ("crash.xml", XML, "crash.xml:3: XML is not well-formed: xmlParseEntityRef: no name, line 3, "
                       "column 54"),
    # an indentation slip
    ("typo2.yaml", YAML, "typo2.yaml:9: not valid YAML at column 7: did not find expected key "
                         "(while parsing a block mapping at line 8, column 6)"),
])
def test_a_syntax_error_gives_line_column_and_the_parsers_reason(tmp_path, name, text, expected):
    (tmp_path / name).write_text(text)
    for command in (("lang", "resolve"), ("deploy",)):
        r = cddlm(*command, name, cwd=tmp_path, check=False, portal="127.0.0.1:1")
        assert r.returncode == 1 and expected in r.stderr, (command, r.stderr)
