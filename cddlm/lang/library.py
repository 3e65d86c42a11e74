"""The component library: every component type, its attributes, and the check that a resolved
``Deployment`` uses them correctly.

Every language resolves to these types; ``check`` validates and normalises a tree in place
(strings from XML languages become the declared int/float/bool types) and raises
``DescriptorError`` naming the component path and attribute. Lazy values are left alone:
they are checked on the host once resolved.

| type | what it is |
|---|---|
| process  | a program (argv, env, cwd) with optional readiness check, stop signal, grace, restart policy |
| file     | a file written at deploy from ``content`` (with ``${property}`` substitution), removed at terminate unless ``keep`` |
| probe    | TCP or HTTP liveness check of something outside the portal |
| compound | children deployed and started together |
| sequence | children started one after another; a run-to-completion child must succeed first |
| parallel | children started at once |
| delegate | a part of the deployment enacted by another portal through the same API |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

from cddlm.budget import Meter, PatternError, user_regex
from cddlm.config import Limits
from cddlm.errors import DescriptorError
from cddlm.lang.model import NAME, Component, Deployment, Lazy, walk_from

TRUE = {"true", "1", "yes", "on"}
FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True)
class Attr:
    kind: str  # str | int | number | bool | strlist | strmap | nummap | map | any
    required: bool = False
    default: Any = None
    choices: tuple = ()
    doc: str = ""


COMMON = {
    "optional": Attr("bool", default=False, doc="a failure of this component does not fail its parent"),
    "host": Attr("str", doc="pin the component to this host (placement)"),
    "demand": Attr("nummap", doc="capacity the component needs, {dimension: amount}"),
    "traits": Attr("strlist", doc="traits its provider must have"),
    "forbidden_traits": Attr("strlist", doc="traits its provider must not have"),
    "description": Attr("str"),
}

SIGNALS = ("TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2")


@dataclass(frozen=True)
class ComponentType:
    name: str
    attributes: dict[str, Attr]
    container: bool = False   # may have children
    placed: bool = True       # runs on a host (containers are not placed themselves)
    doc: str = ""
    check: Callable[[str, dict, Limits], None] | None = None


def check_http_target(value: Any, path: str) -> None:
    """A probe's or readiness check's ``http`` target is an http or https URL with a host (not
    ``file:``, ``data:`` ...); a lazy value is checked on the host, when it is known."""
    if isinstance(value, Lazy):
        return
    try:
        parts = urlsplit(str(value))
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise DescriptorError("%r is not an http or https URL (no other scheme is checked)"
                              % _short(value), kind="invalid-attribute", path=path)


def check_tcp_target(value: Any, path: str, port_alone: bool) -> None:
    """``HOST:PORT`` (or, for readiness, a bare ``PORT`` on this host) with a valid port."""
    if isinstance(value, Lazy):
        return
    text = str(value).strip()
    host, sep, port = text.rpartition(":")
    if not sep and not port_alone:
        raise DescriptorError("%r is not HOST:PORT" % _short(value), kind="invalid-attribute",
                              path=path)
    if sep and not host.strip("[]"):
        raise DescriptorError("%r names no host" % _short(value), kind="invalid-attribute", path=path)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise DescriptorError("%r has no valid port (1-65535)" % _short(value),
                              kind="invalid-attribute", path=path)


def _check_process(path: str, attrs: dict, limits: Limits) -> None:
    argv = attrs.get("argv")
    if isinstance(argv, list) and not argv:
        raise DescriptorError("argv must not be empty", kind="invalid-attribute", path=path + "/argv")
    ready = attrs.get("readiness")
    if isinstance(ready, dict):
        where = path + "/readiness"
        kinds = [k for k in ("tcp", "http", "file", "log") if k in ready]
        if len(kinds) != 1:
            raise DescriptorError("readiness needs exactly one of tcp, http, file, log",
                                  kind="invalid-attribute", path=where)
        unknown = set(ready) - {"tcp", "http", "file", "log", "timeout", "interval"}
        if unknown:
            raise DescriptorError("unknown readiness setting %s" % ", ".join(sorted(unknown)),
                                  kind="invalid-attribute", path=where)
        if "http" in ready:
            check_http_target(ready["http"], where + "/http")
        if "tcp" in ready:
            check_tcp_target(ready["tcp"], where + "/tcp", port_alone=True)
        if "file" in ready and not isinstance(ready["file"], Lazy):
            name = str(ready["file"])
            if name.startswith("/") or ".." in name.split("/"):
                raise DescriptorError("readiness file %r must be a path inside the component's "
                                      "directory" % _short(name), kind="invalid-attribute",
                                      path=where + "/file")
        if "log" in ready and not isinstance(ready["log"], Lazy):
            try:
                user_regex(str(ready["log"]), limits.max_pattern_chars)
            except PatternError as e:
                raise DescriptorError("readiness log pattern %r: %s" % (_short(ready["log"]), e),
                                      kind="invalid-pattern", path=where + "/log") from None


def _check_probe(path: str, attrs: dict, limits: Limits) -> None:
    if ("tcp" in attrs) == ("http" in attrs):
        raise DescriptorError("a probe needs exactly one of tcp or http", kind="invalid-attribute",
                              path=path)
    if "http" in attrs:
        check_http_target(attrs["http"], path + "/http")
    else:
        check_tcp_target(attrs["tcp"], path + "/tcp", port_alone=False)


def _check_delegate(path: str, attrs: dict, limits: Limits) -> None:
    """The other portal is an http(s) URL; the descriptor is text (inline, or where to read it)."""
    check_http_target(attrs.get("portal"), path + "/portal")
    if not isinstance(attrs.get("descriptor"), (str, Lazy)) or not str(attrs["descriptor"]).strip():
        raise DescriptorError("a delegate's descriptor is the document's text, or the file or URL "
                              "to read it from", kind="invalid-attribute", path=path + "/descriptor")


TYPES: dict[str, ComponentType] = {t.name: t for t in [
    ComponentType("process", {
        "argv": Attr("strlist", required=True, doc="program and arguments"),
        "env": Attr("strmap", default={}, doc="extra environment variables"),
        "cwd": Attr("str", doc="working directory, relative to the component's directory"),
        "readiness": Attr("map", doc="one of tcp: PORT, http: URL, file: PATH, log: REGEX; timeout"),
        "stop_signal": Attr("str", default="TERM", choices=SIGNALS),
        "grace": Attr("number", default=5.0, doc="seconds between the stop signal and KILL"),
        "restart": Attr("str", default="never", choices=("never", "on-failure")),
        "restart_limit": Attr("int", default=3),
        "run_to_completion": Attr("bool", default=False,
                                  doc="the process is expected to exit; exit 0 means success"),
    }, doc="a program run in its own session", check=_check_process),
    ComponentType("file", {
        "path": Attr("str", required=True, doc="relative to the application's directory on the host"),
        "content": Attr("str", default=""),
        "mode": Attr("str", default="0644"),
        "substitute": Attr("bool", default=True, doc="replace ${name} with properties"),
        "keep": Attr("bool", default=False, doc="leave the file when terminated"),
    }, doc="a file written at deploy"),
    ComponentType("probe", {
        "tcp": Attr("str", doc="HOST:PORT that must accept connections"),
        "http": Attr("str", doc="URL that must answer 2xx/3xx"),
        "timeout": Attr("number", default=2.0),
    }, doc="liveness of something outside the portal", check=_check_probe),
    ComponentType("compound", {}, container=True, placed=False, doc="children together"),
    ComponentType("sequence", {}, container=True, placed=False, doc="children one after another"),
    ComponentType("parallel", {}, container=True, placed=False, doc="children at once"),
    ComponentType("delegate", {
        "portal": Attr("str", required=True, doc="URL of the other portal"),
        "language": Attr("str", required=True),
        # spec 4.4.1: sent with the language (default: the version this portal knows of it)
        "version": Attr("str", required=False),
        "descriptor": Attr("any", required=True),
        "properties": Attr("strmap", default={}),
    }, placed=False, check=_check_delegate,
       doc="part of a deployment enacted by another portal (it names the portal: no host here)"),
]}


def _coerce(kind: str, value: Any, path: str) -> Any:
    if isinstance(value, Lazy) or value is None:
        return value

    def bad(expected: str) -> DescriptorError:
        return DescriptorError("expected %s, got %r" % (expected, _short(value)),
                               kind="invalid-attribute", path=path)

    if kind == "any":
        return value
    if kind == "str":
        if isinstance(value, bool) or isinstance(value, (list, dict)):
            raise bad("a string")
        return str(value)
    if kind == "int":
        if isinstance(value, bool):
            raise bad("an integer")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                raise bad("an integer") from None
        raise bad("an integer")
    if kind == "number":
        if isinstance(value, bool):
            raise bad("a number")
        if isinstance(value, (int, float)):
            return value
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise bad("a number") from None
        raise bad("a number")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in TRUE | FALSE:
            return value.strip().lower() in TRUE
        raise bad("a boolean")
    if kind == "strlist":
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list):
            raise bad("a list")
        return [_coerce("str", v, "%s[%d]" % (path, i)) for i, v in enumerate(value)]
    if kind in ("strmap", "nummap", "map"):
        if not isinstance(value, dict):
            raise bad("a map")
        inner = {"strmap": "str", "nummap": "number", "map": "any"}[kind]
        return {str(k): _coerce(inner, v, "%s/%s" % (path, k)) for k, v in value.items()}
    raise AssertionError("unknown attribute kind " + kind)


def _short(value: Any) -> Any:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def check(deployment: Deployment, *, limits: Limits | None = None,
          require_components: bool = True) -> Deployment:
    """Validate types, names and attributes, fill defaults, coerce values, and bound the size
    of every value (``limits.max_value_chars``) and of all of them (``max_resolved_chars``).
    Returns the tree. ``require_components=False`` accepts a tree without components
    (resolving a document only: a CDL system made of other prototypes is valid CDL, it just
    deploys nothing)."""
    limits = limits or Limits()
    max_components, max_depth = limits.max_components, limits.max_descriptor_depth
    total = Meter(limits.max_resolved_chars, lambda: DescriptorError(
        "the resolved descriptor has more than %d characters of values" % limits.max_resolved_chars,
        kind="too-large"))
    count = 0

    def visit(comp: Component, path: str, depth: int) -> None:
        nonlocal count
        count += 1
        if count > max_components:
            raise DescriptorError("more than %d components" % max_components, kind="too-large")
        if depth > max_depth:
            raise DescriptorError("components nested deeper than %d" % max_depth, kind="too-deep",
                                  path=path)
        where = dict(path=path, file=None)
        if not NAME.match(comp.name or ""):
            raise DescriptorError("invalid component name %r (letters, digits, _ . -)" % comp.name,
                                  kind="invalid-name", **where)
        ctype = TYPES.get(comp.type)
        if ctype is None:
            raise DescriptorError("unknown component type %r (known: %s)"
                                  % (comp.type, ", ".join(sorted(TYPES))), kind="unknown-type", **where)
        if comp.children and not ctype.container:
            raise DescriptorError("a %s component cannot have children" % comp.type,
                                  kind="invalid-structure", **where)
        spec = {**COMMON, **ctype.attributes}
        unknown = sorted(set(comp.attributes) - set(spec))
        if unknown:
            raise DescriptorError("unknown attribute %s for type %s" % (", ".join(unknown), comp.type),
                                  kind="unknown-attribute", **where)
        attrs = {}
        for name, attr in spec.items():
            if name in comp.attributes:
                value = _coerce(attr.kind, comp.attributes[name], path + "/" + name)
                if attr.choices and isinstance(value, str) and value not in attr.choices:
                    raise DescriptorError("%s must be one of %s" % (name, ", ".join(attr.choices)),
                                          kind="invalid-attribute", path=path + "/" + name)
                attrs[name] = value
            elif attr.required:
                raise DescriptorError("missing required attribute %s" % name,
                                      kind="missing-attribute", **where)
            elif attr.default is not None:
                attrs[name] = attr.default
        for name, value in attrs.items():
            _measure(value, path + "/" + name, limits.max_value_chars, total)
        if ctype.check:
            ctype.check(path, attrs, limits)
        comp.attributes = attrs
        seen = set()
        for child in comp.children:
            if child.name in seen:
                raise DescriptorError("duplicate component name %r" % child.name,
                                      kind="duplicate-name", path=path)
            seen.add(child.name)
            visit(child, path + "/" + child.name, depth + 1)

    seen_roots = set()
    for root in deployment.components:
        if root.name in seen_roots:
            raise DescriptorError("duplicate component name %r" % root.name, kind="duplicate-name")
        seen_roots.add(root.name)
        visit(root, root.name, 1)
    if count == 0 and require_components:
        raise DescriptorError("the descriptor declares no components", kind="empty")
    _check_groups(deployment)
    deployment.check_references()
    _spread_secrets(deployment)
    return deployment


def _spread_secrets(deployment: Deployment) -> None:
    """A value that is a lazy reference to a secret (``web/env/PGPASSWORD``, or to a whole
    secret attribute) is a secret too, whatever the language."""
    if not deployment.secrets:
        return

    def visit(value: Any, path: str) -> None:
        if isinstance(value, Lazy):
            if value.kind == "ref" and deployment.is_secret(value.target):
                deployment.secrets.add(path)
        elif isinstance(value, dict):
            for k, v in value.items():
                visit(v, path + "/" + str(k))
        elif isinstance(value, list):
            if any(isinstance(v, Lazy) and v.kind == "ref" and deployment.is_secret(v.target)
                   for v in value):
                deployment.secrets.add(path)

    for path, comp in deployment.walk():
        for name, value in comp.attributes.items():
            visit(value, path + "/" + name)


def _measure(value: Any, path: str, limit: int, total: Meter) -> None:
    """Bound one value (every string in it) and count it towards the descriptor's total."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
            total.add(sum(len(str(k)) for k in v))
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            if len(v) > limit:
                raise DescriptorError("a value of %d characters is longer than the limit of %d"
                                      % (len(v), limit), kind="too-large", path=path)
            total.add(len(v))
        else:
            total.add(8)


def _check_groups(deployment: Deployment) -> None:
    groups = {}
    for g in deployment.groups:
        if g.name in groups:
            raise DescriptorError("duplicate group name %r" % g.name, kind="duplicate-name")
        groups[g.name] = g
    paths = {p for p, _ in deployment.walk()}
    for g in deployment.groups:
        for m in g.members:
            if m not in paths and m not in groups:
                raise DescriptorError("group %s names unknown member %r" % (g.name, m),
                                      kind="unknown-member", path=g.name)


def placed_paths(deployment: Deployment) -> list[tuple[str, Component]]:
    """(path, component) of every component placed on a host itself (not the containers)."""
    return [(p, c) for p, c in deployment.walk() if TYPES[c.type].placed]


def placed_members(deployment: Deployment, member: str) -> list[str]:
    """The placed (leaf) component paths a group member stands for: a placed component itself,
    every placed descendant of a container, every placed member of a group (recursively)."""
    groups = {g.name: g for g in deployment.groups}
    out: dict[str, None] = {}   # ordered, without repeats
    seen: set[str] = set()

    def add(m: str) -> None:
        if m in seen:
            return
        seen.add(m)
        comp = deployment.find(m)
        if comp is not None:
            for p, c in walk_from(m, comp):
                if TYPES[c.type].placed:
                    out[p] = None
        elif m in groups:
            for x in groups[m].members:
                add(x)

    add(member)
    return list(out)
