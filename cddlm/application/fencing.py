"""Host-side fencing (``cddlm portal serve --agent --fence-seconds S``), SmartFrog's
liveness-parent rule: a host portal terminates a sub-application delegated to it by a front
portal (its client token is a delegation's, ``remote.token_for``) when that front portal has
not pinged it for ``S`` seconds, so a partitioned host stops its part instead of running it
on alone. Without the option (the default) a host keeps running what it was given, as a
kubelet or a Nomad client does; the front portal terminates it when it can reach it again.

A front portal pings each running sub-application every liveness interval (its pull), so
``S`` should be several of those plus the front's lease (docs/multihost.md).
"""

from __future__ import annotations

from sqlalchemy import delete, insert, select, update

from cddlm.application import lifecycle
from cddlm.application.store import Store
from cddlm.application.tables import applications, renewals

DELEGATED_PREFIX = "cddlm-"      # the client tokens front portals give delegations


def delegated(client_token: str | None) -> bool:
    return bool(client_token) and client_token.startswith(DELEGATED_PREFIX)


def renew(store: Store, app_id: str, now: float) -> None:
    """A front portal pinged its sub-application: its lease runs from now."""
    with store.write() as conn:
        if not conn.execute(update(renewals).where(renewals.c.app_id == app_id)
                            .values(renewed=now)).rowcount:
            conn.execute(insert(renewals).values(app_id=app_id, renewed=now))


def overdue(store: Store, seconds: float, now: float) -> list[str]:
    """Delegated sub-applications not terminated (nor terminating) whose front portal has not
    renewed them for ``seconds`` (counted from their creation when never renewed)."""
    with store.read() as conn:
        rows = conn.execute(
            select(applications.c.id, applications.c.created, renewals.c.renewed)
            .select_from(applications.outerjoin(renewals, renewals.c.app_id == applications.c.id))
            .where(applications.c.client_token.like(DELEGATED_PREFIX + "%"),
                   applications.c.state != lifecycle.TERMINATED,
                   applications.c.desired != lifecycle.TERMINATED)).all()
    return [r.id for r in rows if now - (r.renewed or r.created) > seconds]


def holds_delegated(store: Store) -> bool:
    """Whether this (host) portal runs a sub-application a front portal delegated to it."""
    with store.single() as conn:
        return conn.execute(
            select(applications.c.id).where(applications.c.client_token.like(DELEGATED_PREFIX + "%"),
                                            applications.c.state != lifecycle.TERMINATED)
            .limit(1)).first() is not None


def forget(store: Store) -> None:
    """Drop the renewals of applications that are gone."""
    with store.write() as conn:
        conn.execute(delete(renewals).where(renewals.c.app_id.not_in(select(applications.c.id))))
