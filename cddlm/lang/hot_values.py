"""HOT parameters (deploy-time properties) and intrinsic functions.

Parameters: ``type`` string, number, json, comma_delimited_list or boolean; ``default``;
``constraints`` (allowed_values, range, length, and allowed_pattern, which must match the whole
value, checked by RE2 in linear time (``cddlm.budget``); custom_constraint is accepted and not
checked); ``hidden: true`` makes the value a secret: every value it flows into is marked
(``Evaluator.secret_paths``) and never returned by the portal. A parameter
takes its value from the deploy-time property of the same name, else its default; a parameter
with neither is a ``ResolutionError`` naming it. ``lazy: true`` (our extension) makes it a
value resolved on the host at deployment: ``Lazy("property", name, default)``, an integer
(IPROPERTY) when its type is number.

Functions: ``get_param`` (with a path into json and list values), ``get_resource`` (the
component path of a resource), ``get_attr`` (a runtime value or attribute of a component,
resolved on the host: ``Lazy("ref", "path/attr/key...")``), ``str_replace`` and ``list_join``.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from cddlm.budget import PatternError, user_regex
from cddlm.config import Limits
from cddlm.errors import ResolutionError
from cddlm.lang.hot_yaml import error, line_of
from cddlm.lang.model import Lazy, Value, has_lazy, strings_of

TYPES = ("string", "number", "json", "comma_delimited_list", "boolean")
PARAM_KEYS = {"type", "default", "description", "label", "hidden", "constraints", "immutable",
              "tags", "lazy"}
TRUE = {"true", "t", "yes", "y", "on", "1"}
FALSE = {"false", "f", "no", "n", "off", "0"}
UNSUPPORTED = {"get_file", "repeat", "digest", "resource_facade", "str_split", "map_merge",
               "map_replace", "yaql", "equals", "if", "not", "and", "or", "filter", "make_url",
               "contains", "list_concat", "list_concat_unique", "Ref"}


def hidden(section: Any) -> set[str]:
    """The names of the parameters marked ``hidden: true`` (their values are secrets)."""
    if not isinstance(section, dict):
        return set()
    return {str(name) for name, spec in section.items()
            if isinstance(spec, dict) and spec.get("hidden") is True}


def hidden_values(section: Any, properties: Mapping[str, str], names: set[str]) -> set[str]:
    """The strings the hidden parameters ``names`` may take, as given or by default (before
    they are checked: a refusal must not show them either)."""
    out: set[str] = set()
    for name in names:
        if name in properties:
            out.update(strings_of(properties[name]))
        out.update(strings_of(section[name].get("default")))
    return out


def parameters(section: Any, properties: Mapping[str, str],
               limits: Limits | None = None) -> tuple[dict[str, Value], list[str]]:
    """The value of every parameter, and the names of the properties read eagerly."""
    limits = limits or Limits()
    if section is None:
        return {}, []
    if not isinstance(section, dict):
        raise error("parameters must be a mapping", "parameters", line_of(section),
                    "invalid-template")
    values: dict[str, Value] = {}
    used: list[str] = []
    for name, spec in section.items():
        where = "parameters/%s" % name
        if not isinstance(spec, dict):
            raise error("a parameter is a mapping with a type", where, line_of(section),
                        "invalid-template")
        unknown = sorted(set(spec) - PARAM_KEYS)
        if unknown:
            raise error("unknown parameter key %s" % ", ".join(unknown), where, line_of(spec),
                        "invalid-template")
        kind = spec.get("type")
        if kind not in TYPES:
            raise error("parameter type must be one of %s, not %r" % (", ".join(TYPES), kind),
                        where, line_of(spec), "invalid-template")
        if spec.get("lazy") is True:
            default = spec.get("default")
            values[name] = Lazy("property", str(name), None if default is None else str(default),
                                kind == "number")
            continue
        if spec.get("lazy") not in (None, False):
            raise error("lazy must be true or false", where, line_of(spec), "invalid-template")
        if name in properties:
            raw: Any = properties[name]
            used.append(name)
        elif "default" in spec:
            raw = spec["default"]
        else:
            raise ResolutionError("deploy-time property %s is not set and the parameter has no "
                                  "default" % name, kind="missing-property", path=name,
                                  line=line_of(spec))
        value = _convert(kind, raw, name, line_of(spec))
        _constrain(value, spec.get("constraints") or [], name, where, line_of(spec), limits,
                   spec.get("hidden") is True)
        values[name] = value
    return values, used


def _convert(kind: str, raw: Any, name: str, line: int | None) -> Value:
    def bad(expected: str) -> ResolutionError:
        return ResolutionError("property %s must be %s, not %r" % (name, expected, raw),
                               kind="bad-property", path=name, line=line)

    if kind == "string":
        if isinstance(raw, (dict, list)):
            raise bad("a string")
        return "" if raw is None else str(raw)
    if kind == "number":
        if isinstance(raw, bool):
            raise bad("a number")
        try:
            number = float(raw)
        except (TypeError, ValueError):
            raise bad("a number") from None
        return int(number) if number.is_integer() and "." not in str(raw) else number
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in TRUE | FALSE:
            return text in TRUE
        raise bad("a boolean")
    if kind == "comma_delimited_list":
        if isinstance(raw, list):
            return [str(x) for x in raw]
        return [part.strip() for part in str(raw).split(",")] if str(raw).strip() else []
    if isinstance(raw, (dict, list)):
        return raw
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        raise bad("JSON") from None


def _constrain(value: Value, constraints: Any, name: str, where: str, line: int | None,
               limits: Limits, secret: bool = False) -> None:
    if not isinstance(constraints, list):
        raise error("constraints must be a list", where, line, "invalid-template")
    for c in constraints:
        if not isinstance(c, dict):
            raise error("a constraint is a mapping", where, line, "invalid-template")
        described = c.get("description")
        kinds = set(c) - {"description"}
        if len(kinds) != 1 or not kinds <= {"allowed_values", "range", "length", "allowed_pattern",
                                            "custom_constraint"}:
            raise error("unknown constraint %s" % ", ".join(sorted(kinds)), where, line_of(c),
                        "invalid-template")
        kind = kinds.pop()
        ok = True
        if kind == "allowed_values":
            if not isinstance(c[kind], list):
                raise error("allowed_values is a list", where, line_of(c), "invalid-template")
            ok = value in c[kind]
        elif kind in ("range", "length"):
            bounds = c[kind] if isinstance(c[kind], dict) else {}
            measure = value if kind == "range" else len(value) if isinstance(value, (str, list)) else 0
            bounds_ = [bounds.get("min", measure), bounds.get("max", measure)]
            if any(not isinstance(x, (int, float)) or isinstance(x, bool) for x in [measure] + bounds_):
                raise error("%s needs numbers (and a number parameter for range)" % kind, where,
                            line_of(c), "invalid-template")
            ok = bounds_[0] <= measure <= bounds_[1]
        elif kind == "allowed_pattern":
            try:
                pattern = user_regex(c[kind], limits.max_pattern_chars)
            except PatternError as e:
                raise error("allowed_pattern %r: %s" % (str(c[kind])[:60], e), where, line_of(c),
                            "invalid-pattern") from None
            ok = pattern.fullmatch(_scalar(value)) is not None
        if not ok:
            raise ResolutionError("property %s = %s violates %s: %s" % (
                name, "(hidden)" if secret else repr(value), kind, described or c[kind]),
                kind="bad-property", path=name, line=line_of(c))


class Evaluator:
    """Evaluates intrinsic functions against parameter values and resource paths."""

    def __init__(self, params: dict[str, Value], paths: dict[str, str | None], *,
                 hidden: set[str] = frozenset(), max_value_chars: int = Limits.max_value_chars):
        self.params = params
        self.paths = paths   # resource name -> component path (None: no component)
        self.hidden = hidden                    # parameters whose values are secrets
        self.secret_paths: set[str] = set()     # template paths a hidden parameter flowed into
        self.max_value_chars = max_value_chars
        self.functions: dict[str, Callable[[Any, str, int | None], Value]] = {
            "get_param": self.get_param, "get_resource": self.get_resource,
            "get_attr": self.get_attr, "str_replace": self.str_replace, "list_join": self.list_join,
        }

    def __call__(self, value: Any, path: str, line: int | None = None) -> Value:
        line = line_of(value) or line
        if isinstance(value, dict):
            if len(value) == 1:
                (key, args), = value.items()
                if key in self.functions:
                    return self.functions[key](args, path, line)
                if key in UNSUPPORTED or str(key).startswith(("get_", "Fn::")):
                    raise error("unsupported intrinsic function %s" % key, path, line,
                                "unsupported-function")
            return {str(k): self(v, "%s/%s" % (path, k), line) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, "%s[%d]" % (path, i), line) for i, v in enumerate(value)]
        return value

    def get_param(self, args: Any, path: str, line: int | None) -> Value:
        steps = args if isinstance(args, list) else [args]
        if not steps or not isinstance(steps[0], str):
            raise error("get_param takes a parameter name and an optional path", path, line,
                        "bad-function")
        if steps[0] not in self.params:
            raise error("get_param: unknown parameter %r" % steps[0], path, line, "bad-function")
        if steps[0] in self.hidden:
            self.secret_paths.add(path)
        value = self.params[steps[0]]
        for step in steps[1:]:
            if isinstance(value, Lazy):
                raise error("get_param: a lazy parameter has no parts", path, line, "bad-function")
            try:
                value = value[step]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                raise error("get_param: %r has no %r" % (steps[0], step), path, line,
                            "bad-function") from None
        return value

    def resource_path(self, name: Any, function: str, path: str, line: int | None) -> str:
        if not isinstance(name, str) or name not in self.paths:
            raise error("%s: unknown resource %r" % (function, name), path, line, "bad-function")
        target = self.paths[name]
        if target is None:
            raise error("%s: resource %s is not a component" % (function, name), path, line,
                        "bad-function")
        return target

    def get_resource(self, args: Any, path: str, line: int | None) -> Value:
        return self.resource_path(args, "get_resource", path, line)

    def get_attr(self, args: Any, path: str, line: int | None) -> Value:
        if not isinstance(args, list) or len(args) < 2:
            raise error("get_attr takes [resource, attribute, ...]", path, line, "bad-function")
        target = self.resource_path(args[0], "get_attr", path, line)
        rest = [self(a, path, line) for a in args[1:]]
        if not all(isinstance(a, (str, int)) and not isinstance(a, bool) for a in rest):
            raise error("get_attr: attribute names are strings", path, line, "bad-function")
        return Lazy("ref", "/".join([target] + [str(a) for a in rest]))

    def str_replace(self, args: Any, path: str, line: int | None) -> Value:
        args = self(args, path, line)
        if not isinstance(args, dict) or set(args) != {"template", "params"} \
                or not isinstance(args["template"], str) or not isinstance(args["params"], dict):
            raise error("str_replace takes template (a string) and params (a mapping)", path, line,
                        "bad-function")
        if has_lazy(args):
            raise error("str_replace cannot use a lazy value: it is evaluated at resolution",
                        path, line, "bad-function")
        text = args["template"]
        for key, value in args["params"].items():
            if isinstance(value, (dict, list)):
                raise error("str_replace: parameter %s is not a scalar" % key, path, line,
                            "bad-function")
            key, value = str(key), _scalar(value)
            # the length of the result, before it is built: nested replacements multiply
            if len(text) + text.count(key) * (len(value) - len(key)) > self.max_value_chars:
                raise error("str_replace: the result would be longer than %d characters"
                            % self.max_value_chars, path, line, "too-large")
            text = text.replace(key, value)
        return text

    def list_join(self, args: Any, path: str, line: int | None) -> Value:
        args = self(args, path, line)
        if not isinstance(args, list) or len(args) < 2 or not isinstance(args[0], str) \
                or not all(isinstance(a, list) for a in args[1:]):
            raise error("list_join takes [delimiter, list, ...]", path, line, "bad-function")
        items = [x for part in args[1:] for x in part]
        if has_lazy(items) or any(isinstance(x, (dict, list)) for x in items):
            raise error("list_join joins strings known at resolution", path, line, "bad-function")
        parts = [_scalar(x) for x in items]
        if sum(map(len, parts)) + len(args[0]) * max(0, len(parts) - 1) > self.max_value_chars:
            raise error("list_join: the result would be longer than %d characters"
                        % self.max_value_chars, path, line, "too-large")
        return args[0].join(parts)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
