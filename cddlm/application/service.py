"""The use cases of the Deployment API: one method per operation, one transaction per change.

Everything that can fail on bad input (options, descriptor parsing, property resolution,
placement) happens before the write transaction, so an error leaves the store untouched.
The transaction then re-checks the lifecycle table, because another request may have changed
the application meanwhile.

Every use case takes the ``principal`` the edge authenticated (keyword ``principal``; in-process
callers such as the scheduler act as the local administrator). The ones that find an
application (create, lookup, rebind, applications, app_for_view, dynamic_info) let it see only
what ``tenancy`` allows; the ones that act on an application id found that way record the
principal in the audit log, in the transaction of the change.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any, Callable

from lxml import etree
from sqlalchemy import func, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from cddlm import ns
from cddlm.application import (audit as audit_log, descriptors, lifecycle, options as opts, secrets,
                               tenancy)
from cddlm.application import fencing
from cddlm.application import repository as repo
from cddlm.application.enactment import local, queue, states
from cddlm.application.enactment.reconcile import reconcile
from cddlm.application.enactment.values import RESOLVED_RUNTIME, HostValues
from cddlm.application.hosts import Hosts
from cddlm.application.loader import Loader
from cddlm.application.placing import Placer
from cddlm.application.store import Store
from cddlm.application.tables import (applications as applications_table, components as components_table,
                                     deliveries, hosts as hosts_table, subscriptions as subscriptions_table,
                                     work as work_table)
from cddlm.application.tenancy import LOCAL_ADMIN, Principal
from cddlm.config import Settings
from cddlm.errors import (BadArgument, NoSuchApplication, ResolutionError, ResourceUnknown,
                          UnableToSetTerminationTime)
from cddlm.lang import registry
from cddlm.lang.documents import parse_xml
from cddlm.lang.model import Deployment, canonical
from cddlm.xsdtypes import parse_time


@dataclass
class DescriptorInput:
    language: str
    version: str | None = None
    body: etree._Element | None = None
    text: str | None = None
    reference: str | None = None


@dataclass
class Ping:
    state: str
    state_info: str | None
    termination_info: dict | None
    health: list[dict]


@dataclass(frozen=True)
class SubApplication:
    """A component's sub-application on another portal (what ``resolve`` of a delegate gives)."""
    address: str
    resource_id: str


class Service:
    def __init__(self, store: Store, settings: Settings, hosts: Hosts | None = None, *,
                 clock: Callable[[], float] = time.time, engine: Any = None,
                 placer: Placer | None = None):
        self.store = store
        self.settings = settings
        self.hosts = hosts or Hosts.default()
        self.clock = clock
        self.engine = engine
        self.placer = placer or Placer(self.hosts)
        self.on_events: list[Callable[[], None]] = []   # notified after events commit
        self.subscriptions: Any = None                   # set by the composition root (notify)
        self.front_pinged: float | None = None           # host side: a front's last ping (readyz)

    def _after(self, work: bool = False, events: bool = True) -> None:
        if work and self.engine is not None:
            self.engine.wake()
        if events:
            for callback in self.on_events:
                callback()

    # -- portal operations ----------------------------------------------------------------------
    def create(self, name: str | None, hostname: str | None, options: list[opts.Option],
               portal: str, *, principal: Principal = LOCAL_ADMIN) -> tuple[repo.App, repo.View]:
        understood = opts.check(options, "create")
        now = self.clock()
        hostname = hostname.strip() if hostname and hostname.strip() else None
        if hostname is not None and hostname not in self.hosts:
            raise BadArgument("hostname %r is not a host of this portal (hosts: %s)"
                              % (hostname, ", ".join(self.hosts.names())))
        token = understood.get(opts.CLIENT_TOKEN)
        digest = _digest({"name": name, "hostname": hostname,
                          "options": sorted((o.name, o.kind, o.text) for o in options
                                            if o.name != opts.CLIENT_TOKEN)})
        termination_time = self._termination_option(understood, now)
        subscribe = understood.get(opts.SUBSCRIBE)
        prepared = self.subscriptions.prepare(subscribe, now) if subscribe and self.subscriptions else None
        for attempt in (1, 2):
            try:
                with self.store.write() as conn:
                    if token is not None:
                        existing = repo.app_by_token(conn, token.value, principal.name)
                        if existing is not None:
                            if existing.request_digest != digest:
                                raise BadArgument("client token %r was already used with different "
                                                  "arguments" % token.value)
                            view = repo.view_for(conn, existing.id, portal, now) or \
                                repo.new_view(conn, existing.id, portal, now)
                            return existing, view
                    tenancy.check_applications(conn, principal, self.settings.quotas)
                    app_id = repo.new_id()
                    app = repo.create_app(conn, now, id=app_id, name=name, hostname=hostname,
                                          termination_time=termination_time,
                                          client_token=token.value if token else None,
                                          request_digest=digest, options=_options_json(options),
                                          owner=principal.name)
                    view = repo.new_view(conn, app_id, portal, now)
                    if prepared is not None:
                        self.subscriptions.insert(conn, prepared, app_id, view, portal, now,
                                                  principal=principal)
                    repo.add_event(conn, ns.PORTAL_PRODUCER, repo.CREATED_TOPIC, 0,
                                   {"ResourceId": app_id, "name": name, "timestamp": now,
                                    "view": view.id, "portal": portal}, now, owner=principal.name)
                    audit_log.record(conn, principal, "create", now, app_id=app_id,
                                     app_owner=principal.name, detail=name)
                break
            except IntegrityError:
                # the unique indexes decide races: a name in use (among the owner's live
                # applications), or a concurrent create with the same client token (then the
                # retry finds and returns that application)
                if attempt == 2 or token is None:
                    raise BadArgument("a live application named %r already exists among yours (a "
                                      "name is free again once its application has terminated)"
                                      % name) from None
        self._after()
        return app, view

    def lookup(self, portal: str, resource_id: str | None = None,
               name: str | None = None, *, principal: Principal = LOCAL_ADMIN) -> repo.View:
        store = self.store      # indexed reads through the driver; a view gone between is bound anew
        app = repo.get_app(store, resource_id) if resource_id else \
            self.named(store, name or "", principal)
        if app is None or not tenancy.visible(app.owner, principal):
            raise NoSuchApplication("no application %s" % (
                ("with id %s" % resource_id) if resource_id else ("named %r" % name)))
        view = repo.view_for(store, app.id, portal, self.clock())
        if view is not None:
            return view
        return self._bind(app.id, portal)

    @staticmethod
    def named(source: Connection | Store, name: str, principal: Principal) -> repo.App | None:
        """The application ``name`` names for ``principal`` (``repo.app_by_name``: the live one,
        else the newest terminated): its own, or for an administrator, their own first, then
        anyone's. None when there is none ``principal`` may see."""
        app = repo.app_by_name(source, name, principal.name)
        if app is None and principal.admin:
            app = repo.app_by_name(source, name)
        return app if app is not None and tenancy.visible(app.owner, principal) else None

    def _bind(self, app_id: str, portal: str) -> repo.View:
        with self.store.write() as conn:
            if repo.get_app(conn, app_id) is None:
                raise NoSuchApplication("no application with id %s" % app_id)
            now = self.clock()
            return repo.bound_view(conn, app_id, portal, now)

    def rebind(self, portal: str, address: str, resource_id: str | None, *,
               principal: Principal = LOCAL_ADMIN) -> repo.View:
        address = (address or "").strip()
        view_id = address.rsplit(ns.APP_PATH, 1)[1].split("?")[0].strip("/") if ns.APP_PATH in address else None
        with self.store.read() as conn:
            view = repo.get_view(conn, view_id) if view_id else None
            if view is not None:   # a view of someone else's application is no view at all
                viewed = repo.get_app(conn, view.app_id)
                if viewed is None or not tenancy.visible(viewed.owner, principal):
                    view = None
            if resource_id is None and view is not None:
                resource_id = view.app_id
            if resource_id is None:
                raise NoSuchApplication("the reference %s names no application this portal knows"
                                        % (address or "(no address)"))
            app = repo.get_app(conn, resource_id)
            if app is None or not tenancy.visible(app.owner, principal):
                raise NoSuchApplication("no application with id %s" % resource_id)
            if view is not None and view.app_id != resource_id:
                raise BadArgument("the reference's address and ResourceId name different applications")
            now = self.clock()
            live = view is not None and (view.termination_time is None or view.termination_time > now)
            if live and address.startswith(portal.rstrip("/") + ns.APP_PATH) and view.portal == portal:
                return view
            mine = repo.view_for(conn, resource_id, portal, now)
        return mine or self._bind(resource_id, portal)

    def applications(self, portal: str, *,
                     principal: Principal = LOCAL_ADMIN) -> tuple[list[repo.View], bool]:
        """A view through ``portal`` of each of the newest ``Limits.max_listed_references``
        applications ``principal`` may see, oldest first (``list_applications`` pages through
        them all), and whether older ones were left out. Applications with no view here get
        one, in one transaction."""
        limit = self.settings.limits.max_listed_references
        with self.store.read() as conn:
            pairs = repo.all_views(conn, portal, self.clock(), owner=tenancy.owner_scope(principal),
                                   limit=limit + 1)
        cut = len(pairs) > limit
        pairs = pairs[1:] if cut else pairs       # one more was read to know: the oldest
        missing = [app_id for app_id, view in pairs if view is None]
        if missing:
            with self.store.write() as conn:
                now = self.clock()
                bound = {app_id: repo.bound_view(conn, app_id, portal, now)
                         for app_id in missing if repo.get_app(conn, app_id) is not None}
            pairs = [(app_id, view or bound.get(app_id)) for app_id, view in pairs]
        return [view for _, view in pairs if view is not None], cut   # (destroyed meanwhile: gone)

    def list_applications(self, limit: int | None = None, after: str | None = None, *,
                          principal: Principal = LOCAL_ADMIN) -> tuple[list[dict], str | None]:
        """A page of the applications ``principal`` may see, in creation order: at most
        ``limit`` (default ``Limits.list_page_size``, at most ``Limits.max_list_page``) after
        the continuation marker ``after`` (the ``next`` of the previous page); each ``id``,
        ``name``, ``state``, ``created``, ``owner``. Returns (page, the next page's marker,
        None after the last page). One index range read; nothing is written."""
        lim = self.settings.limits
        limit = lim.list_page_size if limit is None else limit
        if not 1 <= limit <= lim.max_list_page:
            raise BadArgument("limit must be between 1 and %d (page on with the continuation "
                              "marker)" % lim.max_list_page)
        position = listing_position(after) if after is not None else None
        with self.store.single() as conn:
            rows = repo.list_apps(conn, limit + 1, position, owner=tenancy.owner_scope(principal))
        page = [{"id": r.id, "name": r.name, "state": r.state, "created": r.created,
                 "owner": r.owner} for r in rows[:limit]]
        more = len(rows) > limit
        return page, (listing_marker(page[-1]["created"], page[-1]["id"]) if more else None)

    def dynamic_info(self, *, principal: Principal = LOCAL_ADMIN) -> dict:
        """Counts of applications per state, queued work and undelivered notifications (of
        what ``principal`` may see), and the hosts' free capacity."""
        with self.store.read() as conn:
            if principal.admin:
                counts = repo.count_by_state(conn)
                pending = queue.depth(conn)
                undelivered = conn.execute(select(func.count()).select_from(deliveries)).scalar() or 0
            else:
                counts = repo.count_by_state(conn, principal.name)
                pending = conn.execute(tenancy.scoped(
                    select(func.count()).select_from(work_table.join(
                        applications_table, applications_table.c.id == work_table.c.app_id)),
                    principal)).scalar() or 0
                undelivered = conn.execute(
                    select(func.count()).select_from(deliveries.join(
                        subscriptions_table, subscriptions_table.c.id == deliveries.c.subscription_id))
                    .where(subscriptions_table.c.subscriber == principal.name)).scalar() or 0
            down = repo.down_hosts(conn)
            used = self._used_capacity(conn)
            placed = self._components_per_host(conn, principal, leaves_only=True)

        def free(name: str, capacity: dict) -> dict:
            return {k: float(v) - used.get(name, {}).get(k, 0.0) for k, v in capacity.items()}

        hosts = []
        for h in self.hosts.hosts.values():
            hosts.append({"name": h.name, "agent": h.agent, "down": h.name in down,
                          "components": placed.get(h.name, 0), "free": free(h.name, h.capacity),
                          "providers": [{"name": n, "free": free(n, c)} for n, c in h.providers.items()]})
        return {"counts": counts, "pending": pending, "undelivered": undelivered, "hosts": hosts}

    def portals(self) -> list[dict]:
        """The live portals sharing this store (spec 4.3: portals servicing a set of nodes
        should be discoverable): base URL, start and last heartbeat, oldest first. A portal
        silent for three heartbeats is gone."""
        with self.store.read() as conn:
            rows = queue.live_engines(conn, self.clock(), 3 * self.settings.heartbeat_seconds)
        return [{"url": url, "started": started, "heartbeat": beat} for _, url, started, beat in rows]

    # -- application operations -----------------------------------------------------------------
    def app_for_view(self, view_id: str, resource_id: str | None = None, *,
                     principal: Principal = LOCAL_ADMIN, light: bool = False) -> repo.App:
        """The application a live view names (``view_termination_time`` on it: the view's),
        when ``principal`` may see it (``light``: ``repo.app_by_view``'s)."""
        app = repo.app_by_view(self.store, view_id, self.clock(), light=light)
        if app is None or (resource_id and resource_id != app.id) \
                or not tenancy.visible(app.owner, principal):
            raise ResourceUnknown("no application view %s" % view_id)
        return app

    def get(self, app_id: str) -> repo.App:
        with self.store.read() as conn:
            app = repo.get_app(conn, app_id)
        if app is None:
            raise ResourceUnknown("application %s does not exist" % app_id)
        return app

    def history(self, app_id: str) -> list[tuple]:
        with self.store.read() as conn:
            return repo.get_history(conn, app_id)

    def initialize(self, app_id: str, descriptor: DescriptorInput, properties: list[tuple[str, str]],
                   options: list[opts.Option], *, principal: Principal = LOCAL_ADMIN) -> None:
        understood = opts.check(options, "initialize")
        now = self.clock()
        props: dict[str, str] = {}
        if opts.PROPERTIES in understood:   # beside (not instead of) the request's own element
            properties = list(properties) + opts.property_pairs(understood[opts.PROPERTIES])
        if len(properties) > self.settings.limits.max_properties:
            raise BadArgument("more than %d properties" % self.settings.limits.max_properties)
        for pname, value in properties:
            if pname in props:
                raise BadArgument("deploy-time property %s is given more than once" % pname)
            props[pname] = value
        app = self.get(app_id)
        token = understood.get(opts.CLIENT_TOKEN)
        source, text = self._descriptor_source(descriptor)
        encoded = text.encode("utf-8")
        tenancy.check_descriptor(principal.admin, len(encoded), self.settings.quotas)
        digest = hashlib.sha256(encoded).hexdigest()
        init_key = _digest({"digest": digest, "language": descriptor.language, "properties": props,
                            "options": sorted((o.name, o.text) for o in options)})
        if token is not None and app.init_token:
            previous_token, _, previous_key = app.init_token.partition(" ")
            if previous_token == token.value:
                if previous_key != init_key:
                    raise BadArgument("client token %r was already used with different arguments"
                                      % token.value)
                return  # the same initialize again: already accepted, nothing more to do
        lifecycle.check_operation("initialize", app.state, app.desired)
        termination_time = self._termination_option(understood, now)
        result = descriptors.resolve(source, descriptor.language, base_url=descriptor.reference,
                                     properties=props, loader=Loader.for_portal(self.settings),
                                     limits=self.settings.limits, version=descriptor.version)
        deployment = result.deployment
        nodes = dict(deployment.walk())
        tenancy.check_components(principal.admin, len(nodes), self.settings.quotas)
        with self.store.read() as conn:
            used = self._used_capacity(conn)
            down = set(repo.down_hosts(conn))
        with secrets.concealing(deployment):     # a refusal (a delegate's too) quotes no secret
            placement, audit = self.placer.place(deployment, used, down, app.hostname)
            for path, where in placement.items():   # what each placed component holds
                where["demand"] = dict(nodes[path].attributes.get("demand") or {})
            if self.engine is not None:     # the portals delegate components name: allowed?
                self.engine.check_delegates(deployment)
            validate_only = understood.get(opts.VALIDATE_ONLY)
            if validate_only is not None and validate_only.value:
                return
            if self.engine is not None:
                # delegate components: their portal takes (or refuses, as an api:RemoteFault
                # raised here, nothing changed) their descriptor while the caller waits
                self.engine.prepare_delegates(app_id, app.generation + 1, deployment)
        rows = _component_rows(app_id, deployment, placement, now)
        with self.store.write() as conn:
            app = repo.lock_app(conn, app_id)
            if app is None:
                raise ResourceUnknown("application %s does not exist" % app_id)
            lifecycle.check_operation("initialize", app.state, app.desired)
            values: dict[str, Any] = dict(
                language=descriptor.language, descriptor=text, descriptor_digest="sha256:" + digest,
                properties=props, options=_options_json(options), deployment=deployment.to_json(),
                placement={"components": placement, "audit": audit}, desired=lifecycle.INITIALIZED,
                generation=app.generation + 1,
                init_token=(token.value + " " + init_key) if token else None)
            if termination_time is not None:
                values["termination_time"] = termination_time
            repo.update_app(conn, app_id, **values)
            repo.insert_components(conn, [dict(r, generation=app.generation + 1) for r in rows])
            _, added = reconcile(conn, app_id, now)
            audit_log.record(conn, principal, "initialize", now, app_id=app_id, app_owner=app.owner,
                             detail="%s sha256:%s" % (descriptor.language, digest))
        self._after(work=added)

    def _descriptor_source(self, d: DescriptorInput) -> tuple[Any, str]:
        lang = registry.get(d.language, d.version)
        if d.reference is not None:
            data = Loader.for_portal(self.settings)(d.reference)
            text = data.decode("utf-8", errors="replace")
            return (data if lang.body == "xml" else text), text
        if d.body is not None:
            if lang.body != "xml":
                raise BadArgument("language %s takes its descriptor as text, not as an XML body"
                                  % d.language)
            return d.body, etree.tostring(d.body, encoding="unicode")
        if d.text is not None:
            if lang.body == "xml":   # a malformed one is a DescriptorFault, as a body or reference is
                return parse_xml(d.text, self.settings.limits), d.text
            return d.text, d.text
        raise BadArgument("the descriptor has neither body, text nor reference")

    def _termination_option(self, understood: dict, now: float) -> float | None:
        opt = understood.get(opts.TERMINATION_TIME)
        if opt is None:
            return None
        when = parse_time(str(opt.value), now)
        if when <= now:
            raise BadArgument("termination time %s is in the past" % opt.value)
        return when

    def _components_per_host(self, conn, principal: Principal, *,
                             leaves_only: bool) -> dict[str, int]:
        """How many of the components ``principal`` may see each host holds, local or remote
        (of applications not terminated); ``leaves_only``: without the containers."""
        query = select(components_table.c.host, func.count()).select_from(components_table.join(
            applications_table, applications_table.c.id == components_table.c.app_id)).where(
            applications_table.c.state != lifecycle.TERMINATED, components_table.c.host.is_not(None))
        if leaves_only:
            query = query.where(components_table.c.type.not_in(sorted(states.CONTAINERS)))
        return dict(conn.execute(tenancy.scoped(query.group_by(components_table.c.host),
                                                principal)).all())

    def _used_capacity(self, conn) -> dict[str, dict[str, float]]:
        """Capacity held by applications that are not terminated, per provider."""
        from cddlm.application.tables import applications
        used: dict[str, dict[str, float]] = {}
        if self.hosts.datacenter is None:
            return used
        rows = conn.execute(select(applications.c.placement)
                            .where(applications.c.state != lifecycle.TERMINATED,
                                   applications.c.placement.is_not(None)))
        for (placement_json,) in rows:
            for where in json.loads(placement_json).get("components", {}).values():
                # a component's allocations (several providers when its demand was split over
                # a host's nested providers); placements recorded before them: its demand
                allocations = where.get("allocations")
                if allocations is None:
                    allocations = {where.get("provider") or where.get("host"): where.get("demand") or {}}
                for provider, amounts in allocations.items():
                    slot = used.setdefault(provider, {})
                    for dim, amount in amounts.items():
                        slot[dim] = slot.get(dim, 0.0) + float(amount)
        return used

    def _intent(self, app_id: str, operation: str, reason: str | None, principal: Principal) -> None:
        now = self.clock()
        with self.store.write() as conn:
            # (without its component tree: the intent and reconcile need none of it)
            app = repo.lock_app(conn, app_id, light=True)
            if app is None:
                raise ResourceUnknown("application %s does not exist" % app_id)
            if operation == "terminate":
                if app.state == lifecycle.TERMINATED or app.desired == lifecycle.TERMINATED:
                    return   # idempotent: nothing changes, nothing to record
                info = app.termination_info if app.state == lifecycle.FAILED else {
                    "normal": True, "reason": reason or "terminated on request", "time": now}
            else:
                lifecycle.check_operation(operation, app.state, app.desired)
                info = None
            # run refines initialize (deploys in flight stay useful); terminate contradicts
            # every earlier intent, so its new generation supersedes the work queued for them
            generation = app.generation + 1 if operation == "terminate" else app.generation
            values: dict[str, Any] = {"desired": lifecycle.INTENT[operation], "generation": generation}
            if info is not None:
                values["termination_info"] = info
            repo.update_app(conn, app_id, **values)
            repo.intend_components(conn, app_id, "running" if operation == "run" else "stopped",
                                   generation)
            if generation != app.generation:
                queue.supersede(conn, app_id, generation)
            for key, value in values.items():
                setattr(app, key, value)
            _, added = reconcile(conn, app_id, now, locked=app)
            audit_log.record(conn, principal, operation, now, app_id=app_id, app_owner=app.owner,
                             detail=reason)
        self._after(work=added)

    def run(self, app_id: str, *, principal: Principal = LOCAL_ADMIN) -> None:
        self._intent(app_id, "run", None, principal)

    def terminate(self, app_id: str, reason: str | None = None, *,
                  principal: Principal = LOCAL_ADMIN) -> None:
        self._intent(app_id, "terminate", reason, principal)

    def destroy(self, app_id: str, *, principal: Principal = LOCAL_ADMIN) -> None:
        with self.store.write() as conn:
            app = repo.lock_app(conn, app_id, light=True)
            if app is None:
                raise ResourceUnknown("application %s does not exist" % app_id)
            lifecycle.check_operation("destroy", app.state, app.desired)
            if self.subscriptions is not None:
                self.subscriptions.producer_gone(conn, app_id, self.clock())
            repo.delete_app(conn, app_id)
            audit_log.record(conn, principal, "destroy", self.clock(), app_id=app_id,
                             app_owner=app.owner, detail=app.name)
        if self.engine is not None:
            self.engine.remove_app_files(app_id)

    def destroy_view(self, view_id: str, *, principal: Principal = LOCAL_ADMIN) -> None:
        with self.store.write() as conn:
            view = repo.get_view(conn, view_id)
            if view is None or repo.delete_view(conn, view_id) == 0:
                raise ResourceUnknown("no application view %s" % view_id)
            audit_log.record(conn, principal, "destroy-view", self.clock(), app_id=view.app_id,
                             app_owner=_owner(conn, view.app_id), detail=view_id)

    def set_view_termination(self, view_id: str, when: float | None, *,
                             principal: Principal = LOCAL_ADMIN) -> float | None:
        """WS-RL SetTerminationTime on an application EPR: the view ends at ``when`` (None:
        never; now or earlier: at once); the application goes on (spec 4.3)."""
        now = self.clock()
        with self.store.write() as conn:
            view = repo.get_view(conn, view_id)
            if when is not None and when <= now:
                found = repo.delete_view(conn, view_id)
            else:
                found = repo.set_view_termination(conn, view_id, when)
            if not found or view is None:
                raise ResourceUnknown("no application view %s" % view_id)
            audit_log.record(conn, principal, "set-view-termination", now, app_id=view.app_id,
                             app_owner=_owner(conn, view.app_id),
                             detail="%s at %s" % (view_id, "never" if when is None else when))
        return when

    def schedule_termination(self, app_id: str, when: float | None, *,
                             principal: Principal = LOCAL_ADMIN) -> float | None:
        """Terminate the application at ``when`` (None: cancel), as the termination-time
        option does at create or initialize."""
        now = self.clock()
        with self.store.write() as conn:
            app = repo.lock_app(conn, app_id)
            if app is None:
                raise ResourceUnknown("application %s does not exist" % app_id)
            if app.state == lifecycle.TERMINATED and when is not None:
                raise UnableToSetTerminationTime("application %s has already terminated" % app_id)
            repo.update_app(conn, app_id, termination_time=when)
            audit_log.record(conn, principal, "schedule-termination", now, app_id=app_id,
                             app_owner=app.owner, detail="never" if when is None else str(when))
        if when is not None and when <= now:
            self.terminate(app_id, "termination time reached", principal=tenancy.SCHEDULER)
        return when

    def fence(self) -> int:
        """Host side (``--fence-seconds``): terminate the delegated sub-applications whose front
        portal has not pinged them in time (``fencing``); returns how many."""
        seconds = self.settings.fence_seconds
        if not seconds:
            return 0
        found = fencing.overdue(self.store, seconds, self.clock())
        for app_id in found:
            self.terminate(app_id, "fenced: its front portal did not renew its lease for %g s" % seconds)
        fencing.forget(self.store)
        return len(found)

    def expire(self) -> int:
        """Terminate applications whose scheduled termination time has passed, and remove
        views past theirs (scheduled job); returns how many applications it terminated."""
        from cddlm.application.tables import applications, views
        now = self.clock()
        with self.store.single() as conn:     # two reads each second: no transaction of their own
            views_due = conn.execute(select(views.c.id).where(views.c.termination_time <= now)
                                     .limit(1)).first() is not None
            due = [r[0] for r in conn.execute(
                select(applications.c.id).where(applications.c.termination_time <= now,
                                                applications.c.desired != lifecycle.TERMINATED))]
        if views_due:
            with self.store.write() as conn:
                repo.expire_views(conn, now)
        for app_id in due:
            try:
                self.terminate(app_id, "termination time reached", principal=tenancy.SCHEDULER)
            except ResourceUnknown:
                pass
        return len(due)

    def ping(self, app_id: str) -> Ping:
        before = self.get(app_id).state
        health = self.engine.check_app(app_id) if self.engine is not None else []
        app = self.get(app_id)
        if app.state != before and self.engine is not None:
            # it moved while its components were looked at (a terminate ending, a failure
            # found): look again, so that the health answered is no older than the state
            health = self.engine.check_app(app_id)
        if fencing.delegated(app.client_token):
            self.front_pinged = self.clock()
        if self.settings.fence_seconds and fencing.delegated(app.client_token):
            fencing.renew(self.store, app_id, self.clock())     # its front portal is alive
        if app.deployment and any(h["state"] == states.STARTING for h in health):
            # what a starting process waits for (its readiness), for progress displays
            tree, now = self.engine.tree(app), self.clock()
            with self.store.read() as conn:
                rows = {c.path: c for c in repo.get_components(conn, app_id)}
            for h in health:
                if h["path"] in rows:
                    h.update(local.readiness_wait(tree, rows[h["path"]], now) or {})
        return Ping(app.state, app.state_info, app.termination_info, health)

    def resolve(self, app_id: str, path: str) -> Any:
        """A component (a dict of its attributes and runtime values) or one value, by path."""
        app = self.get(app_id)
        path = canonical((path or "").strip())    # one spelling: w//grace is w/grace
        if not app.deployment:
            raise ResolutionError("application %s has no component tree yet (initialize it first)"
                                  % app_id, kind="not-initialized", path=path)
        tree = Deployment.from_json(app.deployment)
        if tree.within_secret(path):
            # a secret or a part of one: hidden, whether or not it has that key (an error
            # saying what it holds, or that a key is not there, would tell)
            return secrets.HIDDEN
        with self.store.read() as conn:
            comps = repo.get_components(conn, app_id)
        rows = {c.path: c for c in comps}
        node = tree.find(path) if path else None
        # a delegated sub-application (a ``delegate`` component) resolves to its EPR on the
        # other portal (resolveResponse's applicationReference), once it has one
        if node is not None and node.type == "delegate" and path in rows \
                and rows[path].runtime.get("subApplication"):
            runtime = rows[path].runtime
            return SubApplication(runtime["subApplication"], runtime.get("subApplicationId") or "")
        host_of = lambda p: (rows[p].host if p in rows else "") or ""
        workdir = lambda p: rows[p].workdir if p in rows and rows[p].workdir else ""
        # a value's component: ``web`` of ``web/port`` and of ``web/env/PGPASSWORD``
        comp_path = path if node is not None else tree.split_target(path).component
        there = self._runner(host_of(comp_path))
        if hasattr(there, "value") and comp_path in rows and rows[comp_path].type not in states.CONTAINERS:
            # a host portal runs it: its values (pid, ports, any runtime value) are that
            # portal's, asked of it within one deadline
            with self.engine.waiting_on_portals():
                value = there.value(app_id, comp_path, path)
            if isinstance(value, dict) and node is not None:
                return {k: secrets.redact(tree, path + "/" + k, v) for k, v in value.items()}
            return secrets.redact(tree, path, value)
        # the values the hosts know (ports, a pid on a Slurm node), read as the engine reads them
        lookups = self.engine.lookups() if self.engine is not None else {}
        if node is not None:
            values = HostValues(app, tree, rows, host_of(path), path, workdir, **lookups)
            out = {}
            for key, value in node.attributes.items():
                try:
                    out[key] = values.value(value)
                except ResolutionError:
                    out[key] = None
            for name in RESOLVED_RUNTIME:
                if name not in out:
                    runtime = values.runtime(path, name)
                    if runtime is not None:
                        out[name] = runtime
            return {k: secrets.redact(tree, path + "/" + k, v) for k, v in out.items()}
        values = HostValues(app, tree, rows, host_of(comp_path), comp_path, workdir, **lookups)
        return secrets.redact(tree, path, values.reference(path))

    def _runner(self, host: str) -> Any:
        return self.engine.runners.get(host) if self.engine is not None and host else None

    def sub_applications(self, app_id: str) -> dict[str, tuple[str, str]]:
        """The components another portal enacts: path -> (its sub-application's address, id)."""
        with self.store.read() as conn:
            comps = repo.get_components(conn, app_id)
        return {c.path: (c.runtime["subApplication"], c.runtime.get("subApplicationId") or "")
                for c in comps if c.runtime.get("subApplication")}

    # -- hosts --------------------------------------------------------------------------------
    def mark_host(self, name: str, down: bool, reason: str | None = None, *,
                  principal: Principal = LOCAL_ADMIN) -> None:
        tenancy.require_admin(principal, "ext:setHostState")
        if name not in self.hosts:
            raise BadArgument("unknown host %r (hosts: %s)" % (name, ", ".join(self.hosts.names())))
        now = self.clock()
        with self.store.write() as conn:
            updated = conn.execute(hosts_table.update().where(hosts_table.c.name == name)
                                   .values(down=down, reason=reason, updated=now)).rowcount
            if not updated:
                conn.execute(hosts_table.insert().values(name=name, down=down, reason=reason,
                                                         updated=now))
            audit_log.record(conn, principal, "host-down" if down else "host-up", now,
                             detail="%s%s" % (name, ": " + reason if reason else ""))
        if down and self.engine is not None:
            self.engine.check_all(host=name)


def listing_marker(created: float, app_id: str) -> str:
    """The continuation marker after the application (created, id): opaque to clients."""
    return base64.urlsafe_b64encode(("%r %s" % (created, app_id)).encode()).decode().rstrip("=")


def listing_position(marker: str) -> tuple[float, str]:
    """(created, id) of a continuation marker; ``BadArgument`` for one this portal did not give."""
    marker = marker.strip()
    try:
        if len(marker) > 200:
            raise ValueError
        created, _, app_id = base64.urlsafe_b64decode(marker + "=" * (-len(marker) % 4)) \
            .decode("ascii").partition(" ")
        position = float(created), app_id
        if not app_id.startswith("urn:uuid:") or position[0] != position[0]:
            raise ValueError
    except ValueError:     # binascii.Error and UnicodeDecodeError are ValueErrors
        raise BadArgument("%r is not a continuation marker this portal gave (use the next of "
                          "the previous page, or none for the first page)" % marker[:80]) from None
    return position


def _owner(conn, app_id: str) -> str | None:
    app = repo.get_app(conn, app_id)
    return app.owner if app is not None else None


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _options_json(options: list[opts.Option]) -> list[dict]:
    return [{"name": o.name, "mustUnderstand": o.must_understand, "kind": o.kind, "value": o.text}
            for o in options]


def _component_rows(app_id: str, deployment: Deployment, placement: dict, now: float) -> list[dict]:
    rows = []

    def visit(comp, path: str, parent: str | None, position: int) -> None:
        where = placement.get(path, {})
        rows.append(dict(app_id=app_id, path=path, type=comp.type, parent=parent, position=position,
                         optional=bool(comp.attributes.get("optional")),
                         oneshot=bool(comp.attributes.get("run_to_completion")),
                         host=where.get("host"), provider=where.get("provider"),
                         desired="deployed", observed=states.PENDING, restarts=0, updated=now))
        for i, child in enumerate(comp.children):
            visit(child, path + "/" + child.name, path, i)

    for i, root in enumerate(deployment.components):
        visit(root, root.name, None, i)
    return rows
