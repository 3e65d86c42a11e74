"""Work items: queued in the same transaction as the intent that causes them, claimed by
workers under a lease (engine id + expiry), deleted when done.

A claim skips items whose component already has a leased item, so one component never has
two actions in flight; an expired lease makes an item claimable again (its owner died or
hung). On PostgreSQL the claim uses ``FOR UPDATE SKIP LOCKED`` so portals sharing the store
never block each other; on SQLite the write transaction (``BEGIN IMMEDIATE``) serialises.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, case, delete, func, insert, or_, select, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import aliased

from cddlm.application.store import not_waited, rows, send
from cddlm.application.tables import engines, work


_QUEUED = select(work.c.path, work.c.action).where(work.c.app_id == bindparam("app_id"))
_QUEUED_GEN = _QUEUED.where(work.c.generation == bindparam("generation"))
_INSERT = insert(work).inline()     # no RETURNING of the ids: not waited for
_SUPERSEDE = not_waited(delete(work).where(work.c.app_id == bindparam("app_id"),
                                           work.c.generation < bindparam("generation"),
                                           work.c.owner.is_(None)))
_FINISH = delete(work).where(work.c.id == bindparam("item"))

@dataclass(frozen=True)
class Item:
    id: int
    app_id: str
    path: str
    action: str
    generation: int
    attempts: int


def add(conn: Connection, app_id: str, items: list[tuple[str, str]], generation: int,
        now: float, have: set[tuple[str, str]] | None = None) -> int:
    """Queue (path, action) items unless an identical one is already queued (``have``: the
    queued items of the generation, or more, when the caller has read them)."""
    if not items:
        return 0
    if have is None:
        have = {(p, a) for p, a in conn.execute(_QUEUED_GEN, {"app_id": app_id,
                                                               "generation": generation})}
    rows = [dict(app_id=app_id, path=p, action=a, generation=generation, attempts=0,
                 not_before=now, created=now) for p, a in items if (p, a) not in have]
    if rows:
        conn.execute(_INSERT, rows)
    return len(rows)


def queued(conn: Connection, app_id: str) -> set[tuple[str, str]]:
    return {(p, a) for p, a in rows(conn, _QUEUED, {"app_id": app_id})}


_PENDING = select(work.c.id).where(work.c.app_id == bindparam("app_id"),
                                   work.c.action == bindparam("action")).limit(1)


def pending(conn: Connection, app_id: str, action: str) -> bool:
    """Whether an item of this application and action is still queued, held by anyone."""
    return conn.execute(_PENDING, {"app_id": app_id, "action": action}).first() is not None


def supersede(conn: Connection, app_id: str, generation: int) -> None:
    """A newer intent: drop older items nobody holds (held ones stop at their next step)."""
    send(conn, _SUPERSEDE, {"app_id": app_id, "generation": generation})


# when each item may next be claimed: an unclaimed one when due, a leased one when due and
# its lease has run out
_READY_AT = case((work.c.owner.is_(None), work.c.not_before),
                 else_=case((work.c.lease_expires > work.c.not_before, work.c.lease_expires),
                            else_=work.c.not_before))
_NEXT_READY = select(func.min(_READY_AT))


def next_ready(conn: Connection) -> float | None:
    """When the earliest item may be claimed (None: the queue is empty): one read, made by
    idle workers before they lock anything and to know how long they may sleep."""
    return conn.execute(_NEXT_READY).scalar()


def _claimable(now: float, app_id: str | None = None):
    """Items due and free (of ``app_id`` only, if given) whose component has no item held
    (leased, the lease running). The components held are one set, looked up per item (a
    hashed subquery), not a join with every held item: PostgreSQL, planning that join with a
    queue's statistics from before a burst, compared each of a thousand items queued with
    each of a thousand held (0.5-0.7 s per claim while a portal started 1,000 processes)."""
    other = aliased(work)
    held = select(other.c.app_id, other.c.path).where(other.c.owner.is_not(None),
                                                       other.c.lease_expires >= now)
    query = select(work.c.id, work.c.app_id, work.c.path, work.c.action, work.c.generation,
                   work.c.attempts).where(work.c.not_before <= now,
                                          or_(work.c.owner.is_(None), work.c.lease_expires < now))
    if app_id is None:
        query = query.where(~tuple_(work.c.app_id, work.c.path).in_(held))
    else:
        query = query.where(work.c.app_id == app_id, ~work.c.path.in_(
            held.with_only_columns(other.c.path).where(other.c.app_id == app_id)))
    return query.order_by(work.c.id)


def _take(conn: Connection, query, owner: str, now: float, lease: float,
          postgres: bool) -> list[Item]:
    if postgres:
        query = query.with_for_update(skip_locked=True, of=work)
    items = []
    seen: set[tuple[str, str]] = set()
    for r in conn.execute(query).all():
        if (r.app_id, r.path) in seen:  # two queued items for one component: one at a time
            continue
        seen.add((r.app_id, r.path))
        items.append(Item(r.id, r.app_id, r.path, r.action, r.generation, r.attempts + 1))
    if items:
        conn.execute(update(work).where(work.c.id.in_([i.id for i in items]))
                     .values(owner=owner, lease_expires=now + lease, attempts=work.c.attempts + 1))
    return items


def claim(conn: Connection, owner: str, now: float, lease: float, limit: int,
          postgres: bool) -> list[Item]:
    return _take(conn, _claimable(now).limit(limit), owner, now, lease, postgres)


_WAITING = select(func.count()).select_from(work).where(
    work.c.app_id == bindparam("app_id"), work.c.action == bindparam("action"),
    work.c.generation == bindparam("generation"), work.c.owner.is_(None))


def claim_batch(conn: Connection, owner: str, now: float, lease: float, limit: int,
                postgres: bool, share: int = 1, most: int = 5000) -> list[Item]:
    """The first claimable item and more of its application, action and generation: a batch
    the engine enacts together and records in few transactions (one reconcile for many
    components, not one each). A batch takes ``limit`` items, or a ``share``-th of those
    waiting when that is more (up to ``most``): an application of N components is done in
    about ``share`` batches whatever N, so its reconciles, each O(N), stay few."""
    first = claim(conn, owner, now, lease, 1, postgres)
    if not first or limit <= 1:
        return first
    head = first[0]
    waiting = conn.execute(_WAITING, {"app_id": head.app_id, "action": head.action,
                                      "generation": head.generation}).scalar() or 0
    limit = min(most, max(limit, -(-waiting // max(1, share))))
    more = _claimable(now, head.app_id).where(work.c.action == head.action,
                                               work.c.generation == head.generation).limit(limit - 1)
    # (the head, leased now, is not claimable again; no other item has its path, action and
    # generation)
    return first + _take(conn, more, owner, now, lease, postgres)


def _all_held(conn: Connection, statement, item_ids: list[int], owner: str) -> bool:
    """``statement`` (an UPDATE or DELETE of work) on those of ``item_ids`` that ``owner``
    holds; whether that was every one."""
    if not item_ids:
        return True
    return conn.execute(statement.where(work.c.id.in_(bindparam("ids", expanding=True)),
                                        work.c.owner == owner),
                        {"ids": list(item_ids)}).rowcount == len(item_ids)


def extend_many(conn: Connection, item_ids: list[int], owner: str, until: float) -> bool:
    """Renew the leases of a batch; False when one was lost (then the worker must stop)."""
    return _all_held(conn, update(work).values(lease_expires=until), item_ids, owner)


def finish(conn: Connection, item_id: int) -> None:
    conn.execute(_FINISH, {"item": item_id})


def finish_many(conn: Connection, item_ids: list[int]) -> None:
    if item_ids:
        conn.execute(delete(work).where(work.c.id.in_(bindparam("ids", expanding=True))),
                     {"ids": list(item_ids)})


def finish_held(conn: Connection, item_ids: list[int], owner: str) -> bool:
    """Remove items whose outcomes are being recorded, if every one is still ``owner``'s;
    False when one was lost (then the transaction must not commit)."""
    return _all_held(conn, delete(work), item_ids, owner)


def retry_later(conn: Connection, item_ids: int | list[int], owner: str, when: float) -> None:
    """Hand back items held by ``owner`` (one id, or many in one statement), due at ``when``."""
    ids = [item_ids] if isinstance(item_ids, int) else list(item_ids)
    for i in range(0, len(ids), 500):       # (bound parameters per statement)
        conn.execute(update(work).where(work.c.id.in_(ids[i:i + 500]), work.c.owner == owner)
                     .values(owner=None, lease_expires=None, not_before=when))


def depth(conn: Connection) -> int:
    return conn.execute(select(func.count()).select_from(work)).scalar() or 0


# -- engines sharing the store ----------------------------------------------------------------
def register_engine(conn: Connection, engine_id: str, url: str | None, now: float) -> None:
    conn.execute(insert(engines).values(id=engine_id, url=url, started=now, heartbeat=now))


def live_engines(conn: Connection, now: float, stale_after: float) -> list[tuple[str, str, float, float]]:
    """(id, url, started, heartbeat) of every portal sharing the store that has beaten its
    heart within ``stale_after`` seconds and says where it answers, one row per URL (the
    newest engine of a restarted portal), oldest portal first."""
    rows = conn.execute(select(engines.c.id, engines.c.url, engines.c.started, engines.c.heartbeat)
                        .where(engines.c.heartbeat >= now - stale_after, engines.c.url.is_not(None))
                        .order_by(engines.c.started))
    newest: dict[str, tuple] = {}
    for row in rows:
        newest[row.url] = tuple(row)
    return sorted(newest.values(), key=lambda r: (r[2], r[1]))


def heartbeat(conn: Connection, engine_id: str, now: float) -> None:
    conn.execute(update(engines).where(engines.c.id == engine_id).values(heartbeat=now))


def release_dead(conn: Connection, now: float, stale_after: float, alone: bool,
                 me: str) -> int:
    """Free the leases of engines that stopped heart-beating (all others' when ``alone``) and
    unregister them (notification leases are freed by ``notify.outbox.release_orphaned``)."""
    if alone:
        dead = [r[0] for r in conn.execute(select(engines.c.id).where(engines.c.id != me))]
    else:
        dead = [r[0] for r in conn.execute(select(engines.c.id).where(
            engines.c.heartbeat < now - stale_after, engines.c.id != me))]
    if not dead:
        return 0
    n = conn.execute(update(work).where(work.c.owner.in_(dead))
                     .values(owner=None, lease_expires=None)).rowcount
    conn.execute(delete(engines).where(engines.c.id.in_(dead)))
    return n


def unregister_engine(conn: Connection, engine_id: str) -> None:
    conn.execute(update(work).where(work.c.owner == engine_id).values(owner=None,
                                                                       lease_expires=None))
    conn.execute(delete(engines).where(engines.c.id == engine_id))
