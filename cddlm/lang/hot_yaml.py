"""Reading a HOT template (YAML, or JSON, which YAML reads too) from untrusted text.

``yaml.safe_load`` constructs only plain data, but aliases still let a few bytes stand for an
exponentially large tree (each alias shares its node, so the cost comes later, when the tree
is walked) or for a cycle, and merge keys (``<<: [*p, *p]``) let a few bytes ask the
constructor for exponentially many keys (PyYAML 6.0.3 and older copy every merged pair; 6.0.4
happens to drop repeats). ``load`` therefore merges by itself, keeping each key once and
counting every pair it looks at, measures the expanded size before anyone walks the data,
refuses cycles and deep nesting, refuses duplicate keys, leaves dates as strings
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


# libyaml's parser when PyYAML has it (twelve times faster than the pure-Python one, and it
# refuses nesting deeper than 1,000 itself), the pure-Python one otherwise
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader with line-numbered mappings, bounded merge keys, no timestamps, no duplicate
    keys; ``load`` bounds depth and node count between composing and constructing."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str, max_nodes: int):
        super().__init__(stream)
        self.max_nodes = max_nodes
        self.merged_pairs = 0            # pairs looked at while merging, over the whole document
        self.flattened: set[int] = set()

    def flatten_mapping(self, node):
        """YAML merge keys, whatever the PyYAML release: explicit keys win over merged ones,
        earlier merged mappings over later ones, each key once; each mapping is flattened once
        however often it is merged, and the pairs looked at are bounded by ``max_nodes``."""
        if id(node) in self.flattened:
            return
        self.flattened.add(id(node))
        merged: list = []
        own: list = []
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        raise DescriptorError("a merge key (<<) takes a mapping or a list of "
                                              "mappings", kind="invalid-template",
                                              line=source.start_mark.line + 1)
                    self.flatten_mapping(source)
                    merged.extend(source.value)
            else:
                if key_node.tag == "tag:yaml.org,2002:value":
                    key_node.tag = "tag:yaml.org,2002:str"
                own.append((key_node, value_node))
        if not merged:
            return
        self.merged_pairs += len(merged)
        if self.merged_pairs > self.max_nodes:
            raise DescriptorError("merge keys (<<) expand the template to more than %d values"
                                  % self.max_nodes, kind="too-large", line=node.start_mark.line + 1)
        seen = {k.value for k, _ in own if isinstance(k, yaml.ScalarNode)}
        kept = []
        for pair in merged:
            key = pair[0].value if isinstance(pair[0], yaml.ScalarNode) else id(pair[0])
            if key not in seen:
                seen.add(key)
                kept.append(pair)
        node.value = kept + own


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


def load(text: str | bytes, *, max_nodes: int, quote: bool = True) -> Any:
    """Parse the template; ``DescriptorError`` (with a line) when it is not valid YAML, nests too
    deeply, or would expand through aliases to more than ``max_nodes`` values. ``quote=False``
    for a document read from a location (it may be any file): errors then say what kind of
    problem is where, without the parser's words about the content."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DescriptorError("the template is not UTF-8 text (byte %d)" % e.start,
                                  kind="not-well-formed") from None
    try:
        loader = _Loader(text, max_nodes)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_nodes(node, max_nodes)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        if "nesting depth" in problem:   # libyaml's own limit
            raise DescriptorError("the template nests too deeply", kind="too-deep",
                                  line=mark.line + 1 if mark else None) from None
        raise DescriptorError(_syntax_error(e, problem, mark, quote), kind="not-well-formed",
                              line=mark.line + 1 if mark else None) from None
    except DescriptorError as e:
        if not quote and e.kind == "duplicate-key":
            e.message = "a key appears twice in one mapping"
        raise
    except RecursionError:
        raise DescriptorError("the template nests too deeply", kind="too-deep") from None
    expanded_size(data, max_nodes)
    return data


def _syntax_error(e: yaml.YAMLError, problem: str, mark, quote: bool) -> str:
    """Where the parser stopped (the line is the error's own) and, when the document may be
    quoted, why and in what: ``not valid YAML at column 7: did not find expected key (while
    parsing a block mapping at line 8, column 6)``."""
    text = "not valid YAML" + (" at column %d" % (mark.column + 1) if mark else "")
    if not quote:
        return text
    text += ": " + problem
    context, at = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        text += " (%s%s)" % (context, " at line %d, column %d" % (at.line + 1, at.column + 1)
                             if at is not None and at is not mark else "")
    return text


def _check_nodes(root: yaml.Node, limit: int) -> None:
    """Before anything is constructed: at most ``limit`` distinct nodes, nested at most
    ``MAX_DEPTH`` deep (an alias is one node, however often it is used: ``expanded_size``
    counts the uses once the data exists)."""
    seen: set[int] = set()
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) > limit:
            raise DescriptorError("the template has more than %d values" % limit, kind="too-large",
                                  line=node.start_mark.line + 1)
        if depth > MAX_DEPTH:
            raise DescriptorError("the template nests deeper than %d levels" % MAX_DEPTH,
                                  kind="too-deep", line=node.start_mark.line + 1)
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((key, depth + 1))
                stack.append((value, depth + 1))


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
