"""Queries over the store, shared by the use cases and the enactment engine.

Functions take an open connection from ``Store.read()`` / ``Store.write()`` so callers decide
the transaction: a state change, its history row and its events always commit together.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, func, insert, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from cddlm import ns
from cddlm.application import lifecycle
from cddlm.application.store import first_mapping, not_waited, rows, send
from cddlm.application.tables import (LOCAL_OWNER, applications, components, events, history, hosts,
                                     nonces, views, work)

if TYPE_CHECKING:   # annotations only: the store is passed in, never made here
    from cddlm.application.store import Store

LIFECYCLE_TOPIC = ns.LIFECYCLE_TOPIC
CREATED_TOPIC = ns.CREATED_TOPIC
PORTAL_PRODUCER = ns.PORTAL_PRODUCER


class _Json:
    """A JSON column decoded on first use: the hot path (one property of one application)
    should not pay for decoding the component tree."""

    def __init__(self, default):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if self.name in obj.__dict__:   # decoded already, or set since (``record_state``)
            return obj.__dict__[self.name]
        if obj.light and self.name in HEAVY:
            raise LookupError("the application was read without its %s (light=True)"
                              % self.name)
        raw = obj._raw.get(self.name)
        value = json.loads(raw) if isinstance(raw, str) and raw else (
            raw if raw is not None else (self.default() if callable(self.default) else self.default))
        obj.__dict__[self.name] = value
        return value

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value


class App:
    """An application row. JSON columns decode lazily."""

    termination_info = _Json(None)
    properties = _Json(dict)
    options = _Json(list)
    deployment = _Json(None)
    placement = _Json(None)
    SIMPLE = ("id", "name", "hostname", "state", "desired", "generation", "state_info", "created",
              "started", "terminated", "termination_time", "language", "descriptor_digest",
              "client_token", "request_digest", "init_token", "event_seq", "owner",
              "view_termination_time")   # the last: only when read through a view

    def __init__(self, mapping: dict, light: bool = False):
        self._raw = mapping
        self.light = light      # read without the HEAVY columns (``light=True``)
        for key in self.SIMPLE:
            self.__dict__[key] = mapping.get(key)

    @classmethod
    def from_row(cls, row: Any) -> "App":
        return cls(row._mapping)


@dataclass
class View:
    id: str
    app_id: str
    portal: str
    termination_time: float | None = None    # WS-RL: the view (not the application) ends then


@dataclass
class Component:
    app_id: str
    path: str
    type: str
    parent: str | None
    position: int
    optional: bool
    oneshot: bool
    host: str | None
    provider: str | None
    desired: str
    observed: str
    generation: int
    pid: int | None = None
    pid_start: str | None = None
    workdir: str | None = None
    exit_code: int | None = None
    exit_signal: str | None = None
    restarts: int = 0
    runtime: dict = field(default_factory=dict)
    info: str | None = None
    updated: float = 0.0

    @classmethod
    def from_row(cls, row: Any) -> "Component":
        m = dict(row._mapping)
        m["runtime"] = json.loads(m["runtime"]) if m.get("runtime") else {}
        return cls(**m)


APP_COLUMNS = [c for c in applications.c if c.name != "descriptor"]
# what grows with the application's size (its component tree, placement, properties)
HEAVY = frozenset({"deployment", "placement", "properties", "options"})
LIGHT_COLUMNS = [c for c in APP_COLUMNS if c.name not in HEAVY]

# Statements are built once and executed with parameter dicts: SQLAlchemy compiles each shape
# once, and a request pays only for binding (building statements per call cost more than
# SQLite's own work).
_SELECT_APP = select(*APP_COLUMNS)
_GET_APP = _SELECT_APP.where(applications.c.id == bindparam("app_id"))
_LOCK_APP = _GET_APP.with_for_update()
_GET_APP_LIGHT = select(*LIGHT_COLUMNS).where(applications.c.id == bindparam("app_id"))
_LOCK_APP_LIGHT = _GET_APP_LIGHT.with_for_update()
# the live application of that name, else the newest terminated one
_BY_NAME_ORDER = ((applications.c.state == lifecycle.TERMINATED).asc(), applications.c.created.desc())
_APP_BY_NAME = _SELECT_APP.where(applications.c.name == bindparam("name")).order_by(
    *_BY_NAME_ORDER).limit(1)
_OWNED_APP_BY_NAME = _SELECT_APP.where(applications.c.name == bindparam("name"),
                                       applications.c.owner == bindparam("owner")).order_by(
    *_BY_NAME_ORDER).limit(1)
_APP_BY_TOKEN = _SELECT_APP.where(applications.c.client_token == bindparam("token"),
                                  applications.c.owner == bindparam("owner"))
_INSERT_APP = insert(applications)
_UPDATE_APP = not_waited(update(applications).where(applications.c.id == bindparam("_app_id")))
_INSERT_VIEW = insert(views)
_VIEW_COLUMNS = (views.c.id, views.c.app_id, views.c.portal, views.c.termination_time)
_LIVE_VIEW = or_(views.c.termination_time.is_(None), views.c.termination_time > bindparam("now"))
_GET_VIEW = select(*_VIEW_COLUMNS).where(views.c.id == bindparam("view"))
_VIEW_FOR = (select(*_VIEW_COLUMNS)
             .where(views.c.app_id == bindparam("app_id"), views.c.portal == bindparam("portal"),
                    _LIVE_VIEW)
             .order_by(views.c.created).limit(1))
_INSERT_HISTORY = insert(history)
_INSERT_EVENT = insert(events).inline()     # no RETURNING of its id: not waited for
_GET_COMPONENTS = select(components).where(components.c.app_id == bindparam("app_id")) \
    .order_by(components.c.path)
_DELETE_APP = [not_waited(delete(t).where(t.c.app_id == bindparam("app_id")))
               for t in (work, components, history, views)] + \
              [not_waited(delete(applications).where(applications.c.id == bindparam("app_id")))]
_UPDATE_COMPONENT = update(components).where(components.c.app_id == bindparam("_app_id"),
                                             components.c.path == bindparam("_path"))


def new_id() -> str:
    return "urn:uuid:" + str(uuid.uuid4())


# -- applications ----------------------------------------------------------------------------
def _row(source: Connection | Store, statement: Any, params: dict) -> Any:
    """The first row of a prebuilt statement as a mapping (None: no row): on a connection, in
    its transaction; given the store, through ``Store.first`` (the driver directly, no
    transaction: the hot reads, where SQLAlchemy's work per execution cost more than the
    database's)."""
    if isinstance(source, Connection):
        row = source.execute(statement, params).first()
        return row._mapping if row is not None else None
    return source.first(statement, params)


def get_app(conn: Connection | Store, app_id: str, *, light: bool = False) -> App | None:
    """``light``: without the ``HEAVY`` columns."""
    row = _row(conn, _GET_APP_LIGHT if light else _GET_APP, {"app_id": app_id})
    return App(row, light) if row is not None else None


def _by_view(columns: list) -> Any:
    return (select(*columns, views.c.app_id.label("view_app"),
                   views.c.termination_time.label("view_termination_time"))
            .select_from(views.join(applications, applications.c.id == views.c.app_id))
            .where(views.c.id == bindparam("view"), _LIVE_VIEW))


_APP_BY_VIEW = _by_view(APP_COLUMNS)
_APP_BY_VIEW_LIGHT = _by_view(LIGHT_COLUMNS)


def lock_app(conn: Connection, app_id: str, *, light: bool = False) -> App | None:
    """Read an application and lock its row until the transaction ends. Every write that
    touches an application's components or work takes this lock first, so writers on
    PostgreSQL always lock in the same order (application, work, components) and never
    deadlock; on SQLite writers are serialised anyway. ``light``: without the ``HEAVY``
    columns (a record of outcomes needs its state, not its component tree of megabytes)."""
    row = first_mapping(conn, _LOCK_APP_LIGHT if light else _LOCK_APP, {"app_id": app_id})
    return App(row, light) if row is not None else None


def app_by_view(conn: Connection | Store, view_id: str, now: float, *,
                light: bool = False) -> App | None:
    """The application a live view names (one indexed join; the hot path of every app
    request); ``view_termination_time`` on it is the view's own termination time. ``light``:
    without the ``HEAVY`` columns (a state read need not fetch a component tree)."""
    params = {"view": view_id, "now": now}
    if light and not isinstance(conn, Connection):
        # the state read of every client's poll: answered from the row held while unchanged
        row = conn.first_cached(("app_by_view", view_id), _APP_BY_VIEW_LIGHT, params,
                                lambda held: _live(held["view_termination_time"], now))
    else:
        row = _row(conn, _APP_BY_VIEW_LIGHT if light else _APP_BY_VIEW, params)
    return App(row, light) if row is not None else None


def _live(termination_time: float | None, now: float) -> bool:
    """``_LIVE_VIEW`` of a view's termination time, in Python."""
    return termination_time is None or termination_time > now


def app_by_name(conn: Connection | Store, name: str, owner: str | None = None) -> App | None:
    """The live application of that name, else the newest terminated one (of ``owner`` only,
    when given)."""
    if owner is None:
        row = _row(conn, _APP_BY_NAME, {"name": name})
    elif isinstance(conn, Connection):
        row = _row(conn, _OWNED_APP_BY_NAME, {"name": name, "owner": owner})
    else:
        # lookup: a live application is the answer until its row changes (which the store
        # hears of), since its owner can make no other of that name while it lives; a
        # terminated one is read again (a new one may have been made: an insert is no notice)
        row = conn.first_cached(("app_by_name", name, owner), _OWNED_APP_BY_NAME,
                                {"name": name, "owner": owner},
                                lambda held: held["state"] != lifecycle.TERMINATED)
    return App(row) if row is not None else None


def app_by_token(conn: Connection, token: str, owner: str = LOCAL_OWNER) -> App | None:
    """The application ``owner`` created with this client token (tokens are per owner)."""
    row = conn.execute(_APP_BY_TOKEN, {"token": token, "owner": owner}).first()
    return App.from_row(row) if row else None


JSON_COLUMNS = ("termination_info", "properties", "options", "deployment", "placement")


def _encode(values: dict[str, Any]) -> dict[str, Any]:
    for key in JSON_COLUMNS:
        if key in values and values[key] is not None and not isinstance(values[key], str):
            values[key] = json.dumps(values[key], sort_keys=True)
    return values


def create_app(conn: Connection, now: float, **values: Any) -> App:
    """A new application in state instantiated: its row, first history row and first
    lifecycle event (sequence 1)."""
    values = _encode(dict(values, state=lifecycle.INSTANTIATED, desired=lifecycle.INSTANTIATED,
                          generation=0, created=now, event_seq=1))
    send(conn, _INSERT_APP, values)
    send(conn, _INSERT_HISTORY, {"app_id": values["id"], "seq": 1, "state": lifecycle.INSTANTIATED,
                                   "at": now, "info": None})
    add_event(conn, values["id"], LIFECYCLE_TOPIC, 1, {
        "ResourceId": values["id"], "name": values.get("name"), "state": lifecycle.INSTANTIATED,
        "previousState": None, "timestamp": now, "sequence": 1, "stateInfo": None,
        "terminationInfo": None}, now)
    return App({c.name: values.get(c.name) for c in APP_COLUMNS})


def update_app(conn: Connection, app_id: str, **values: Any) -> None:
    """(Not waited for on PostgreSQL: the caller holds the row, ``lock_app``.)"""
    send(conn, _UPDATE_APP, dict(_encode(values), _app_id=app_id))


def count_by_state(conn: Connection, owner: str | None = None) -> dict[str, int]:
    """Applications per state (of ``owner`` only, when given)."""
    query = select(applications.c.state, func.count()).group_by(applications.c.state)
    if owner is not None:
        query = query.where(applications.c.owner == owner)
    return {state: n for state, n in conn.execute(query)}


def delete_app(conn: Connection, app_id: str) -> None:
    # children first, so the order is right on every database
    for statement in _DELETE_APP:
        send(conn, statement, {"app_id": app_id})


# -- views ------------------------------------------------------------------------------------
def new_view(conn: Connection, app_id: str, portal: str, now: float) -> View:
    view = View(uuid.uuid4().hex, app_id, portal)
    send(conn, _INSERT_VIEW, {"id": view.id, "app_id": app_id, "portal": portal, "created": now})
    return view


def bound_view(conn: Connection, app_id: str, portal: str, now: float) -> View:
    """The oldest live view of the application through ``portal``, else a new one (in the
    caller's write transaction)."""
    return view_for(conn, app_id, portal, now) or new_view(conn, app_id, portal, now)


def get_view(conn: Connection, view_id: str) -> View | None:
    """A view, live or past its termination time (``expire_views`` removes those)."""
    row = conn.execute(_GET_VIEW, {"view": view_id}).first()
    return View(*row) if row else None


def view_for(conn: Connection | Store, app_id: str, portal: str, now: float) -> View | None:
    """The oldest live view of the application through ``portal``. Through the store: held
    while unchanged and live (a view made since is younger)."""
    params = {"app_id": app_id, "portal": portal, "now": now}
    row = _row(conn, _VIEW_FOR, params) if isinstance(conn, Connection) else conn.first_cached(
        ("view_for", app_id, portal), _VIEW_FOR, params,
        lambda held: _live(held["termination_time"], now))
    return View(row["id"], row["app_id"], row["portal"], row["termination_time"]) \
        if row is not None else None


def all_views(conn: Connection, portal: str, now: float, limit: int,
              owner: str | None = None) -> list[tuple[str, View | None]]:
    """The newest ``limit`` applications (of ``owner`` only, when given), oldest first, each
    with its oldest live view through ``portal`` (None when it has none). Two index reads: the
    page of applications, then their views."""
    a = applications.c
    query = select(a.id).where(*([a.owner == owner] if owner is not None else []))
    ids = [r[0] for r in conn.execute(query.order_by(a.created.desc(), a.id.desc()).limit(limit))]
    ids.reverse()
    found: dict[str, View] = {}
    for start in range(0, len(ids), 500):     # bound the parameters of one statement
        for view_id, app_id, view_portal in conn.execute(
                select(views.c.id, views.c.app_id, views.c.portal)
                .where(views.c.app_id.in_(ids[start:start + 500]), views.c.portal == portal,
                       _LIVE_VIEW).order_by(views.c.created.desc()), {"now": now}):
            found[app_id] = View(view_id, app_id, view_portal)   # the oldest wins (last)
    return [(app_id, found.get(app_id)) for app_id in ids]


LISTED = (applications.c.id, applications.c.name, applications.c.state, applications.c.created,
          applications.c.owner)


def list_apps(conn: Connection, limit: int, after: tuple[float, str] | None = None,
              owner: str | None = None) -> list[Any]:
    """A page of applications (of ``owner`` only, when given) in creation order: at most
    ``limit`` rows of ``LISTED`` after the application ``after`` names (created, id). An
    index range (``ix_applications_created``, ``ix_applications_owner_created``)."""
    a = applications.c
    query = select(*LISTED)
    if owner is not None:
        query = query.where(a.owner == owner)
    if after is not None:
        created, app_id = after
        # (created, id) > after, written so that both databases range-scan the index
        query = query.where(a.created >= created, or_(a.created > created, a.id > app_id))
    return conn.execute(query.order_by(a.created, a.id).limit(limit)).all()


def delete_view(conn: Connection, view_id: str) -> int:
    return conn.execute(delete(views).where(views.c.id == view_id)).rowcount


def set_view_termination(conn: Connection, view_id: str, when: float | None) -> int:
    return conn.execute(update(views).where(views.c.id == view_id)
                        .values(termination_time=when)).rowcount


def expire_views(conn: Connection, now: float) -> int:
    """Remove the views whose termination time has passed (their applications go on)."""
    return conn.execute(delete(views).where(views.c.termination_time <= now)).rowcount


# -- lifecycle --------------------------------------------------------------------------------
def record_state(conn: Connection, app: App, state: str, now: float, info: str | None = None,
                 termination: dict | None = None) -> App:
    """Enter ``state``: the application row, a history row and a lifecycle event, together.
    The event sequence is the history sequence (per application, from 1, no gaps)."""
    seq = app.event_seq + 1
    values: dict[str, Any] = {"state": state, "event_seq": seq}
    if info is not None:
        values["state_info"] = info
    if state == lifecycle.RUNNING and app.started is None:
        values["started"] = now
    if state == lifecycle.TERMINATED:
        values["terminated"] = now
    if termination is not None:
        values["termination_info"] = termination
    update_app(conn, app.id, **values)
    send(conn, _INSERT_HISTORY, {"app_id": app.id, "seq": seq, "state": state, "at": now,
                                   "info": info})
    payload = {"ResourceId": app.id, "name": app.name, "state": state,
               "previousState": app.state if seq > 1 else None, "timestamp": now, "sequence": seq,
               "stateInfo": info,
               "terminationInfo": (termination or app.termination_info)
               if state in (lifecycle.FAILED, lifecycle.TERMINATED) else None}
    add_event(conn, app.id, LIFECYCLE_TOPIC, seq, payload, now)
    app.state, app.event_seq = state, seq
    app.state_info = info if info is not None else app.state_info
    if termination is not None:
        app.termination_info = termination
    if state == lifecycle.RUNNING and app.started is None:
        app.started = now
    if state == lifecycle.TERMINATED:
        app.terminated = now
    return app


def add_event(conn: Connection, producer: str, topic: str, seq: int, payload: dict,
              now: float, owner: str | None = None) -> None:
    """An event in the outbox; ``owner``: the owner of the application an ApplicationCreated
    event announces (only its owner's and administrators' subscriptions hear of it)."""
    send(conn, _INSERT_EVENT, {"producer": producer, "topic": topic, "seq": seq,
                                 "message": json.dumps(payload, sort_keys=True), "created": now,
                                 "fanned_out": False, "owner": owner})


def get_history(conn: Connection, app_id: str) -> list[tuple[int, str, float, str | None]]:
    return [tuple(r) for r in conn.execute(
        select(history.c.seq, history.c.state, history.c.at, history.c.info)
        .where(history.c.app_id == app_id).order_by(history.c.seq))]


# -- hosts --------------------------------------------------------------------------------------
def down_hosts(conn: Connection) -> dict[str, str | None]:
    """The hosts marked down, with the reason given."""
    return {name: reason for name, reason in conn.execute(
        select(hosts.c.name, hosts.c.reason).where(hosts.c.down))}


# -- components -------------------------------------------------------------------------------
def get_components(conn: Connection, app_id: str) -> list[Component]:
    return [Component.from_row(r) for r in conn.execute(_GET_COMPONENTS, {"app_id": app_id})]


def get_component(conn: Connection, app_id: str, path: str) -> Component | None:
    row = conn.execute(select(components).where(components.c.app_id == app_id,
                                                components.c.path == path)).first()
    return Component.from_row(row) if row else None


_COMPONENTS_AT = select(components).where(components.c.app_id == bindparam("app_id"),
                                         components.c.path.in_(bindparam("paths", expanding=True)))
_STATES = select(components.c.path, components.c.type, components.c.parent, components.c.position,
                 components.c.observed, components.c.optional, components.c.oneshot) \
    .where(components.c.app_id == bindparam("app_id")).order_by(components.c.path)


def get_components_at(conn: Connection, app_id: str, paths: list[str]) -> list[Component]:
    """The components of an application at these paths (one query, rows decoded)."""
    return [Component.from_row(r) for r in conn.execute(_COMPONENTS_AT, {"app_id": app_id,
                                                                         "paths": list(paths)})]


def component_states(conn: Connection, app_id: str) -> list[tuple]:
    """(path, type, parent, position, observed, optional, oneshot) of every component: what
    the planner needs, without decoding any JSON (it runs after every batch of work)."""
    return rows(conn, _STATES, {"app_id": app_id})


def insert_components(conn: Connection, rows: list[dict]) -> None:
    if rows:
        conn.execute(insert(components), rows)


def update_components(conn: Connection, app_id: str, changes: list[tuple[str, dict]]) -> None:
    """Update many components, ``changes`` of (path, values): one executemany per shape of
    values (the outcomes of a batch are mostly of one shape); an empty one changes nothing."""
    shapes: dict[tuple, list[dict]] = {}
    for path, values in changes:
        if not values:
            continue
        if "runtime" in values and not isinstance(values["runtime"], (str, type(None))):
            values = dict(values, runtime=json.dumps(values["runtime"], sort_keys=True))
        shapes.setdefault(tuple(sorted(values)), []).append(dict(values, _app_id=app_id, _path=path))
    for rows in shapes.values():
        conn.execute(_UPDATE_COMPONENT, rows)


_INTEND_COMPONENTS = not_waited(
    update(components).where(components.c.app_id == bindparam("_app_id"))
    .values(desired=bindparam("_desired"), generation=bindparam("_generation")))


def intend_components(conn: Connection, app_id: str, desired: str, generation: int) -> None:
    """Every component of the application is to be ``desired`` (an intent of that generation)."""
    send(conn, _INTEND_COMPONENTS, {"_app_id": app_id, "_desired": desired,
                                      "_generation": generation})


def set_observed(conn: Connection, app_id: str, changes: list[tuple[str, str]], now: float) -> None:
    """Set the observed state of many components in one statement (executemany)."""
    update_components(conn, app_id, [(p, {"observed": o, "updated": now}) for p, o in changes])


# -- WS-Security nonces ---------------------------------------------------------------------------
def remember_nonce(conn: Connection, digest: str, expires: float) -> bool:
    """Record a nonce seen (by its digest) until ``expires``; False when it was seen already
    (a replayed message). The primary key decides, on every portal sharing the store."""
    try:
        with conn.begin_nested():
            conn.execute(insert(nonces).values(digest=digest, expires=expires))
    except IntegrityError:
        return False
    return True


def forget_nonces(conn: Connection, now: float) -> int:
    """Drop the nonces whose message is too old to be accepted anyway."""
    return conn.execute(delete(nonces).where(nonces.c.expires < now)).rowcount
