"""The language-neutral component tree every descriptor language resolves to.

A ``Deployment`` is what ``initialize`` deploys: a forest of ``Component``s (each with a type
from the component library, attribute values and children), plus the placement ``Group``s and
``Policy``s the descriptor states. Values are plain data (str, int, float, bool, list, dict)
or ``Lazy`` markers that are resolved on the host that runs the component, at deployment.

Paths: a component is addressed by the names from a root, joined by ``/`` (``site/web``);
an attribute or runtime value by the component path plus its name (``site/web/port``), and a
part of one by the keys that select it after that (``site/web/env/PGPASSWORD``: the key
``PGPASSWORD`` of the map ``env``; ``site/web/argv/0``: the list ``argv``'s first item).
``Deployment.split_target`` is the one rule that reads a reference's target so, and
``canonical`` the one spelling of a path: empty segments (``w//port``, ``/w/port/``) are
dropped, so that every spelling of a path names the same value and the same secret.

Secrets: ``Deployment.secrets`` holds the paths of values a descriptor marks secret (an
attribute, ``web/argv``, or one entry of a map, ``web/env/PGPASSWORD``), and
``secret_properties`` the deploy-time properties whose values are secret. Their values are
stored and given to the components, never returned (``is_secret``). ``secret_values`` holds
the strings a language learned are secret while resolving (a hidden parameter's value, which
may stand inside a longer value), and ``secret_strings`` every secret string of the tree: a
text that holds one of them holds a secret, however it was made (the portal masks them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, NamedTuple, Union

from cddlm.config import Limits
from cddlm.errors import MAX_DIGITS, ResolutionError

if TYPE_CHECKING:  # pragma: no cover
    from lxml import etree

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


@dataclass(frozen=True)
class Lazy:
    """A value resolved on the host at deployment.

    kind ``property``: a deploy-time property or a host fact (``host.name``, ``local.hostname``,
    ``component.workdir`` ...); kind ``ref``: an absolute path to another component's attribute or
    runtime value (``db/port``, ``web/pid``). ``integer`` asks for an integer (IPROPERTY).
    """

    kind: str
    target: str
    default: Any = None
    integer: bool = False

    def to_json(self) -> dict:
        d = {"$lazy": self.kind, "target": self.target}
        if self.default is not None:
            d["default"] = self.default
        if self.integer:
            d["integer"] = True
        return d


Value = Union[str, int, float, bool, list, dict, Lazy, None]


def segments(path: str) -> list[str]:
    """A path's segments, without empty ones (``w//env/`` is ``w``, ``env``)."""
    return [p for p in path.split("/") if p]


def canonical(path: str) -> str:
    """The one spelling of a path (``/w//env/KEY/`` is ``w/env/KEY``)."""
    return "/".join(segments(path))


QUOTED = 200        # characters of a caller's path or key an error quotes


def quoted(text: str) -> str:
    """A caller's path or key as an error quotes it: its start, when it is long."""
    return text if len(text) <= QUOTED else text[:QUOTED - 3] + "..."


# the kinds of ``ResolutionError`` saying a reference never will have a value (it names no
# component, a key its value lacks, a loop), where ``unresolved-reference`` says: not yet
NEVER = frozenset({"dangling-reference", "reference-loop"})


class RefTarget(NamedTuple):
    """Where a reference's target points (``Deployment.split_target``): the ``component`` at
    its path, its attribute or runtime value ``name``, and the ``keys`` selecting a part of
    that value (a map's key; a list's index, counted from 0), outermost first."""

    target: str
    component: str
    name: str
    keys: tuple[str, ...] = ()

    def select(self, value: Value, resolve: Callable[[Lazy], Value] | None = None,
               runtime: bool = False, secret: Callable[[str], bool] | None = None) -> Value:
        """The part of ``value`` (the value named) that ``keys`` select. A lazy value met on the
        way is resolved by ``resolve`` first (None: it cannot be selected into yet). A key that
        is not there is a ``ResolutionError`` that says what is there: a ``dangling-reference``
        (it never will be), but for an item of a list in a ``runtime`` value, which may still
        come (the ports a process opens later: ``unresolved-reference``, asked again; so for an
        empty text, which is how another portal answers an empty list). A runtime map (or a
        single value) is recorded whole: a key it lacks never comes. ``secret`` says whether
        the value at a path is a secret or part of one (``Deployment.within_secret``): what
        such a value holds is never said (its keys, its size, whether a key is there)."""
        where = self.component + "/" + self.name
        walked = [where]
        for key in self.keys:
            if isinstance(value, Lazy):
                if resolve is None:
                    raise ResolutionError("%s cannot be selected yet: %s is only known on its host "
                                          "at deployment (make the reference lazy)"
                                          % (quoted(self.target), where),
                                          kind="lazy-value", path=self.target)
                value = resolve(value)
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isascii() and key.isdigit() \
                    and len(key) <= MAX_DIGITS and int(key) < len(value):
                value = value[int(key)]
            else:
                growing = runtime and (isinstance(value, list) or value == "")
                hidden = next((w for w in walked if secret is not None and secret(w)), None)
                said = "%s is secret: what it holds is not said" % hidden if hidden else \
                    "%s %s" % (where, _has(value, quoted(key)))
                raise ResolutionError("%s does not exist: %s" % (quoted(self.target), said),
                                      kind="unresolved-reference" if growing else "dangling-reference",
                                      path=self.target)
            where += "/" + key
            walked.append(where)
        return value


def _has(value: Value, key: str) -> str:
    """What a value that has no ``key`` has instead, for a message (names and sizes, never a
    value: it may be a secret)."""
    if isinstance(value, dict):
        names = sorted(str(k) for k in value)
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        return "has no key %s (keys: %s)" % (key, shown or "none")
    if isinstance(value, list):
        return "is a list of %d item%s: it has no item %s (its items are numbered from 0)" % (
            len(value), "" if len(value) == 1 else "s", key)
    return "is a single value, not a map or a list: it has no key %s" % key


@dataclass
class Component:
    name: str
    type: str
    attributes: dict[str, Value] = field(default_factory=dict)
    children: list["Component"] = field(default_factory=list)
    source: str | None = None  # "file:line" where it was declared, for messages


def walk_from(path: str, comp: Component) -> Iterator[tuple[str, Component]]:
    """``comp`` (at ``path``) and every component below it with its path, parents before
    children, in document order."""
    stack = [(path, comp)]
    while stack:
        path, comp = stack.pop()
        yield path, comp
        stack.extend((path + "/" + c.name, c) for c in reversed(comp.children))


@dataclass
class Group:
    name: str
    members: list[str]  # component paths or names of other groups
    source: str | None = None


@dataclass
class Policy:
    """One placement policy (CONTRACT section 10): ``type``, ``hard``, ``weight`` and its
    parameters (``level``, ``scope``, ``group``, ``between``, ``l1``, ``l2``, ``n``, ``hops``,
    ``mbps``, ``catalog``, ``product``, ``identifier``, ``groups``, ``required``, ``forbidden``)."""

    type: str
    hard: bool = True
    weight: float = 1.0
    params: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    source: str | None = None

    def to_json(self) -> dict:
        d = {"type": self.type, "hard": self.hard}
        if not self.hard:
            d["weight"] = self.weight
        if self.name:
            d["name"] = self.name
        d.update(self.params)
        return d


@dataclass
class Deployment:
    components: list[Component] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    policies: list[Policy] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)            # value paths marked secret
    secret_properties: set[str] = field(default_factory=set)  # deploy-time properties that are
    secret_values: set[str] = field(default_factory=set)      # strings known to be secret
    # what users of the tree derive from it once (the portal's masks), kept with it
    derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def is_secret(self, path: str) -> bool:
        """Whether the value at ``path`` is a secret or holds one (``web/env`` holds
        ``web/env/PGPASSWORD``; ``web/env/PGPASSWORD`` is one; a component path holds all its
        attributes' secrets)."""
        path = canonical(path)
        return any(s == path or s.startswith(path + "/") or path.startswith(s + "/")
                   for s in self.secrets) if path else bool(self.secrets)

    def within_secret(self, path: str) -> bool:
        """Whether the value at ``path`` is a secret or a part of one (``web/env/PGPASSWORD``
        and below it; not ``web/env``, which only holds one): nothing of it is returned."""
        path = canonical(path)
        return path in self.secrets or any(path.startswith(s + "/") for s in self.secrets)

    def secret_strings(self) -> frozenset[str]:
        """Every secret string: ``secret_values`` and each string (or number) at or below a
        secret path. Computed once per tree."""
        found = self.derived.get("secret_strings")
        if found is None:
            out = set(self.secret_values)
            # the paths that hold a secret below them (web/env holds web/env/PGPASSWORD)
            above = {s.rsplit("/", k)[0] for s in self.secrets for k in range(1, s.count("/") + 1)}
            for path, comp in self.walk() if self.secrets else ():
                for name, value in comp.attributes.items():
                    self._secret_leaves(path + "/" + name, value, above, out)
            found = self.derived["secret_strings"] = frozenset(s for s in out if s)
        return found

    def _secret_leaves(self, path: str, value: Value, above: set[str], out: set[str]) -> None:
        if path in self.secrets:
            out.update(strings_of(value))
        elif path in above and isinstance(value, dict):
            for key, item in value.items():
                self._secret_leaves(path + "/" + str(key), item, above, out)

    def walk(self) -> Iterator[tuple[str, Component]]:
        """Every component with its path, parents before children, in document order."""
        for root in self.components:
            yield from walk_from(root.name, root)

    def find(self, path: str) -> Component | None:
        parts = segments(path)
        level = self.components
        found = None
        for part in parts:
            found = next((c for c in level if c.name == part), None)
            if found is None:
                return None
            level = found.children
        return found

    def split_target(self, target: str, index: Mapping[str, Component] | None = None) -> RefTarget:
        """A reference's target read against this tree: the component is the longest leading
        run of its segments that names a component (leaving at least one), the next segment
        the attribute or runtime value, the rest the keys selecting into that value
        (``w/env/PGPASSWORD``: component ``w``, value ``env``, keys ``PGPASSWORD``).
        ``ResolutionError`` when no leading segment names a component. ``index``: every
        component by its path, for many targets read against one tree."""
        parts = segments(target)
        level, cut = self.components, 0
        for part in parts[:-1]:
            if index is not None:
                if "/".join(parts[:cut + 1]) not in index:
                    break
            else:
                found = next((c for c in level if c.name == part), None)
                if found is None:
                    break
                level = found.children
            cut += 1
        if not cut:
            raise ResolutionError("%s names no component" % quoted(target), kind="dangling-reference",
                                  path=target)
        return RefTarget(target, "/".join(parts[:cut]), parts[cut], tuple(parts[cut + 1:]))

    def check_references(self) -> None:
        """Refuse a lazy reference that can never resolve, as far as the tree tells before
        anything runs: one that names no component, or a key that a value the descriptor gives
        lacks (``w/env/B`` where w's ``env`` is ``{A: ...}``): a ``ResolutionError`` whose path
        is where the reference stands, naming its target and the keys there are (never a
        value). A part that is lazy on the way, and a value the tree does not give (a runtime
        value: pid, ports ...), are only known on the host: accepted."""
        index = dict(self.walk())
        for path, comp in index.items():
            for name, value in comp.attributes.items():
                for where, ref in references(value, path + "/" + name):
                    try:
                        at = self.split_target(ref.target, index)
                        given = index[at.component].attributes.get(at.name)
                        if given is not None:
                            at.select(given, secret=self.within_secret)
                    except ResolutionError as e:
                        if e.kind not in NEVER:
                            continue        # a lazy value on the way: known on its host
                        raise ResolutionError(e.message, kind=e.kind, path=where) from None

    def count(self) -> int:
        return sum(1 for _ in self.walk())

    # -- JSON form, used by the store and by ``cddlm lang resolve --format native`` ------------
    def to_json(self) -> dict:
        out = {
            "components": [_component_to_json(c) for c in self.components],
            "groups": [{"name": g.name, "members": list(g.members)} for g in self.groups],
            "policies": [p.to_json() for p in self.policies],
        }
        if self.secrets:
            out["secrets"] = sorted(self.secrets)
        if self.secret_properties:
            out["secretProperties"] = sorted(self.secret_properties)
        if self.secret_values:
            out["secretValues"] = sorted(self.secret_values)
        return out

    @classmethod
    def from_json(cls, data: dict) -> "Deployment":
        groups = [Group(g["name"], list(g["members"])) for g in data.get("groups", [])]
        policies = []
        for p in data.get("policies", []):
            p = dict(p)
            policies.append(Policy(type=p.pop("type"), hard=p.pop("hard", True),
                                   weight=p.pop("weight", 1.0), name=p.pop("name", None),
                                   params=p))
        return cls([_component_from_json(c) for c in data.get("components", [])], groups, policies,
                   set(data.get("secrets", ())), set(data.get("secretProperties", ())),
                   set(data.get("secretValues", ())))


def value_to_json(v: Value) -> Any:
    if isinstance(v, Lazy):
        return v.to_json()
    if isinstance(v, list):
        return [value_to_json(x) for x in v]
    if isinstance(v, dict):
        return {k: value_to_json(x) for k, x in v.items()}
    return v


def value_from_json(v: Any) -> Value:
    if isinstance(v, dict):
        if "$lazy" in v:
            return Lazy(v["$lazy"], v["target"], v.get("default"), bool(v.get("integer", False)))
        return {k: value_from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [value_from_json(x) for x in v]
    return v


def _component_to_json(c: Component) -> dict:
    d: dict[str, Any] = {"name": c.name, "type": c.type}
    if c.attributes:
        d["attributes"] = {k: value_to_json(v) for k, v in c.attributes.items()}
    if c.children:
        d["children"] = [_component_to_json(x) for x in c.children]
    return d


def _component_from_json(d: dict) -> Component:
    return Component(
        name=d["name"], type=d["type"],
        attributes={k: value_from_json(v) for k, v in d.get("attributes", {}).items()},
        children=[_component_from_json(x) for x in d.get("children", [])],
    )


def strings_of(v: Any) -> Iterator[str]:
    """The strings (and numbers, as text) in a value; a lazy value has none yet."""
    if isinstance(v, str):
        yield v
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        yield str(v)
    elif isinstance(v, list):
        for x in v:
            yield from strings_of(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings_of(x)


def references(v: Value, path: str = "") -> Iterator[tuple[str, Lazy]]:
    """The lazy references in a value, each with the path of the value it stands for (a
    map's key after its map's path; a list's items stand for the list)."""
    if isinstance(v, Lazy):
        if v.kind == "ref":
            yield path, v
    elif isinstance(v, list):
        for x in v:
            yield from references(x, path)
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from references(x, path + "/" + str(k))


def has_lazy(v: Value) -> bool:
    if isinstance(v, Lazy):
        return True
    if isinstance(v, list):
        return any(has_lazy(x) for x in v)
    if isinstance(v, dict):
        return any(has_lazy(x) for x in v.values())
    return False


# -- what a language is given and gives back (lang/registry.py names the languages) --------------
Loader = Callable[[str], bytes]
"""Fetch an absolute location (``file:`` URL, or an allowed prefix) and return its bytes;
raise ``ResolutionError`` when it cannot be read or is not allowed."""


def no_loader(location: str) -> bytes:
    raise ResolutionError("imports are not available here: %s" % location, kind="import")


@dataclass
class ResolveRequest:
    source: etree._Element | str | bytes   # an XML element (SOAP body) or the document's text/bytes
    base_url: str | None = None            # the document's own location, for relative imports
    properties: Mapping[str, str] = field(default_factory=dict)  # deploy-time properties
    loader: Loader = no_loader
    limits: Limits = field(default_factory=Limits)
    own_files: bool = False                # the documents read are the caller's own (below)
    # strings a language found to be secret while resolving (hidden parameters' values ...):
    # what an error it raises must not show, and what the deployment keeps as its own
    secret_values: set[str] = field(default_factory=set)

    def quotes(self, url: str | None) -> bool:
        """Whether errors may quote the document at ``url`` (None: the source itself). A
        document the portal read from a location may be any file: its errors say what kind of
        problem is where, never the parser's words about it; inline text is the caller's own,
        and so is every file ``cddlm lang resolve`` reads on the caller's machine."""
        return url is None or self.own_files


class Resolution:
    """A resolved descriptor: its ``deployment``, the eager properties it read, and
    ``display``, what ``cddlm lang resolve`` prints (for CDL the resolved ``cdl:system``). A
    language may pass ``display`` as a function: it is then rendered on first read only, so
    deploying never pays for printing."""

    def __init__(self, deployment: Deployment, display: str | Callable[[], str],
                 used_properties: tuple[str, ...] = ()):
        self.deployment = deployment
        self._display = display
        self.used_properties = used_properties

    @property
    def display(self) -> str:
        if callable(self._display):
            self._display = self._display()
        return self._display
