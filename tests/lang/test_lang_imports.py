"""The descriptor languages are pure: cddlm/lang imports nothing from cddlm.application (nor
the portal, the store or the network), as DESIGN.md section 2 says."""

from __future__ import annotations

import ast
from pathlib import Path

LANG = Path(__file__).resolve().parents[2] / "cddlm" / "lang"
ALLOWED_CDDLM = {"cddlm.errors", "cddlm.ns", "cddlm.xmlsafe", "cddlm.config", "cddlm.lang"}
FORBIDDEN = {"socket", "subprocess", "urllib.request", "requests", "http", "datetime"}


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == "cddlm":
                found.update("cddlm." + a.name for a in node.names)
    return found


def test_lang_modules_import_only_what_they_may():
    for path in sorted(LANG.glob("*.py")):
        for name in imports(path):
            if name.startswith("cddlm."):
                assert any(name == a or name.startswith(a + ".") for a in ALLOWED_CDDLM), (path, name)
            assert name.split(".")[0] not in FORBIDDEN and name not in FORBIDDEN, (path, name)
