"""The use cases take the principal as a keyword that defaults to the local administrator (what
in-process callers, the scheduler and tests are). So that no edge forgets it, every call the
SOAP handlers and the dashboard make to a use case that takes a principal must pass one: this
test reads their source and checks each call."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from cddlm.application.service import Service
from cddlm.application.views import Views
from cddlm.notify.subscriptions import Subscriptions

PKG = Path(__file__).resolve().parents[2] / "cddlm"


def takes_principal(cls) -> set[str]:
    return {name for name, fn in inspect.getmembers(cls, inspect.isfunction)
            if "principal" in inspect.signature(fn).parameters}


def calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Attribute):
            yield node.func.value.attr, node.func.attr, node


def test_every_edge_call_passes_the_principal():
    wanted = {"service": takes_principal(Service), "subscriptions": takes_principal(Subscriptions),
              "views": takes_principal(Views)}
    assert {"create", "lookup", "app_for_view", "initialize", "dynamic_info"} <= wanted["service"]
    checked, missing = 0, []
    for path in sorted((PKG / "portal").glob("*.py")) + sorted((PKG / "web").glob("*.py")):
        for holder, method, node in calls(path):
            if method not in wanted.get(holder, ()):
                continue
            checked += 1
            keyword = any(k.arg == "principal" for k in node.keywords)
            positional = holder == "views" and node.args and "principal" in ast.unparse(node.args[0])
            if not (keyword or positional):
                missing.append("%s:%d %s.%s" % (path.name, node.lineno, holder, method))
    assert checked > 30 and not missing, missing
