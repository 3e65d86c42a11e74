"""DESIGN.md section 2: who may import whom, checked on every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "cddlm"
STDLIB_ONLY = {"errors", "ns", "config", "xsdtypes"}
RULES = {
    # package: project packages it may import (cddlm.X), and third-party modules it may not
    "lang": ({"errors", "ns", "config", "xmlsafe", "budget", "lang"},
             {"sqlalchemy", "spyne", "zeep", "apscheduler", "socket", "subprocess", "requests"}),
    "placement": ({"errors", "placement"},
                  {"sqlalchemy", "spyne", "zeep", "apscheduler", "socket", "subprocess", "lxml"}),
    "application": ({"errors", "ns", "config", "xmlsafe", "xsdtypes", "budget", "netsafe", "lang",
                     "placement", "application"}, {"spyne", "zeep", "apscheduler"}),
    "notify": ({"errors", "ns", "config", "xmlsafe", "xsdtypes", "wsa", "budget", "netsafe",
                "xpathsafe", "application", "notify"}, {"spyne", "apscheduler"}),
    "web": ({"errors", "ns", "config", "lang", "placement", "application", "web"},
            {"spyne", "zeep", "apscheduler", "sqlalchemy"}),
    "portal": ({"errors", "ns", "config", "xmlsafe", "xsdtypes", "wsa", "budget", "xpathsafe",
                "lang", "application", "notify", "portal", "__init__"}, {"apscheduler"}),
    # the helpers that bound what users give the portal: below every package that calls them
    "budget": ({"errors"}, {"sqlalchemy", "spyne", "zeep", "apscheduler", "socket", "subprocess",
                            "lxml", "requests"}),
    "netsafe": (set(), {"sqlalchemy", "spyne", "zeep", "apscheduler", "lxml", "requests"}),
    "xpathsafe": ({"errors", "budget"}, {"sqlalchemy", "spyne", "zeep", "apscheduler", "requests"}),
}
def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            if node.module == "cddlm":
                out.update("cddlm." + a.name for a in node.names)
    return out


def modules():
    for path in PKG.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        yield path, path.relative_to(PKG).parts


def test_package_import_rules():
    problems = []
    for path, parts in modules():
        found = imports(path)
        top = parts[0] if len(parts) > 1 else parts[0][:-3]
        if top in STDLIB_ONLY:
            bad = {m for m in found if (m.startswith("cddlm") and m != "cddlm.errors")
                   or m.split(".")[0] in
                   {"lxml", "sqlalchemy", "spyne", "zeep", "yaml", "ortools", "xmlschema"}}
            problems += ["%s imports %s" % ("/".join(parts), m) for m in bad]
            continue
        if top not in RULES:
            continue
        allowed, forbidden = RULES[top]
        for m in found:
            if m.startswith("cddlm."):
                if m.split(".")[1] not in allowed | {"__version__"}:
                    problems.append("%s imports %s" % ("/".join(parts), m))
            elif m.split(".")[0] in forbidden:
                problems.append("%s imports %s" % ("/".join(parts), m))
    assert not problems, problems


def test_spyne_only_under_portal_and_apscheduler_only_in_the_composition_root():
    for path, parts in modules():
        found = {m.split(".")[0] for m in imports(path)}
        if "spyne" in found:
            assert parts[0] == "portal", parts
        if "apscheduler" in found:
            assert parts == ("app.py",), parts


def test_pure_cores_do_no_io():
    io = {"socket", "subprocess", "sqlalchemy", "requests", "urllib.request", "http", "threading",
          "shutil", "signal"}
    for path, parts in modules():
        if parts[0] in {"lang", "placement"} or parts in {("application", "lifecycle.py"),
                                                          ("application", "options.py"),
                                                          ("application", "enactment", "states.py")}:
            bad = {m for m in imports(path) if m in io or m.split(".")[0] in io}
            assert not bad, "%s does I/O through %s" % ("/".join(parts), bad)
            text = path.read_text()
            for call in ("datetime.now", "time.time()", "open(", "os.environ", "os.listdir"):
                assert call not in text, "%s calls %s" % ("/".join(parts), call)


def test_faults_are_built_in_one_place():
    for path, parts in modules():
        text = path.read_text()
        if parts != ("portal", "faults.py") and "spyne.model.fault" in text:
            assert parts == ("portal", "soap.py") and "Fault(" not in text.replace("SoapFault", ""), parts
