"""Placement's GET /allocation_candidates query string -> ``CandidateRequest``, with the
microversion rules and the 400s (here ``BadArgument``) of the Placement API:

* 1.25 numbered groups (``resources1``) and ``group_policy``; 1.33 string suffixes (1-64 of
  ``a-zA-Z0-9_-``); 1.29 nested providers in results; 1.32 forbidden aggregates
  (``member_of=!a``, ``!in:a,b``); 1.35 ``root_required``; 1.36 ``same_subtree`` and
  resourceless groups; 1.39 any-traits ``required=in:A,B`` and repeated ``required``.
* Unknown parameters, malformed values, traits both required and forbidden, unknown CUSTOM_
  traits, more than one suffixed group without ``group_policy``, no group with resources,
  resourceless groups outside every ``same_subtree``, ``same_subtree`` naming an unknown suffix,
  and ``root_required`` given twice are errors. A repeated ``group_policy`` keeps the first.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

from cddlm.errors import BadArgument
from cddlm.placement.candidates import CandidateRequest, Group, Providers

LATEST = (1, 39)
PREFIXES = ("resources", "required", "member_of", "in_tree")


def parse_microversion(text: str) -> tuple[int, int]:
    if text == "latest":
        return LATEST
    major, _, minor = text.partition(".")
    return int(major), int(minor)


def _pairs(query: str) -> list[tuple[str, str]]:
    out = []
    for item in query.split("&"):
        if item:
            key, _, value = item.partition("=")
            out.append((unquote(key), unquote(value)))
    return out


def _suffix_pattern(mv: tuple[int, int]) -> re.Pattern:
    if mv >= (1, 33):
        suffix = r"[a-zA-Z0-9_-]{1,64}"
    elif mv >= (1, 25):
        suffix = r"[1-9][0-9]*"
    else:
        return re.compile(r"^(%s)()$" % "|".join(PREFIXES))
    return re.compile(r"^(%s)(%s)?$" % ("|".join(PREFIXES), suffix))


def parse_query(query: str, microversion: str, providers: Providers) -> CandidateRequest:
    mv = parse_microversion(microversion)
    pattern = _suffix_pattern(mv)
    wide = {"limit": (1, 16), "group_policy": (1, 25), "root_required": (1, 35),
            "same_subtree": (1, 36)}
    groups: dict[str, Group] = {}
    seen_keys: set[str] = set()
    request = CandidateRequest({}, nested_aware=mv >= (1, 29))
    root_given = False
    for key, value in _pairs(query):
        if key in wide:
            if mv < wide[key]:
                raise BadArgument("%s needs microversion %d.%d" % ((key,) + wide[key]))
            if key == "group_policy":
                if value not in ("none", "isolate"):
                    raise BadArgument("group_policy must be none or isolate, got %r" % value)
                request.group_policy = request.group_policy or value
            elif key == "root_required":
                if root_given:
                    raise BadArgument("root_required may be given only once")
                root_given = True
                required, forbidden = _traits(value, providers, any_of=False)
                request.root_required = {t for s in required for t in s}
                request.root_forbidden = forbidden
            elif key == "same_subtree":
                names = value.split(",")
                if any(not n for n in names):
                    raise BadArgument("same_subtree has an empty suffix: %r" % value)
                request.same_subtrees.append(sorted(set(names)))
            continue
        match = pattern.match(key)
        if not match:
            raise BadArgument("unknown or malformed query parameter %r" % key)
        prefix, suffix = match.group(1), match.group(2) or ""
        group = groups.setdefault(suffix, Group())
        if prefix == "resources":
            if key in seen_keys:
                raise BadArgument("%s given twice" % key)
            group.resources = _resources(value)
        elif prefix == "required":
            if key in seen_keys and mv < (1, 39):
                raise BadArgument("%s may be repeated only from microversion 1.39" % key)
            required, forbidden = _traits(value, providers, any_of=mv >= (1, 39),
                                          allow_forbidden=mv >= (1, 22))
            group.required += required
            group.forbidden |= forbidden
        elif prefix == "member_of":
            _member_of(group, value, mv)
        else:
            raise BadArgument("in_tree is not supported here")
        seen_keys.add(key)
    _check(groups, request, mv)
    request.groups = groups
    return request


def _resources(value: str) -> dict[str, int]:
    out = {}
    for item in value.split(","):
        rc, _, amount = item.partition(":")
        if not rc or not amount.isdigit() or int(amount) < 1:
            raise BadArgument("bad resources value %r (RESOURCE_CLASS:AMOUNT,...)" % value)
        out[rc] = int(amount)
    return out


def _traits(value: str, providers: Providers, *, any_of: bool, allow_forbidden: bool = True):
    required: list[frozenset[str]] = []
    forbidden: set[str] = set()
    if any_of and value.startswith("in:"):
        names = value[3:].split(",")
        if any(not n or n.startswith("!") for n in names):
            raise BadArgument("bad any-traits value %r" % value)
        required.append(frozenset(names))
    else:
        for name in value.split(","):
            if name.startswith("!") and allow_forbidden:
                forbidden.add(name[1:])
            elif name and not name.startswith("!"):
                required.append(frozenset([name]))
            else:
                raise BadArgument("bad trait %r" % name)
    names = forbidden | {t for s in required for t in s}
    unknown = sorted(t for t in names if not providers.known_trait(t))
    if unknown:
        raise BadArgument("no such trait(s): %s" % ", ".join(unknown))
    plain = {next(iter(s)) for s in required if len(s) == 1}
    if plain & forbidden:
        raise BadArgument("traits both required and forbidden: %s"
                          % ", ".join(sorted(plain & forbidden)))
    return required, forbidden


def _member_of(group: Group, value: str, mv: tuple[int, int]) -> None:
    negative = value.startswith("!")
    if negative:
        if mv < (1, 32):
            raise BadArgument("forbidden aggregates need microversion 1.32")
        value = value[1:]
    names = value[3:].split(",") if value.startswith("in:") else [value]
    if any(not n for n in names):
        raise BadArgument("bad member_of value %r" % value)
    if negative:
        group.forbidden_aggs |= set(names)
    else:
        group.member_of.append(frozenset(names))


def _check(groups: dict[str, Group], request: CandidateRequest, mv: tuple[int, int]) -> None:
    if not any(g.resources for g in groups.values()):
        raise BadArgument("There must be at least one resources or resources[$S] parameter.")
    for suffix, g in groups.items():
        if g.resources:
            continue
        if suffix == "" or mv < (1, 36):
            raise BadArgument("required/member_of%s given without resources%s" % (suffix, suffix))
        if not any(suffix in s for s in request.same_subtrees):
            raise BadArgument("Resourceless suffixed group request should be specified in "
                              "`same_subtree` query param: %s" % suffix)
    for names in request.same_subtrees:
        unknown = [n for n in names if n not in groups or n == ""]
        if unknown:
            raise BadArgument("same_subtree names unknown suffixes: %s" % ", ".join(unknown))
    suffixed = [s for s in groups if s]
    if len(suffixed) > 1 and request.group_policy is None:
        raise BadArgument("The group_policy parameter is required when specifying more than "
                          "one resources{N} parameter.")
