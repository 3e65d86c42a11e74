"""Reading a HOT template (YAML, or JSON, which YAML reads too) from untrusted text.

``yaml.safe_load`` constructs only plain data, but aliases still let a few bytes stand for an
exponentially large tree (each alias shares its node, so the cost comes later, when the tree
is walked) or for a cycle. ``load`` therefore measures the expanded size before anyone walks
it, refuses cycles and deep nesting, refuses duplicate keys, leaves dates as strings
(``heat_template_version: 2013-05-23``), and records the line of every mapping so that errors
can point at it.
"""

from __future__ import annotations

from typing import Any

import yaml

from cddlm.errors import DescriptorError

MAX_DEPTH = 100


class Mapping(dict):
    """A YAML mapping that remembers the line it starts on."""
    line: int | None = None


def line_of(value: Any) -> int | None:
    return getattr(value, "line", None)


def error(message: str, path: str, line: int | None, kind: str) -> DescriptorError:
    """An error in a template, at ``path`` (``resources/web/properties``) and ``line``."""
    return DescriptorError(message, kind=kind, path=path, line=line)


class _Loader(yaml.SafeLoader):
    """SafeLoader with a depth guard, line-numbered mappings, no timestamps, no duplicate keys."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise DescriptorError("the template nests deeper than %d levels" % MAX_DEPTH,
                                      kind="too-deep", line=mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _construct_mapping(loader: _Loader, node: yaml.MappingNode):
    data = Mapping()
    data.line = node.start_mark.line + 1
    yield data
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
            if key_node.value in seen:
                raise DescriptorError("key %r appears twice in this mapping (first on line %d)"
                                      % (key_node.value, seen[key_node.value]), kind="duplicate-key",
                                      line=key_node.start_mark.line + 1)
            seen[key_node.value] = key_node.start_mark.line + 1
    data.update(loader.construct_mapping(node))


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def load(text: str | bytes, *, max_nodes: int) -> Any:
    """Parse the template; ``DescriptorError`` (with a line) when it is not valid YAML, nests too
    deeply, or would expand through aliases to more than ``max_nodes`` values."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DescriptorError("the template is not UTF-8 text: %s" % e, kind="not-well-formed") \
                from None
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise DescriptorError("not valid YAML: %s" % problem, kind="not-well-formed",
                              line=mark.line + 1 if mark else None) from None
    except RecursionError:
        raise DescriptorError("the template nests too deeply", kind="too-deep") from None
    expanded_size(data, max_nodes)
    return data


def expanded_size(data: Any, limit: int) -> int:
    """The number of values the data stands for once aliases are expanded, computed once per
    shared node; raise when it exceeds ``limit`` or when an alias makes a cycle."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(value: Any) -> int:
        if not isinstance(value, (dict, list)):
            return 1
        key = id(value)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise DescriptorError("an alias makes the template contain itself", kind="alias-loop",
                                  line=line_of(value))
        active.add(key)
        children = value.values() if isinstance(value, dict) else value
        total = 1 + sum(size(v) for v in children)
        active.discard(key)
        if total > limit:
            raise DescriptorError("the template expands to more than %d values (aliases)" % limit,
                                  kind="too-large", line=line_of(value))
        sizes[key] = total
        return total

    return size(data)
