"""Read models for the web dashboard and its JSON read API (``cddlm/web``): what a principal
may see of the applications, their components, the datacenter and the portals sharing the
store. Nothing here writes.

Every read takes the ``Principal`` the edge authenticated; ``tenancy.scoped`` is the one place
that turns it into a filter (an admin sees everything; a user only the applications they own),
and an application a principal may not see answers exactly as one that does not exist.

Times are seconds since the epoch (UTC), as in the store.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

from sqlalchemy import func, or_, select

from cddlm.application import audit, lifecycle, secrets
from cddlm.application.secrets import redact_descriptor, visible_properties
from cddlm.application import repository as repo
from cddlm.application.enactment import local, procfs, states
from cddlm.application.enactment.remote import unreachable_line
from cddlm.application.tables import (agents, applications, components, engines, events,
                                      hosts as hosts_table)
from cddlm.application.tenancy import LOCAL_ADMIN, Principal, scoped as _scoped
from cddlm.errors import BadArgument, Busy, HostUnreachable, NoSuchApplication
from cddlm.lang.model import Deployment

PORTS_TTL = 2.0          # seconds a process's listening ports are remembered
URN = "urn:uuid:"
__all__ = ["Found", "LOCAL_ADMIN", "Principal", "Views", "normalise_id"]


def normalise_id(app_id: str) -> str:
    """Accept an application id with or without its ``urn:uuid:`` prefix."""
    app_id = (app_id or "").strip()
    return app_id if app_id.startswith(URN) else URN + app_id


def _summary(row: Any) -> dict:
    m = row._mapping
    return {"id": m["id"], "name": m["name"], "owner": m.get("owner"), "state": m["state"],
            "stateInfo": m["state_info"], "created": m["created"], "started": m["started"],
            "terminated": m["terminated"]}


@dataclass(frozen=True)
class Found:
    """An application as one read found it for ``principal`` (``Views.find``). A page built
    of several reads passes it on in place of the id, and they take the application from it
    instead of reading it again; for any other principal it is looked up afresh by its id."""

    principal: Principal
    app: repo.App

    @property
    def id(self) -> str:
        return self.app.id


_SUMMARY_COLUMNS = [applications.c.id, applications.c.name, applications.c.state,
                    applications.c.state_info, applications.c.created, applications.c.started,
                    applications.c.terminated, applications.c.owner]


class Views:
    def __init__(self, service: Any):
        self.service = service
        self.store = service.store
        self.settings = service.settings
        self.hosts = service.hosts
        self.clock = service.clock
        self._ports: dict[tuple[int, str | None], tuple[float, list[int]]] = {}
        self._ports_lock = threading.Lock()

    @property
    def runners(self) -> dict:
        engine = self.service.engine
        return engine.runners if engine is not None else {}

    def asking(self, runner: Any) -> ContextManager:
        """Around a read that ``runner`` answers by asking another portal (a host portal):
        one deadline and one of the few request threads that may wait on other portals."""
        engine = self.service.engine
        if engine is None or not hasattr(runner, "observed"):
            return contextlib.nullcontext()
        return engine.waiting_on_portals()

    # -- applications ----------------------------------------------------------------------
    def applications(self, principal: Principal, *, state: str | None = None,
                     name: str | None = None, limit: int | None = None, offset: int = 0) -> dict:
        """A page of applications, newest first, with their components counted by state."""
        lim = self.settings.dashboard
        limit = lim.page_size if limit is None else limit
        if not 1 <= limit <= lim.max_page_size:
            raise BadArgument("limit must be between 1 and %d" % lim.max_page_size)
        if offset < 0:
            raise BadArgument("offset must not be negative")
        if state and state not in lifecycle.STATES:
            raise BadArgument("unknown state %r (states: %s)" % (state, ", ".join(lifecycle.STATES)))
        if name and len(name) > lim.max_name_filter:
            raise BadArgument("the name filter is longer than %d characters" % lim.max_name_filter)
        where = []
        if state:
            where.append(applications.c.state == state)
        if name:
            pattern = "%" + name.lower().replace("\\", "\\\\").replace("%", "\\%") \
                .replace("_", "\\_") + "%"
            where.append(or_(func.lower(applications.c.name).like(pattern, escape="\\"),
                             applications.c.id.like(pattern, escape="\\")))
        with self.store.read() as conn:
            total = conn.execute(_scoped(select(func.count()).select_from(applications)
                                         .where(*where), principal)).scalar() or 0
            rows = conn.execute(_scoped(select(*_SUMMARY_COLUMNS).where(*where), principal)
                                .order_by(applications.c.created.desc(), applications.c.id)
                                .limit(limit).offset(offset)).all()
            items = [_summary(r) for r in rows]
            counts: dict[str, dict[str, int]] = {i["id"]: {} for i in items}
            if items:      # what runs, not the containers holding it: as ``cddlm status`` counts
                for app_id, observed, n in conn.execute(
                        select(components.c.app_id, components.c.observed, func.count())
                        .where(components.c.app_id.in_(list(counts)),
                               components.c.type.notin_(sorted(states.CONTAINERS)))
                        .group_by(components.c.app_id, components.c.observed)):
                    counts[app_id][observed] = n
            by_state = {s: n for s, n in conn.execute(_scoped(
                select(applications.c.state, func.count()).group_by(applications.c.state),
                principal))}
        for item in items:
            item["components"] = counts[item["id"]]
        return {"total": total, "offset": offset, "limit": limit, "items": items,
                "states": {s: by_state.get(s, 0) for s in lifecycle.STATES}}

    def _app(self, conn, principal: Principal, app_id: str | Found) -> repo.App:
        """The application ``app_id`` names: its id (with or without ``urn:uuid:``), else its
        name as ``cddlm`` commands take it (``Service.named``). One ``principal`` may not see
        is answered as one that does not exist. A ``Found`` of this principal is not read
        again."""
        if isinstance(app_id, Found):
            if app_id.principal == principal:
                return app_id.app
            app_id = app_id.id
        row = conn.execute(_scoped(select(*repo.APP_COLUMNS).where(
            applications.c.id == normalise_id(app_id)), principal)).first()
        if row is not None:
            return repo.App.from_row(row)
        app = self.service.named(conn, (app_id or "").strip(), principal)
        if app is None:
            raise NoSuchApplication("no application with id or name %s" % app_id)
        return app

    def find(self, principal: Principal, app_id: str) -> Found:
        """The application ``app_id`` names (its id or its name), read once, to pass on to the
        other reads of one page in place of its id."""
        with self.store.read() as conn:
            return Found(principal, self._app(conn, principal, app_id))

    def application(self, principal: Principal, app_id: str | Found) -> dict:
        """One application: its summary, deployment facts, history and components."""
        with self.store.read() as conn:
            app = self._app(conn, principal, app_id)
            hist = repo.get_history(conn, app.id)
            comps = repo.get_components(conn, app.id)
        out = {"id": app.id, "name": app.name, "owner": app.owner, "state": app.state,
               "stateInfo": app.state_info, "created": app.created, "started": app.started,
               "terminated": app.terminated, "terminationTime": app.termination_time,
               "terminationInfo": app.termination_info, "language": app.language,
               "descriptorDigest": app.descriptor_digest,
               "options": app.options, "hostname": app.hostname,
               "placement": app.placement or {"components": {}, "audit": None}}
        # secrets (values a descriptor marks secret) are named, never shown
        out["properties"], out["hiddenProperties"] = visible_properties(app.properties, app.deployment)
        out["history"] = _history(hist)
        out["components"] = self._components(app, comps)
        return out

    def audit(self, principal: Principal, app_id: str | Found | None = None, limit: int = 100) -> list[dict]:
        """The audit log, newest first: about one application, or every entry ``principal``
        may see (their applications and their own actions; an administrator: all)."""
        if not 1 <= limit <= self.settings.dashboard.max_page_size:
            raise BadArgument("limit must be between 1 and %d" % self.settings.dashboard.max_page_size)
        with self.store.read() as conn:
            if app_id:
                app_id = self._app(conn, principal, app_id).id
            return audit.entries(conn, principal, app_id, limit)

    def components(self, principal: Principal, app_id: str) -> list[dict]:
        with self.store.read() as conn:
            app = self._app(conn, principal, app_id)
            comps = repo.get_components(conn, app.id)
        return self._components(app, comps)

    def history(self, principal: Principal, app_id: str) -> list[dict]:
        with self.store.read() as conn:
            app = self._app(conn, principal, app_id)
            return _history(repo.get_history(conn, app.id))

    def descriptor(self, principal: Principal, app_id: str | Found) -> dict:
        with self.store.read() as conn:
            app = self._app(conn, principal, app_id)
            text = conn.execute(select(applications.c.descriptor)
                                .where(applications.c.id == app.id)).scalar()
        # its literal secrets masked where it marks them, and any secret string elsewhere
        return {"language": app.language, "digest": app.descriptor_digest,
                "text": secrets.of(self._tree(app))(redact_descriptor(app.language, text))}

    def logs(self, principal: Principal, app_id: str | Found, path: str, lines: int | None = None) -> dict:
        """The last lines of a component's stdout and stderr, read where it runs (a host
        portal's through it); a host portal that does not answer leaves them empty, with
        ``available`` false and ``reason`` naming the host."""
        out: dict[str, Any] = {}
        for stream in ("stdout", "stderr"):
            try:
                found = self.log(principal, app_id, path, stream, lines=lines)
            except (HostUnreachable, Busy) as e:
                out.update(path=path, available=False, reason=str(e), stdout=[], stderr=[])
                out.setdefault("host", getattr(e, "host", None))
                return out
            out.update(path=found["path"], host=found["host"], available=found["available"])
            out[stream] = found["lines"]
        return out

    def log(self, principal: Principal, app_id: str | Found, path: str, stream: str, *,
            lines: int | None = None, offset: int | None = None) -> dict:
        """One of a component's logs, read by the runner of its host: the last ``lines``
        lines, or (``offset``) the lines written after that byte, at most ``log_bytes`` of
        it per call; ``offset`` in the answer is where to read on from (``cddlm logs -f``)."""
        lim = self.settings.dashboard
        lines = lim.log_lines if lines is None else lines
        if not 1 <= lines <= lim.max_log_lines:
            raise BadArgument("lines must be between 1 and %d" % lim.max_log_lines)
        if offset is not None and offset < 0:
            raise BadArgument("offset must not be negative")
        if stream not in ("stdout", "stderr"):
            raise BadArgument("stream must be stdout or stderr, not %r" % stream)
        with self.store.read() as conn:
            app = self._app(conn, principal, app_id)
            comp = repo.get_component(conn, app.id, path)
        if comp is None:
            raise BadArgument("application %s has no component %r" % (app.id, path))
        runner = self.runners.get(comp.host or "")
        found, end = [], 0
        if runner is not None:
            with self.asking(runner):
                found, end = runner.log_read(app.id, comp.path, stream, lines=lines, offset=offset,
                                             max_bytes=lim.log_bytes)
        return {"path": comp.path, "host": comp.host, "stream": stream,
                "available": runner is not None, "lines": found, "offset": end}

    def _components(self, app: repo.App, comps: list[repo.Component]) -> list[dict]:
        """The component tree flattened parents first, siblings in document order."""
        children: dict[str | None, list[repo.Component]] = {}
        for c in comps:
            children.setdefault(c.parent, []).append(c)
        tree = self._tree(app) if any(c.observed == states.STARTING for c in comps) else None
        now = self.clock()
        there = self._observed_there(app.id, comps)
        # the namespace's listening sockets, read once for the whole table (when a process
        # holding a socket asks), not once per component
        listening = functools.cache(procfs.listening_table)
        out: list[dict] = []
        stack = list(reversed(sorted(children.get(None, []), key=lambda c: c.position)))
        while stack:
            c = stack.pop()
            out.append(self._component(c, tree, now, there.get(c.path), listening))
            stack.extend(reversed(sorted(children.get(c.path, []), key=lambda k: k.position)))
        return out

    def _observed_there(self, app_id: str, comps: list[repo.Component]) -> dict[str, dict]:
        """What the host portals running some of ``comps`` report of them (pid, ports), for
        those running there; a host portal that does not answer reports nothing, and what one
        reports of a component another host runs is not taken (a host may lie)."""
        hosts: dict[str, set[str]] = {}
        for c in comps:
            if c.observed in (states.STARTING, states.RUNNING) \
                    and hasattr(self.runners.get(c.host or ""), "observed"):
                hosts.setdefault(c.host, set()).add(c.path)
        out: dict[str, dict] = {}
        for host, paths in sorted(hosts.items()):
            runner = self.runners[host]
            try:
                with self.asking(runner):
                    reported = runner.observed(app_id)
            except (HostUnreachable, Busy):
                continue        # (its pid and ports are not known now: shown as none)
            out.update((path, reported[path]) for path in paths & reported.keys())
        return out

    def _tree(self, app: repo.App) -> Deployment | None:
        if not app.deployment:
            return None
        engine = self.service.engine
        return engine.tree(app) if engine is not None else Deployment.from_json(app.deployment)

    def _component(self, c: repo.Component, tree: Deployment | None, now: float,
                   there: dict | None = None,
                   listening: Callable[[], dict[str, int]] = procfs.listening_table) -> dict:
        """One component; ``there``: what the host portal running it reports of it (its pid
        and ports are that host's). A Slurm job's are those on its node, as its watcher
        reports them (``Engine.on_node``; the job's id is its value ``job``)."""
        live = c.observed in (states.STARTING, states.RUNNING)
        engine = self.service.engine
        on_node = engine.on_node(c) if engine is not None and there is None else None
        if there is not None:
            pid, ports = there.get("pid"), list(there.get("ports") or []) if live else []
        elif on_node is not None:
            pid, ports = on_node
        else:
            pid, ports = c.pid, self._ports_of(c, listening)
        out = {"path": c.path, "name": c.path.rsplit("/", 1)[-1], "parent": c.parent,
               "depth": c.path.count("/"), "type": c.type, "optional": c.optional,
               "host": c.host, "provider": c.provider, "desired": c.desired, "state": c.observed,
               "pid": pid if live else None, "ports": ports,
               "restarts": c.restarts, "exitCode": c.exit_code,
               "exitSignal": c.exit_signal, "info": c.info, "updated": c.updated,
               "stderr": c.runtime.get("stderr") if c.observed == states.FAILED else None,
               # enacted by another portal (a host portal, or a delegate's): its sub-application
               "subApplication": c.runtime.get("subApplication"),
               "subApplicationId": c.runtime.get("subApplicationId")}
        if tree is not None:
            out.update(local.readiness_wait(tree, c, now) or {})
        return out

    def _ports_of(self, c: repo.Component, listening: Callable[[], dict[str, int]]) -> list[int]:
        if c.type != "process" or c.observed != states.RUNNING or not c.pid:
            return []
        if c.runtime.get("ports"):
            return list(c.runtime["ports"])
        if (c.host or "") not in self.runners or hasattr(self.runners[c.host or ""], "ports"):
            return []       # not this machine's process: its ports are those recorded
        key, now = (c.pid, c.pid_start), time.monotonic()
        with self._ports_lock:
            seen = self._ports.get(key)
        if seen is not None and now - seen[0] < PORTS_TTL:
            return seen[1]
        ports = procfs.listening_ports(c.pid, listening) if procfs.alive(c.pid, c.pid_start) else []
        with self._ports_lock:
            if len(self._ports) > 4096:
                self._ports.clear()
            self._ports[key] = (now, ports)
        return ports

    # -- the datacenter ----------------------------------------------------------------------
    def datacenter(self, principal: Principal, app_id: str | Found | None = None) -> dict:
        """The location tree with, on each node, its capacity and what is used of it, whether
        it is down, and the visible components placed on it (of applications not terminated)."""
        lim = self.settings.dashboard
        implicit = self.hosts.datacenter is None
        dc = self.hosts.datacenter or self.hosts.implicit_datacenter()
        query = _scoped(select(components.c.app_id, components.c.path, components.c.type,
                               components.c.observed, components.c.host, components.c.provider,
                               applications.c.name, applications.c.state)
                        .select_from(components.join(applications,
                                                     applications.c.id == components.c.app_id))
                        .where(applications.c.state != lifecycle.TERMINATED,
                               components.c.provider.is_not(None)), principal)
        with self.store.read() as conn:
            if app_id:
                query = query.where(applications.c.id == self._app(conn, principal, app_id).id)
            down = repo.down_hosts(conn)
            used = self.service._used_capacity(conn)
            placed_rows = conn.execute(query.order_by(applications.c.created, components.c.path)
                                       .limit(lim.max_placed + 1)).all()
            peers = self._live_peers(conn)
            monitor = self._monitor(conn)
        truncated = len(placed_rows) > lim.max_placed
        on: dict[str, list[dict]] = {}
        for r in placed_rows[:lim.max_placed]:
            on.setdefault(r.provider, []).append({
                "app": r.app_id, "appName": r.name, "appState": r.state, "path": r.path,
                "type": r.type, "state": r.observed, "host": r.host})
        peer_urls = {_base(p["url"]) for p in peers if p["url"]}

        def visit(node: dict, host: str | None, depth: int) -> dict:
            name = str(node.get("name"))
            is_host = name in self.hosts
            host = name if is_host else host
            out: dict[str, Any] = {"name": name, "level": node.get("level"), "host": is_host,
                                   "capacity": {} if implicit else dict(node.get("capacity") or {}),
                                   "used": used.get(name, {}), "traits": list(node.get("traits") or []),
                                   "components": on.get(name, [])}
            if host is not None:
                out["down"] = host in down
                out["reason"] = down.get(host)
            if is_host:
                agent = self.hosts.hosts[name].agent
                out["agent"] = agent
                out["servedBy"] = "this portal" if agent == "local" else agent
                out.update(self._reach(self.hosts.hosts[name], peer_urls, monitor))
            out["children"] = [visit(c, host, depth + 1) for c in node.get("children") or []
                               if isinstance(c, dict)] if depth < 64 else []
            return out

        roots = dc.get("location")
        roots = roots if isinstance(roots, list) else [roots]
        return {"implicit": implicit, "levels": list(dc.get("levels") or []),
                "resources": [] if implicit else list(dc.get("resources") or []),
                "roots": [visit(r, None, 0) for r in roots if isinstance(r, dict)],
                "placed": min(len(placed_rows), lim.max_placed), "truncated": truncated}

    def hosts_list(self, principal: Principal) -> list[dict]:
        """Every host: agent and who serves it, down or not, capacity, used and free, and the
        number of visible components on it (of applications not terminated)."""
        with self.store.read() as conn:
            down = repo.down_hosts(conn)
            used = self.service._used_capacity(conn)
            counts = self.service._components_per_host(conn, principal, leaves_only=False)
            peers = self._live_peers(conn)
            monitor = self._monitor(conn)
        peer_urls = {_base(p["url"]) for p in peers if p["url"]}
        implicit = self.hosts.datacenter is None
        out = []
        for h in self.hosts.hosts.values():
            capacity = {} if implicit else {k: float(v) for k, v in h.capacity.items()}
            held = used.get(h.name, {})
            out.append({"name": h.name, "agent": h.agent,
                        "servedBy": "this portal" if h.local else h.agent,
                        **self._reach(h, peer_urls, monitor),
                        "down": h.name in down, "reason": down.get(h.name),
                        "capacity": capacity, "used": held,
                        "free": {k: v - held.get(k, 0.0) for k, v in capacity.items()},
                        "components": counts.get(h.name, 0)})
        return out

    def _monitor(self, conn) -> dict[str, Any]:
        """The host monitor's last look at each host it pings (host portals, SSH hosts)."""
        return {r.host: r for r in conn.execute(select(agents))}

    def _reach(self, h: Any, peer_urls: set[str], monitor: dict[str, Any]) -> dict:
        """Whether ``h`` answers: this portal's own hosts do; a host the host monitor pings,
        as its last ping says (``lastOk``, ``checked``, the ``lease`` after which silence marks
        it down, and ``unreachable``: the one line saying since when and why); any other, as
        whether its portal heart-beats into this store."""
        none = {"lastOk": None, "checked": None, "lastOkAgo": None, "lease": None, "unreachable": None}
        if h.agent == "local":
            return dict(none, reachable=True)
        row = monitor.get(h.name)
        if row is None:
            return dict(none, reachable=_base(h.agent) in peer_urls)
        since = row.last_ok if row.last_error else None
        runner = self.runners.get(h.name)
        since = getattr(runner, "failing", None) or since
        return {"reachable": row.last_error is None, "lastOk": row.last_ok, "checked": row.checked,
                "lastOkAgo": self.clock() - row.last_ok if row.last_ok else None,
                "lease": self.settings.agent_lease,
                "unreachable": unreachable_line(h.name, since, row.last_error) if row.last_error else None}

    def peers(self, principal: Principal) -> list[dict]:
        """The portals sharing this store that heart-beat lately, this one marked ``self``."""
        with self.store.read() as conn:
            return self._live_peers(conn)

    def _live_peers(self, conn) -> list[dict]:
        now = self.clock()
        stale = now - 3 * self.settings.heartbeat_seconds
        me = self.service.engine.id if self.service.engine is not None else None
        return [{"id": r.id, "url": r.url, "started": r.started, "heartbeat": r.heartbeat,
                 "self": r.id == me}
                for r in conn.execute(select(engines).where(engines.c.heartbeat >= stale)
                                      .order_by(engines.c.started))]

    # -- change detection --------------------------------------------------------------------
    def version(self, principal: Principal, app_id: str | Found | None = None) -> str:
        """A token that changes whenever what a page shows may have changed: of one
        application (its state and its components), or of every visible application (their
        states, creations and removals, and hosts marked; a component's own changes show on
        the pages' periodic refresh)."""
        with self.store.read() as conn:
            if app_id:
                app = self._app(conn, principal, app_id)
                latest, count = conn.execute(
                    select(func.max(components.c.updated), func.count())
                    .where(components.c.app_id == app.id)).one()
                return "%d.%s.%s.%d" % (app.event_seq, app.state, latest, count)
            # every lifecycle transition and every creation adds an event (its id is indexed);
            # a user's own applications are summed instead, so nobody learns of others' activity
            if principal.admin:
                n = conn.execute(select(func.count()).select_from(applications)).scalar()
                changes = conn.execute(select(func.max(events.c.id))).scalar()
            else:
                n, changes = conn.execute(_scoped(select(func.count(), func.sum(applications.c.event_seq)),
                                                  principal)).one()
            marked = conn.execute(select(func.max(hosts_table.c.updated))).scalar()
        return "%d.%s.%s" % (n, changes, marked)


def _history(rows: list[tuple]) -> list[dict]:
    return [{"seq": seq, "state": state, "at": at, "info": info} for seq, state, at, info in rows]


def _base(url: str) -> str:
    """A portal URL reduced to scheme://host:port, to compare agents with peers."""
    url = (url or "").strip().rstrip("/")
    head, sep, rest = url.partition("://")
    return (head.lower() + sep + rest.split("/", 1)[0].lower()) if sep else url.lower()
