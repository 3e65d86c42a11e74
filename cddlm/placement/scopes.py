"""Named scopes (Nova scoped server-group policies): each scope partitions hosts into aggregates;
a host is in at most one aggregate per scope. ``host`` is the implicit scope where each host is
its own aggregate.

Plain form ``{scope: {aggregate: [hosts]}}``; extended form for a scope whose identifiers tenants
may (not) target or see obfuscated: ``{scope: {aggregates: {aggregate: [hosts]},
allow_identifiers: bool, obfuscate_identifiers: bool, namespace: UUID}}``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from cddlm.errors import BadArgument
from cddlm.placement.values import boolean, check_keys, check_name, string_list

EXTENDED_KEYS = ("aggregates", "allow_identifiers", "obfuscate_identifiers", "namespace")


@dataclass
class Scope:
    name: str
    aggregates: dict[str, list[str]]
    aggregate_of: dict[str, str] = field(default_factory=dict)  # host -> aggregate
    allow_identifiers: bool = True
    obfuscate_identifiers: bool = False
    namespace: uuid.UUID | None = None


def load_scopes(raw, host_names: set[str], level_names: set[str]) -> dict[str, Scope]:
    if not isinstance(raw, dict):
        raise BadArgument("datacenter: scopes must be a mapping {scope: {aggregate: [hosts]}}")
    scopes = {}
    for name, body in raw.items():
        check_name(name, "datacenter: scopes: scope name")
        where = "datacenter: scope %s" % name
        if name == "host":
            raise BadArgument("%s: 'host' is the implicit scope and cannot be redefined" % where)
        if name in level_names:
            raise BadArgument("%s: the name is already a location level" % where)
        if not isinstance(body, dict):
            raise BadArgument("%s: expected a mapping {aggregate: [hosts]}" % where)
        scope = Scope(name, {})
        if isinstance(body.get("aggregates"), dict):
            check_keys(body, EXTENDED_KEYS, where)
            scope.allow_identifiers = boolean(body.get("allow_identifiers", True),
                                              where + ": allow_identifiers")
            scope.obfuscate_identifiers = boolean(body.get("obfuscate_identifiers", False),
                                                  where + ": obfuscate_identifiers")
            if scope.obfuscate_identifiers:
                try:
                    scope.namespace = uuid.UUID(str(body.get("namespace")))
                except ValueError:
                    raise BadArgument("%s: obfuscate_identifiers needs a namespace UUID, got %r"
                                      % (where, body.get("namespace"))) from None
            body = body["aggregates"]
        for aggregate, hosts in body.items():
            check_name(aggregate, where + ": aggregate name")
            for host in string_list(hosts, "%s: aggregate %s" % (where, aggregate)):
                if host not in host_names:
                    raise BadArgument("%s: aggregate %s names %r, which is not a host"
                                      % (where, aggregate, host))
                if host in scope.aggregate_of:
                    raise BadArgument("%s: host %s is in two aggregates (%s and %s); a host is "
                                      "in at most one aggregate per scope"
                                      % (where, host, scope.aggregate_of[host], aggregate))
                scope.aggregate_of[host] = aggregate
            scope.aggregates[aggregate] = list(hosts)
        scopes[name] = scope
    return scopes
