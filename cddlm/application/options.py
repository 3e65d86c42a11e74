"""Options (CONTRACT section 6): parsed once, checked by the spec's rules. Pure.

- an empty or absent option list always works;
- two options with the same URI give ``BadArgument``;
- an option marked mustUnderstand that this operation does not understand gives
  ``NotUnderstood`` naming its URI; unknown options without it are ignored;
- every understood option is listed in ``api:staticInfo`` (``ALL``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cddlm.errors import BadArgument, NotUnderstood

PREFIX = "urn:cddlm:option:"
VALIDATE_ONLY = PREFIX + "validate-only"
CLIENT_TOKEN = PREFIX + "client-token"
TERMINATION_TIME = PREFIX + "termination-time"
SUBSCRIBE = PREFIX + "subscribe"
PROPERTIES = PREFIX + "properties"    # deploy-time properties as an option (spec 4.4.2)

# option URI -> (value kinds accepted, operations that understand it)
CATALOG: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    VALIDATE_ONLY: (("boolean",), frozenset({"initialize"})),
    CLIENT_TOKEN: (("string",), frozenset({"create", "initialize"})),
    TERMINATION_TIME: (("string",), frozenset({"create", "initialize"})),
    SUBSCRIBE: (("data", "string"), frozenset({"create"})),
    PROPERTIES: (("data",), frozenset({"initialize"})),
}
ALL = tuple(CATALOG)


@dataclass(frozen=True)
class Option:
    name: str
    must_understand: bool
    kind: str        # string | integer | boolean | data
    value: Any       # str | int | bool | lxml element (data)
    text: str        # canonical text form, for digests and deploymentInfo


def check(options: list[Option], operation: str) -> dict[str, Option]:
    """The options this operation understands, by URI; raises on the spec's errors."""
    seen: set[str] = set()
    understood: dict[str, Option] = {}
    for opt in options:
        if opt.name in seen:
            raise BadArgument("option %s is given more than once" % opt.name)
        seen.add(opt.name)
    for opt in options:
        entry = CATALOG.get(opt.name)
        if entry is None or operation not in entry[1]:
            if opt.must_understand:
                raise NotUnderstood(opt.name)
            continue
        kinds = entry[0]
        if opt.kind not in kinds:
            raise BadArgument("option %s takes a %s value, not %s"
                              % (opt.name, " or ".join(kinds), opt.kind))
        understood[opt.name] = opt
    return understood


def _local(el: Any) -> str:
    tag = el.tag if isinstance(el.tag, str) else ""
    return tag.rpartition("}")[2]


HOLDERS = ("data", "properties", "PropertyMapOption")


def property_pairs(opt: Option) -> list[tuple[str, str]]:
    """The (name, value) pairs of a ``PROPERTIES`` option: its data holds ``property``
    elements, each a ``name`` and a ``value`` (``api:property``, as in ``api:properties``),
    bare or in one holder (``api:properties``, SmartFrog's ``PropertyMapOption``); the
    namespace is not checked. Anything else is ``BadArgument``."""
    root = opt.value      # the data element, or its only child
    if _local(root) == "property":
        items = [root]
    elif _local(root) in HOLDERS:
        items = [c for c in root if isinstance(c.tag, str)]
    else:
        items = [root]    # refused below
    pairs = []
    for item in items:
        fields = {_local(c): c.text or "" for c in item if isinstance(c.tag, str)}
        if _local(item) != "property" or "name" not in fields or not fields["name"].strip():
            raise BadArgument("option %s holds property elements, each a name and a value; "
                              "not %s" % (opt.name, item.tag))
        pairs.append((fields["name"].strip(), fields.get("value", "")))
    return pairs
