"""Groups of components and the expansion of policies to resources and pairs, exactly as the Heat
policy extension's "Groups, Policies, and Relationships" section defines it.

* A monadic policy applied to a group applies to every *relevant* resource the group covers
  (recursively through nested groups).
* A symmetric dyadic policy applied to a group applies to every distinct unordered pair of the
  group's *direct* members; a pair of members that are groups stands for the pair of groups.
  So for GP = {GL, GR} with GL = {R1, R2} and GR = {R3, R4}, the pairs are R1-R3, R1-R4, R2-R3,
  R2-R4: R1 and R2 are *not* paired by a policy on GP.
* A dyadic policy applied to a pair (A, B) applies to every (X, Y) with X = A (a relevant
  resource) or a resource covered by A (a group), likewise Y for B. A resource is never paired
  with itself.

Relevance is by component type: a policy may list ``types``; a component without a listed type
is then not relevant to it (a policy with no ``types`` is relevant to every component).
"""

from __future__ import annotations

from dataclasses import dataclass

from cddlm.errors import BadArgument
from cddlm.placement.values import check_keys, check_name, string_list


@dataclass
class Groups:
    members: dict[str, list[str]]  # group name -> member names (components or groups)
    component_index: dict[str, int]
    component_type: list[str | None]

    def is_group(self, name: str) -> bool:
        return name in self.members

    def covers(self, name: str, types: frozenset[str] | None = None) -> list[int]:
        """Relevant components covered by a component or group name, sorted, no repeats."""
        out: set[int] = set()
        stack = [name]
        while stack:
            n = stack.pop()
            if n in self.members:
                stack.extend(self.members[n])
            elif types is None or self.component_type[self.component_index[n]] in types:
                out.add(self.component_index[n])
        return sorted(out)

    def group_parts(self, group: str, types: frozenset[str] | None) -> list[list[int]]:
        """The covered components of each direct member of a group (the pair structure)."""
        return [part for part in (self.covers(m, types) for m in self.members[group]) if part]


def pairs_of_parts(parts: list[list[int]]) -> list[tuple[int, int]]:
    """Unordered pairs (a < b) across different parts, never a resource with itself."""
    out: set[tuple[int, int]] = set()
    for i in range(len(parts)):
        for j in range(i + 1, len(parts)):
            for a in parts[i]:
                for b in parts[j]:
                    if a != b:
                        out.add((a, b) if a < b else (b, a))
    return sorted(out)


def load_groups(raw, component_index: dict[str, int],
                component_type: list[str | None]) -> Groups:
    if not isinstance(raw, list):
        raise BadArgument("request: groups must be a list of {name, members}")
    members: dict[str, list[str]] = {}
    for i, g in enumerate(raw):
        if not isinstance(g, dict):
            raise BadArgument("request: group %d must be a mapping {name, members}" % (i + 1))
        name = check_name(g.get("name"), "request: group %d: name" % (i + 1))
        check_keys(g, ("name", "members"), "request: group %s" % name)
        if name in members or name in component_index:
            raise BadArgument("request: duplicate name %r (groups and components share one "
                              "namespace)" % name)
        members[name] = string_list(g.get("members"), "request: group %s: members" % name)
        if not members[name]:
            raise BadArgument("request: group %s has no members" % name)
    for name, ms in members.items():
        for m in ms:
            if m not in members and m not in component_index:
                raise BadArgument("request: group %s: unknown member %r (not a component or a "
                                  "group)" % (name, m))
        if len(set(ms)) != len(ms):
            raise BadArgument("request: group %s lists a member twice" % name)
    _check_acyclic(members)
    return Groups(members, component_index, component_type)


def _check_acyclic(members: dict[str, list[str]]) -> None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    for start in members:
        if state.get(start):
            continue
        stack = [(start, iter(members[start]))]
        state[start] = 1
        while stack:
            name, it = stack[-1]
            child = next((m for m in it if m in members), None)
            if child is None:
                state[name] = 2
                stack.pop()
            elif state.get(child) == 1:
                raise BadArgument("request: group %s contains itself (through %s)" % (child, name))
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(members[child])))
