"""DESIGN.md section 2: who may import whom, checked on every module's imports."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "cddlm"
STDLIB_ONLY = {"errors", "ns", "config", "xsdtypes", "affinity", "logfields", "sdnotify"}
RULES = {
    # package: project packages it may import (cddlm.X), and third-party modules it may not
    "lang": ({"errors", "ns", "config", "xmlsafe", "budget", "lang"},
             {"sqlalchemy", "spyne", "zeep", "apscheduler", "socket", "subprocess", "requests"}),
    "placement": ({"errors", "placement"},
                  {"sqlalchemy", "spyne", "zeep", "apscheduler", "socket", "subprocess", "lxml"}),
    "application": ({"errors", "ns", "config", "xmlsafe", "xsdtypes", "budget", "netsafe", "lang",
                     "placement", "application", "affinity", "metrics"}, {"spyne", "zeep", "apscheduler"}),
    "notify": ({"errors", "ns", "config", "xmlsafe", "xsdtypes", "wsa", "budget", "netsafe",
                "outbound", "xpathsafe", "application", "notify", "metrics"}, {"spyne", "apscheduler"}),
    "web": ({"errors", "ns", "config", "lang", "placement", "application", "web", "metrics"},
            {"spyne", "zeep", "apscheduler", "sqlalchemy"}),
    "portal": ({"errors", "ns", "config", "xmlsafe", "xsdtypes", "wsa", "budget", "xpathsafe",
                "lang", "application", "notify", "portal", "__init__", "metrics", "logfields"},
               {"apscheduler"}),
    # the metrics registry (DESIGN.md section 9): below every layer that counts
    "metrics": (set(), {"sqlalchemy", "spyne", "zeep", "apscheduler", "lxml", "requests"}),
    # the helpers that bound what users give the portal: below every package that calls them
    "budget": ({"errors"}, {"sqlalchemy", "spyne", "zeep", "apscheduler", "socket", "subprocess",
                            "lxml", "requests"}),
    "netsafe": ({"outbound"}, {"sqlalchemy", "spyne", "zeep", "apscheduler", "lxml", "requests"}),
    # the one HTTP client every outbound request goes through: the standard library only
    "outbound": (set(), {"sqlalchemy", "spyne", "zeep", "apscheduler", "lxml", "requests"}),
    # how cddlm.client's messages travel: the project's WSDL, zeep, addressing, the safe parser
    "transport": ({"errors", "ns", "wsa", "xmlsafe"}, {"sqlalchemy", "spyne", "apscheduler"}),
    "xpathsafe": ({"errors", "budget", "affinity"}, {"sqlalchemy", "spyne", "zeep", "apscheduler", "requests"}),
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


def test_only_the_metrics_module_holds_the_registry():
    """DESIGN.md section 9: the layers count through cddlm/metrics.py, never prometheus_client."""
    for path, parts in modules():
        if "prometheus_client" in {m.split(".")[0] for m in imports(path)}:
            assert parts == ("metrics.py",), parts


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


# -- no import circles ------------------------------------------------------------------------------
def _module_name(parts: tuple[str, ...]) -> str:
    names = ["cddlm", *parts[:-1]] + ([] if parts[-1] == "__init__.py" else [parts[-1][:-3]])
    return ".".join(names)


def _runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports when it runs (anywhere: at the top, or inside a
    function, which only hides a circle), not those imported for type checking alone."""
    tree = ast.parse(path.read_text(), str(path))
    hidden = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("cddlm"):
            for a in node.names:
                full = node.module + "." + a.name
                out.add(full if full in known else node.module)
    return out & known


def import_circles() -> list[list[str]]:
    """Every set of modules that import each other round a circle (Tarjan's strongly
    connected components of the import graph, larger than one module)."""
    paths = {_module_name(parts): path for path, parts in modules()}
    graph = {name: _runtime_imports(path, set(paths)) - {name} for name, path in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:   # recursive: import chains are short
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_module_imports_itself_round_a_circle():
    assert import_circles() == []


def test_the_circle_finder_finds_circles(tmp_path, monkeypatch):
    pkg = tmp_path / "cddlm"
    (pkg / "a").mkdir(parents=True)
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "one.py").write_text("from cddlm.a import two\n")
    (pkg / "a" / "two.py").write_text("def f():\n    from cddlm.a.one import x\n")
    (pkg / "a" / "three.py").write_text("from typing import TYPE_CHECKING\n"
                                        "if TYPE_CHECKING:\n    from cddlm.a import one\n")
    (pkg / "a" / "four.py").write_text("import cddlm.a.three\n")
    monkeypatch.setitem(globals(), "PKG", pkg)
    assert import_circles() == [["cddlm.a.one", "cddlm.a.two"]]
