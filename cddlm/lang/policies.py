"""The placement policies as the descriptor languages see them: each type's shape (monadic,
symmetric or asymmetric pairwise, or group-wide), which components it is relevant to, its
parameters (CONTRACT section 10), and the expansion of a ``Deployment``'s policies into the
primitive applications they stand for.

Shapes, from the Heat policy extension ("Groups, Policies, and Relationships"):

| shape      | applied to a group G means                      | between [A, B] means              |
|------------|-------------------------------------------------|-----------------------------------|
| monadic    | the policy on each relevant member of G         | (not allowed)                     |
| symmetric  | the policy on every unordered pair of members   | every pair (x, y), x of A, y of B |
| asymmetric | (not allowed: there is no direction in a group) | every ordered pair (x, y)         |
| group      | one statement about all members together (llmn, Nova server groups, same-subtree) |  |

In the model, ``group: G`` stands for the placed members of G (``library.placed_members``) and
``between: [A, B]`` for those of A and of B, where A and B are components or groups. The
languages write only relevant members into the groups they hand to the solver (see ``hot``),
and ``expand`` filters by relevance too, so the solver never needs to know about relevance.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from cddlm.errors import DescriptorError
from cddlm.lang import library
from cddlm.lang.model import Deployment, Policy


@dataclass(frozen=True)
class PolicyType:
    name: str
    shape: str                      # monadic | symmetric | asymmetric | group
    relevant: str                   # placed | compute | volume (see ``relevant``)
    params: dict[str, str]          # parameter -> str | int | number | list
    required: tuple[str, ...] = ()
    one_of: tuple[str, ...] = ()    # exactly one of these must be given
    # how the portal honours it: "solver" (placement), "template" (checked when the template
    # resolves), "construction" (the portal never does what it forbids) or "refused" (it
    # cannot: a template using it is a DescriptorFault, never accepted and ignored)
    enforced: str = "solver"


_SCOPE = {"scope": "str", "identifier": "str"}
CATALOG: dict[str, PolicyType] = {t.name: t for t in [
    PolicyType("collocation", "symmetric", "placed", {"level": "str", "scope": "str"},
               one_of=("level", "scope")),
    PolicyType("anti-collocation", "symmetric", "placed", {"level": "str", "scope": "str"},
               one_of=("level", "scope")),
    PolicyType("hop-limit", "symmetric", "placed", {"hops": "int"}, ("hops",)),
    PolicyType("bandwidth", "symmetric", "placed", {"mbps": "number"}, ("mbps",)),
    PolicyType("llmn", "group", "placed", {"l1": "str", "l2": "str", "n": "int"}, ("l1", "l2", "n")),
    PolicyType("affinity", "group", "placed", _SCOPE),
    PolicyType("anti-affinity", "group", "placed", _SCOPE),
    PolicyType("soft-affinity", "group", "placed", _SCOPE),
    PolicyType("soft-anti-affinity", "group", "placed", _SCOPE),
    PolicyType("same-subtree", "group", "placed", {"groups": "list", "level": "str"}, ("level",)),
    PolicyType("license", "monadic", "compute", {"catalog": "str", "product": "str"},
               ("catalog", "product")),
    PolicyType("root-traits", "monadic", "placed", {"required": "list", "forbidden": "list"}),
    # the network and volume policies of the Heat extension: reachability is a placement
    # policy (the hosts are connected by the network tree); a volume (a file on its host) may
    # be exclusive to one server, which the template shows; the portal never moves a placed
    # component, so volume-not-moved always holds; it configures no network access rules, so
    # endpoint-access is refused
    PolicyType("reachability", "symmetric", "compute", {}),
    PolicyType("endpoint-access", "asymmetric", "compute",
               {"protocols": "list", "endpoints": "list"}, enforced="refused"),
    PolicyType("volume-exclusive", "monadic", "volume", {}, enforced="template"),
    PolicyType("volume-not-moved", "monadic", "volume", {}, enforced="construction"),
]}

MEMBER_PARAMS = ("group", "between", "groups")
UNSUPPORTED = {   # why a policy type cannot be written in CDL or the native language
    "refused": "not enforced by this portal: it configures no network access rules",
    "template": "about HOT volumes and their attachments, which only HOT templates have",
    "construction": "about HOT volumes, which only HOT templates have",
}


def relevant(policy: PolicyType, kind: str) -> bool:
    """Whether a policy is relevant to a placed thing of this kind. Kinds: a component type, or
    ``compute`` (a process or server) and ``volume`` (a HOT volume) from the HOT language."""
    if policy.relevant == "compute":
        return kind in ("compute", "process")
    if policy.relevant == "volume":
        return kind == "volume"
    return True


def kind_of(component_type: str) -> str:
    return "compute" if component_type == "process" else component_type


def lookup(type_name: str, *, line: int | None = None, path: str | None = None) -> PolicyType:
    ptype = CATALOG.get(type_name)
    if ptype is None:
        raise DescriptorError("unknown policy type %r (known: %s)" % (type_name, ", ".join(CATALOG)),
                              kind="unknown-policy", line=line, path=path)
    return ptype


def coerce_params(ptype: PolicyType, raw: dict[str, Any], *, line: int | None = None,
                  path: str | None = None) -> dict[str, Any]:
    """Check and convert a policy's own parameters (not hard/weight/members). Strings from XML
    attributes are accepted for every kind: lists are space-separated."""
    def bad(message: str) -> DescriptorError:
        return DescriptorError("policy %s: %s" % (ptype.name, message), kind="invalid-policy",
                               line=line, path=path)

    out: dict[str, Any] = {}
    for key, value in raw.items():
        kind = ptype.params.get(key)
        if kind is None:
            raise bad("unknown parameter %r (known: %s)" % (key, ", ".join(ptype.params) or "none"))
        out[key] = _convert(kind, value, bad, key)
    missing = [k for k in ptype.required if k not in out]
    if missing:
        raise bad("missing parameter %s" % ", ".join(missing))
    if ptype.one_of and sum(k in out for k in ptype.one_of) != 1:
        raise bad("needs exactly one of %s" % ", ".join(ptype.one_of))
    return out


def _convert(kind: str, value: Any, bad, key: str) -> Any:
    if kind == "list":
        if isinstance(value, str):
            return value.split()
        if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
            return [str(v) for v in value]
        raise bad("%s must be a list of strings" % key)
    if kind in ("int", "number"):
        if isinstance(value, bool):
            raise bad("%s must be a number" % key)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise bad("%s must be a number, got %r" % (key, value)) from None
        if kind == "int" and (not number.is_integer() or number < 0):
            raise bad("%s must be a whole number >= 0, got %r" % (key, value))
        return int(number) if number.is_integer() else number
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise bad("%s must be a string" % key)
    return str(value)


def from_attributes(attrib: dict[str, str], *, source: str | None,
                    error: Callable[[str, str], Exception]) -> Policy:
    """A policy written as XML attributes (``type``, ``hard``, ``weight``, ``name``, its
    parameters, ``group`` or ``between="A B"``), as CDL and the native language write it.
    ``error(message, kind)`` builds the located error of the calling language."""
    raw = dict(attrib)
    type_name = raw.pop("type", "").strip()
    if not type_name:
        raise error("a policy needs a type", "invalid-policy")
    ptype = CATALOG.get(type_name)
    if ptype is None:
        raise error("unknown policy type %r (known: %s)" % (type_name, ", ".join(CATALOG)),
                    "unknown-policy")
    if ptype.enforced != "solver":
        raise error("policy %s is %s" % (type_name, UNSUPPORTED[ptype.enforced]), "unsupported-policy")
    hard_text = raw.pop("hard", "true").strip()
    if hard_text not in ("true", "1", "false", "0"):
        raise error("hard must be true or false, not %r" % hard_text, "invalid-policy")
    name = raw.pop("name", None)
    weight_text = raw.pop("weight", "1")
    try:
        weight = float(weight_text)
    except ValueError:
        weight = float("nan")
    if not math.isfinite(weight) or weight <= 0:
        raise error("weight must be a positive number, not %r" % weight_text, "invalid-policy")
    members: dict[str, Any] = {k: raw.pop(k) for k in list(raw)
                               if k in MEMBER_PARAMS and k not in ptype.params}
    try:
        params = coerce_params(ptype, raw)
    except DescriptorError as e:
        raise error(e.message, e.kind) from None
    if "between" in members:
        members["between"] = members["between"].split()
        if len(members["between"]) != 2 or ptype.shape not in ("symmetric", "asymmetric"):
            raise error("between names two components or groups, for pairwise policies",
                        "invalid-policy")
    elif "group" not in members and "groups" not in params:
        raise error("policy %s needs a group" % type_name, "invalid-policy")
    elif ptype.shape == "asymmetric":
        raise error("an asymmetric policy relates two things: use between", "invalid-policy")
    return Policy(type_name, hard_text in ("true", "1"), weight, {**params, **members}, name, source)


class Application(NamedTuple):
    """One primitive application of a policy: ``members`` is one component (monadic), a pair
    (sorted when symmetric, ordered when asymmetric) or every member (group-wide)."""
    type: str
    hard: bool
    members: tuple[str, ...]
    params: tuple[tuple[str, Any], ...] = ()


def applications(ptype: PolicyType, hard: bool, params: dict[str, Any],
                 sides: list[list[str]], group_wide: list[str] | None) -> list[Application]:
    """The applications of one policy given either ``group_wide`` (the members of the group it
    is applied to) or ``sides`` (pairs of member lists it relates)."""
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))

    def app(members: tuple[str, ...]) -> Application:
        return Application(ptype.name, hard, members, frozen)

    if group_wide is not None:
        if ptype.shape == "monadic":
            return [app((m,)) for m in group_wide]
        if ptype.shape == "group":
            return [app(tuple(group_wide))] if group_wide else []
        sides = [[[a], [b]] for a, b in itertools.combinations(group_wide, 2)]
    out: dict[Application, None] = {}   # a symmetric pair reached both ways counts once
    for left, right in sides:
        for x, y in itertools.product(left, right):
            if x != y:
                out[app(tuple(sorted((x, y))) if ptype.shape == "symmetric" else (x, y))] = None
    return list(out)


def expand(deployment: Deployment) -> list[Application]:
    """Every primitive application the deployment's policies stand for, in policy order."""
    types = {path: comp.type for path, comp in deployment.walk()}

    def members(name: str, ptype: PolicyType) -> list[str]:
        return [m for m in library.placed_members(deployment, name)
                if relevant(ptype, kind_of(types[m]))]

    out: list[Application] = []
    for policy in deployment.policies:
        ptype = CATALOG.get(policy.type)
        if ptype is None:
            continue
        params = {k: v for k, v in policy.params.items() if k not in MEMBER_PARAMS}
        if "between" in policy.params:
            a, b = policy.params["between"]
            out += applications(ptype, policy.hard, params, [[members(a, ptype), members(b, ptype)]],
                                None)
        elif "group" in policy.params:
            out += applications(ptype, policy.hard, params, [], members(policy.params["group"], ptype))
        elif "groups" in policy.params:
            union = [m for g in policy.params["groups"] for m in members(g, ptype)]
            out += applications(ptype, policy.hard, params, [], list(dict.fromkeys(union)))
    return out
