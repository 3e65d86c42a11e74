"""Who may see and do what: the one place where a principal becomes a filter or a refusal.

Every application records its owner. A user sees, looks up, rebinds, subscribes to and operates
on their own applications only; an administrator on every one. Someone else's application
answers exactly as one that does not exist (``NoSuchApplication`` / ``ResourceUnknown`` with
the same text), so nobody learns what others run. The use cases call ``scoped`` (a query over
``applications``) or ``visible`` (a row already read) and never test ownership themselves.

Quotas bound what a user (not an administrator) may hold (``Settings.quotas``); exceeding one
is ``QuotaExceeded`` and changes nothing: the counts are read in the write transaction that
would add to them.

``run_as`` says which OS account a principal's components run as (``--run-as``, where
``{user}`` stands for the owner's name, or the account the users file names for that user).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from sqlalchemy import false, func, or_, select

from cddlm.application.tables import LOCAL_OWNER, applications, subscriptions
from cddlm.config import Quotas
from cddlm.errors import NotAuthorized, QuotaExceeded


@dataclass(frozen=True)
class Principal:
    """Who asks: a user of the users file (``admin`` for administrators), or the implicit
    administrator of local mode. ``address`` is where the request came from (for the audit)."""

    name: str
    admin: bool = False
    address: str = field(default="", compare=False)

    def at(self, address: str) -> "Principal":
        return Principal(self.name, self.admin, address)


LOCAL_ADMIN = Principal(LOCAL_OWNER, admin=True)
SCHEDULER = Principal("portal", admin=True)       # the portal's own scheduled actions


def scoped(query, principal: Principal):
    """``query`` over ``applications`` limited to what ``principal`` may see."""
    if principal.admin:
        return query
    if not principal.name:
        return query.where(false())
    return query.where(applications.c.owner == principal.name)


def visible(owner: str | None, principal: Principal) -> bool:
    """Whether ``principal`` may see an application (or subscription) of ``owner``."""
    return principal.admin or (bool(principal.name) and owner == principal.name)


def require_admin(principal: Principal, what: str) -> None:
    if not principal.admin:
        raise NotAuthorized("%s is for administrators; %s is not one" % (what, principal.name))


def owner_scope(principal: Principal) -> str | None:
    """Whose applications a principal may see in a listing or hear of through a subscription
    to the portal's ApplicationCreated topic (None: everyone's, for an administrator)."""
    return None if principal.admin else principal.name


# -- quotas ---------------------------------------------------------------------------------------
def _refuse(quota: str, limit: int, what: str) -> QuotaExceeded:
    return QuotaExceeded(quota, limit, "quota exceeded: %s (the limit is %d %s; ask an "
                         "administrator to raise it)" % (what, limit, quota))


def check_applications(conn, principal: Principal, quotas: Quotas) -> None:
    """Before a create, in its write transaction."""
    if principal.admin:
        return
    if conn.dialect.name == "postgresql":
        # READ COMMITTED lets two portals (or threads) count the same rows and both insert: the
        # owner's creates queue on a lock that ends with the transaction (SQLite writes are
        # serial already)
        conn.execute(select(func.pg_advisory_xact_lock(4242100, func.hashtext(principal.name))))
    held = conn.execute(select(func.count()).select_from(applications)
                        .where(applications.c.owner == principal.name)).scalar() or 0
    if held >= quotas.applications:
        raise _refuse("applications", quotas.applications,
                      "%s holds %d applications (destroy terminated ones to free them)"
                      % (principal.name, held))


def check_components(owner_is_admin: bool, count: int, quotas: Quotas) -> None:
    if not owner_is_admin and count > quotas.components:
        raise _refuse("components", quotas.components,
                      "the descriptor has %d components" % count)


def check_descriptor(owner_is_admin: bool, size: int, quotas: Quotas) -> None:
    if not owner_is_admin and size > quotas.descriptor_bytes:
        raise _refuse("descriptor_bytes", quotas.descriptor_bytes,
                      "the descriptor is %d bytes" % size)


def check_subscriptions(conn, principal: Principal, quotas: Quotas, now: float) -> None:
    """Before a subscription is added, in its write transaction."""
    if principal.admin:
        return
    s = subscriptions.c
    held = conn.execute(select(func.count()).select_from(subscriptions).where(
        s.subscriber == principal.name, s.status != "failed",
        or_(s.termination_time.is_(None), s.termination_time > now))).scalar() or 0
    if held >= quotas.subscriptions:
        raise _refuse("subscriptions", quotas.subscriptions,
                      "%s holds %d subscriptions (unsubscribe some)" % (principal.name, held))


# -- the OS accounts components run as ------------------------------------------------------------
class Accounts:
    """owner -> the OS account its components run as (None: the portal's own)."""

    def __init__(self, default: str | None, per_user: Callable[[str], str | None] = lambda _: None):
        self.default = default
        self.per_user = per_user

    def __call__(self, owner: str | None) -> str | None:
        account = self.per_user(owner) if owner else None
        account = account or self.default
        if account and "{user}" in account:
            account = account.replace("{user}", owner or LOCAL_OWNER)
        return account or None
