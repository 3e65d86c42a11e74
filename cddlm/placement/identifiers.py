"""Nova scoped server-group policy strings and per-tenant obfuscated identifiers.

A policy string is ``TYPE[:SCOPE[:IDENTIFIER]]`` with TYPE one of ``affinity``,
``anti-affinity``, ``soft-affinity``, ``soft-anti-affinity``; SCOPE defaults to ``host`` and
IDENTIFIER (an aggregate of that scope, as the tenant names it) to none.

Obfuscation (the spec's two passes of RFC 4122 version 5 UUIDs)::

    tenant_namespace = uuid5(scope_namespace, tenant_id)
    obfuscated_id    = uuid5(tenant_namespace, aggregate_id)

so each tenant sees its own stable surrogate for each aggregate, and no tenant can tell which
aggregate another tenant's identifier names.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from cddlm.errors import BadArgument

NOVA_TYPES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")


@dataclass(frozen=True)
class PolicyString:
    type: str
    scope: str = "host"
    identifier: str | None = None

    def __str__(self) -> str:
        parts = [self.type, self.scope] + ([self.identifier] if self.identifier else [])
        return ":".join(parts)


def parse_policy_string(text: str) -> PolicyString:
    """``"affinity:zone:zone_A"`` -> PolicyString("affinity", "zone", "zone_A")."""
    if not isinstance(text, str):
        raise BadArgument("policy string must be text, got %r" % (text,))
    parts = text.split(":", 2)
    if parts[0] not in NOVA_TYPES:
        raise BadArgument("policy %r: type must be one of %s" % (text, ", ".join(NOVA_TYPES)))
    if any(p == "" for p in parts[1:]):
        raise BadArgument("policy %r: empty scope or identifier" % text)
    scope = parts[1] if len(parts) > 1 else "host"
    return PolicyString(parts[0], scope, parts[2] if len(parts) > 2 else None)


def tenant_namespace(scope_namespace: uuid.UUID, tenant_id: str) -> uuid.UUID:
    return uuid.uuid5(scope_namespace, str(tenant_id))


def obfuscate(scope_namespace: uuid.UUID, tenant_id: str, aggregate_id: str) -> str:
    """The identifier tenant ``tenant_id`` sees for ``aggregate_id`` in a scope."""
    return str(uuid.uuid5(tenant_namespace(scope_namespace, tenant_id), str(aggregate_id)))


def surrogate(salt: str, scope: str, aggregate_id: str) -> str:
    """An identifier for a scope that allows none: consistent within one answer (same salt), and
    unrelated to the real name. The caller picks a fresh salt per answer for ephemeral ones."""
    return str(uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_OID, "cddlm-audit:" + salt),
                          scope + ":" + str(aggregate_id)))
