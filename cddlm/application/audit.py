"""The audit log: who did what to which application, when, and from where.

Each change is recorded twice: a row of the ``audit`` table, written in the transaction of the
change itself (so a change is never without its record, nor a record without its change), and
a log line on the ``cddlm.audit`` logger. Reads are scoped like everything else: a user sees
the entries about their own applications and their own actions; an administrator every one.
"""

from __future__ import annotations

import logging

from sqlalchemy import insert, or_, select
from sqlalchemy.engine import Connection

from cddlm.application.store import send
from cddlm.application.tables import audit
from cddlm.application.tenancy import Principal

log = logging.getLogger("cddlm.audit")
MAX_DETAIL = 1024
_INSERT = insert(audit).inline()     # built once; no RETURNING of its id: not waited for


def record(conn: Connection, principal: Principal, action: str, now: float, *,
           app_id: str | None = None, app_owner: str | None = None,
           detail: str | None = None) -> None:
    """In the caller's transaction, as its last write."""
    detail = detail[:MAX_DETAIL] if detail else None
    send(conn, _INSERT, {"at": now, "principal": principal.name,
                           "address": principal.address or None, "action": action,
                           "app_id": app_id, "app_owner": app_owner, "detail": detail})
    log.info("%s from %s: %s%s%s", principal.name, principal.address or "-", action,
             " " + app_id if app_id else "", " (%s)" % detail if detail else "",
             extra={"audit": {"action": action, "principal": principal.name,
                              "address": principal.address or None, "application": app_id,
                              "detail": detail}})


def entries(conn: Connection, principal: Principal, app_id: str | None = None,
            limit: int = 100) -> list[dict]:
    """The newest entries first, as ``principal`` may see them."""
    a = audit.c
    query = select(a.id, a.at, a.principal, a.address, a.action, a.app_id, a.detail)
    if not principal.admin:
        query = query.where(or_(a.app_owner == principal.name, a.principal == principal.name))
    if app_id is not None:
        query = query.where(a.app_id == app_id)
    return [{"id": r.id, "at": r.at, "principal": r.principal, "address": r.address,
             "action": r.action, "app": r.app_id, "detail": r.detail}
            for r in conn.execute(query.order_by(a.id.desc()).limit(limit))]
