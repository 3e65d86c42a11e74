"""The operation tables of the portal and application endpoints, and their handlers.

A handler takes a ``soap.Request`` (a schema-valid body) and returns the response body
element; it raises domain errors, which ``faults`` turns into SOAP faults. The tables map
the body element's QName to the handler and the response's wsa:Action (CONTRACT sections 3-4).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from lxml import etree

from cddlm import __version__, logfields, ns, wsa
from cddlm.application import options as opts
from cddlm.application.repository import App
from cddlm.application.secrets import visible_properties
from cddlm.application.service import Service, SubApplication
from cddlm.application.views import Principal, Views
from cddlm.errors import (BadArgument, ResourceNotDestroyed, ResourceUnknown,
                          TerminationTimeChangeRejected)
from cddlm.lang import registry
from cddlm.notify import topics
from cddlm.notify.messages import portal_address, termination_info
from cddlm.notify.parse import is_nil
from cddlm.portal import messages as m
from cddlm.portal import properties as rp
from cddlm.portal.soap import Endpoint, Operation, Request
from cddlm.xpathsafe import XPathPool
from cddlm.xsdtypes import format_datetime, format_duration, from_now, parse_datetime

API, RL, WSNT = ns.API, ns.WSRF_RL, ns.WSNT
RLW = "http://docs.oasis-open.org/wsrf/rlw-2/"
STATES = ("instantiated", "initialized", "running", "failed", "terminated")
APP_DOCUMENT = "{%s}applicationProperties" % API
# the application properties built from its HEAVY columns (component tree, placement, ...)
HEAVY_PROPERTIES = frozenset({"{%s}deploymentInfo" % API, "{%s}placementAudit" % ns.EXT})


def api_action(port_type: str, op: str) -> str:
    return "%s/%s/%sResponse" % (ns.API_WSDL, port_type, op)


def _q(namespace: str, local: str) -> str:
    return "{%s}%s" % (namespace, local)


def producer_properties(topic: str) -> dict[str, rp.Builder]:
    """WS-BaseNotification's NotificationProducerRP for a producer of one topic."""
    def fixed() -> list[etree._Element]:
        el = etree.Element(_q(WSNT, "FixedTopicSet"), nsmap={"wsnt": WSNT})
        el.text = "true"
        return [el]

    def dialects() -> list[etree._Element]:
        out = []
        for d in topics.DIALECTS:
            el = etree.Element(_q(WSNT, "TopicExpressionDialect"), nsmap={"wsnt": WSNT})
            el.text = d
            out.append(el)
        return out

    return {_q(WSNT, "TopicExpression"):
            lambda: [topics.topic_element(_q(WSNT, "TopicExpression"), topic)],
            _q(WSNT, "FixedTopicSet"): fixed,
            _q(WSNT, "TopicExpressionDialect"): dialects,
            _q(ns.WSTOP, "TopicSet"): lambda: [topics.topic_set(topic)]}


class Handlers:
    def __init__(self, service: Service, started: float, subscriptions: Any = None,
                 views: Views | None = None, *, xpath: XPathPool):
        self.service = service
        self.started = started
        self.subscriptions = subscriptions   # portal.subscriptions.SubscriptionHandlers, when wired
        self.views = views or Views(service)
        self.xpath = xpath                   # evaluates QueryResourceProperties
        self._app_table = self._app_builders()

    # -- portal ---------------------------------------------------------------------------------
    def create(self, req: Request) -> etree._Element:
        b = req.body
        name = m.text(b, "name")
        app, view = self.service.create(name.strip() if name else None, m.text(b, "hostname"),
                                        m.options(m.child(b, "options")), req.portal,
                                        principal=req.principal)
        # systemReference: the same EPR under the 2005/02 wire format's name (its schema
        # fragment answers ResourceId + systemReference), for clients written to it
        return m.element("createResponse", m.element("ResourceId", value=app.id),
                         m.app_reference(view), m.app_reference(view, m.q("systemReference")))

    def lookup(self, req: Request) -> etree._Element:
        rid, name = m.text(req.body, "ResourceId"), m.text(req.body, "name")
        view = self.service.lookup(req.portal, resource_id=rid.strip() if rid is not None else None,
                                   name=name.strip() if name is not None else None,
                                   principal=req.principal)
        return m.element("lookupResponse", m.app_reference(view))

    def rebind(self, req: Request) -> etree._Element:
        ref = wsa.parse_epr(m.child(req.body, "applicationReference"))
        if ref is None:
            raise BadArgument("applicationReference has no Address")
        view = self.service.rebind(req.portal, ref.address, ref.parameter(m.q("ResourceId")),
                                   principal=req.principal)
        return m.element("rebindResponse", m.app_reference(view))

    def portal_properties(self, req: Request) -> rp.Properties:
        return rp.Properties(m.q("portalProperties"), {
            m.q("staticInfo"): lambda: [self.static_info(req.portal)],
            m.q("dynamicInfo"): lambda: [self.dynamic_info(req)],
            m.q("applications"): lambda: [self.applications(req)],
            **producer_properties(topics.CREATED),
            _q(RL, "CurrentTime"): rp.current_time,
            _q(RL, "TerminationTime"): lambda: [rp.termination_time(None)],
            _q(ns.EXT, "portals"): lambda: [self.portals(req.portal)],
        })

    def applications(self, req: Request) -> etree._Element:
        """``api:applications``: the newest ``Limits.max_listed_references`` references;
        when older ones are left out, ``ext:truncated`` says so and names the operation that
        lists them all (``ext:listApplications``)."""
        views, cut = self.service.applications(req.portal, principal=req.principal)
        out = m.element("applications", *[m.app_reference(v) for v in views])
        if cut:
            ext = "{%s}" % ns.EXT
            mark = etree.SubElement(out, ext + "truncated", nsmap={"ext": ns.EXT})
            mark.set("listed", str(len(views)))
            mark.set("operation", "listApplications")
            mark.text = ("the newest %d applications only; ext:listApplications pages "
                         "through them all" % len(views))
        return out

    def list_applications(self, req: Request) -> etree._Element:
        """``ext:listApplications``: a page of the applications the caller may see, in creation
        order, each its id, name, state, created and owner; ``ext:next`` continues it."""
        ext = "{%s}" % ns.EXT
        limit, after = req.body.findtext(ext + "limit"), req.body.findtext(ext + "after")
        page, marker = self.service.list_applications(
            m.integer(limit, "limit"), after, principal=req.principal)
        out = etree.Element(ext + "listApplicationsResponse", nsmap={"ext": ns.EXT})
        for a in page:
            el = etree.SubElement(out, ext + "application", id=a["id"], state=a["state"],
                                  created=format_datetime(a["created"]), owner=a["owner"])
            if a["name"] is not None:
                el.set("name", a["name"])
        if marker is not None:
            etree.SubElement(out, ext + "next").text = marker
        return out

    def portals(self, me: str) -> etree._Element:
        """``ext:portals``: every live portal of the store, its endpoint EPR and times, this
        one marked ``self``."""
        ext = "{%s}" % ns.EXT
        out = etree.Element(ext + "portals", nsmap={"ext": ns.EXT, "wsa": ns.WSA})
        for p in self.service.portals():
            el = etree.SubElement(out, ext + "portal")
            if p["url"].rstrip("/") == me.rstrip("/"):
                el.set("self", "true")
            el.append(wsa.epr(ext + "reference", portal_address(p["url"])))
            etree.SubElement(el, ext + "started").text = format_datetime(p["started"])
            etree.SubElement(el, ext + "heartbeat").text = format_datetime(p["heartbeat"])
        return out

    def static_info(self, portal: str) -> etree._Element:
        info = m.element("staticInfo")
        for key, value in (("name", "cddlm"), ("version", __version__), ("build", __version__),
                           ("home", "https://github.com/cddlm/cddlm"),
                           ("location", portal_address(portal))):
            m.sub(info, key, value)
        langs = m.sub(info, "languages")
        for lang in registry.languages():
            entry = m.sub(langs, "language")
            m.sub(entry, "name", lang.name)
            m.sub(entry, "version", lang.version)
            m.sub(entry, "uri", lang.uri)
        notes = m.sub(info, "notifications")
        m.sub(notes, "mechanism", ns.WSNT)
        options = m.sub(info, "options")
        for uri in opts.ALL:
            m.sub(options, "option", uri)
        return info

    def dynamic_info(self, req: Request) -> etree._Element:
        now = time.time()
        data = self.service.dynamic_info(principal=req.principal)
        info = m.element("dynamicInfo")
        m.sub(info, "time", format_datetime(now))
        m.sub(info, "uptime", format_duration(now - self.started))
        for state in STATES:
            m.sub(info, "applicationCount", data["counts"].get(state, 0)).set("state", state)
        hosts = m.sub(info, "hosts")
        for h in data["hosts"]:
            el = m.sub(hosts, "host")
            el.set("name", h["name"])
            el.set("agent", h["agent"])
            el.set("down", "true" if h["down"] else "false")
            el.set("components", str(h["components"]))
            for dim, amount in h["free"].items():
                m.sub(el, "free", amount).set("resource", dim)
            for p in h.get("providers", []):     # NUMA nodes and devices below the host
                below = m.sub(el, "provider")
                below.set("name", p["name"])
                for dim, amount in p["free"].items():
                    m.sub(below, "free", amount).set("resource", dim)
        m.sub(info, "pendingWork", data["pending"])
        m.sub(info, "undeliveredNotifications", data["undelivered"])
        return info

    def set_host_state(self, req: Request) -> etree._Element:
        ext = "{%s}" % ns.EXT
        name = (req.body.findtext(ext + "host") or "").strip()
        down = (req.body.findtext(ext + "down") or "").strip() in ("true", "1")
        reason = req.body.findtext(ext + "reason")
        self.service.mark_host(name, down, reason.strip() if reason else None,
                               principal=req.principal)
        host = next(h for h in self.service.dynamic_info(principal=req.principal)["hosts"]
                    if h["name"] == name)
        out = etree.Element(ext + "setHostStateResponse", nsmap={"ext": ns.EXT})
        el = etree.SubElement(out, ext + "host", name=name, agent=host["agent"],
                              down="true" if host["down"] else "false")
        if reason and down:
            etree.SubElement(el, ext + "reason").text = m.clean(reason)
        return out

    # -- application ----------------------------------------------------------------------------
    def app(self, req: Request, light: bool = False) -> App:
        view_id = view_of(req)
        if not view_id:
            raise ResourceUnknown("the request names no application (address /cddlm/applications/ID)")
        app = self.service.app_for_view(view_id, req.resource_id(), principal=req.principal,
                                        light=light)
        logfields.bind(application=app.id)
        return app

    def producer(self, req: Request) -> tuple[str, str]:
        """The application a request to a view names, and the view: a notification producer."""
        return self.app(req).id, view_of(req)

    def initialize(self, req: Request) -> etree._Element:
        app = self.app(req)
        b = req.body
        self.service.initialize(app.id, m.descriptor(m.child(b, "descriptor")),
                                m.properties(m.child(b, "properties")),
                                m.options(m.child(b, "options")), principal=req.principal)
        return m.element("initializeResponse")

    def run(self, req: Request) -> etree._Element:
        self.service.run(self.app(req).id, principal=req.principal)
        return m.element("runResponse")

    def terminate(self, req: Request) -> etree._Element:
        reason = m.text(req.body, "reason")
        self.service.terminate(self.app(req).id, reason.strip() if reason else None,
                               principal=req.principal)
        return m.element("terminateResponse")

    def destroy(self, req: Request) -> etree._Element:
        self.service.destroy(self.app(req).id, principal=req.principal)
        return m.element("destroyResponse")

    def ping(self, req: Request) -> etree._Element:
        result = self.service.ping(self.app(req).id)
        out = m.element("pingResponse", m.element("state", value=result.state))
        if result.state_info:
            out.append(m.element("stateInfo", value=result.state_info))
        health = m.sub(out, "health")
        for h in result.health:
            c = m.sub(health, "component", h.get("detail") or None)
            for key in ("path", "type", "host", "state"):
                if h.get(key):
                    c.set(key, str(h[key]))
            c.set("healthy", "true" if h["healthy"] else "false")
            if h.get("pid"):
                c.set("pid", str(h["pid"]))
            c.set("restarts", str(h.get("restarts") or 0))
            set_waiting(c, h)
        if result.termination_info:
            out.append(termination_info(result.termination_info))
        return out

    def resolve(self, req: Request) -> etree._Element:
        app = self.app(req)
        value = self.service.resolve(app.id, m.text(req.body, "path") or "")
        if isinstance(value, SubApplication):
            return m.element("resolveResponse", wsa.epr(m.q("applicationReference"), value.address,
                                                        value.resource_id or None))
        return m.element("resolveResponse", m.value_element("value", value))

    def logs(self, req: Request) -> etree._Element:
        """``ext:logs``: a component's stdout or stderr, read where the component runs."""
        app = self.app(req)
        ext = "{%s}" % ns.EXT
        b = req.body
        lines, offset = b.findtext(ext + "lines"), b.findtext(ext + "offset")
        found = self.views.log(req.principal, app.id, (b.findtext(ext + "component") or "").strip(),
                               (b.findtext(ext + "stream") or "stdout").strip(),
                               lines=m.integer(lines or None, "lines"),
                               offset=m.integer(offset or None, "offset"))
        out = etree.Element(ext + "logsResponse", nsmap={"ext": ns.EXT}, component=found["path"],
                            stream=found["stream"],
                            available="true" if found["available"] else "false",
                            offset=str(found["offset"]))
        if found["host"]:
            out.set("host", found["host"])
        for line in found["lines"]:
            etree.SubElement(out, ext + "line").text = m.clean(line)
        return out

    def components(self, app: App, req: Request) -> etree._Element:
        """``ext:components``: the component table as the portal records it, with ports."""
        ext = "{%s}" % ns.EXT
        out = etree.Element(ext + "components", nsmap={"ext": ns.EXT})
        for c in self.views.components(req.principal, app.id):
            el = etree.SubElement(out, ext + "component", path=c["path"], type=c["type"],
                                  state=c["state"])
            for key in ("desired", "host", "provider", "pid", "restarts", "exitCode", "exitSignal",
                        "subApplication", "subApplicationId"):
                if c.get(key) is not None:
                    el.set(key, str(c[key]))
            if c["optional"]:
                el.set("optional", "true")
            if c["ports"]:
                el.set("ports", " ".join(str(p) for p in c["ports"]))
            set_waiting(el, c)
            if c.get("info"):
                etree.SubElement(el, ext + "info").text = m.clean(c["info"])
        return out

    def destroy_view(self, req: Request) -> etree._Element:
        self.app(req)
        self.service.destroy_view(view_of(req), principal=req.principal)
        return etree.Element(_q(RL, "DestroyResponse"), nsmap={"wsrf-rl": RL})

    def set_termination_time(self, req: Request) -> etree._Element:
        """WS-RL SetTerminationTime on an application EPR ends that view, not the application
        (spec 4.3); ``ext:scheduleTermination`` ends the application."""
        self.app(req)
        when, now = requested_time(req.body, RL, "RequestedTerminationTime", "RequestedLifetimeDuration")
        new = self.service.set_view_termination(view_of(req), when, principal=req.principal)
        return set_termination_response(new, now)

    def schedule_termination(self, req: Request) -> etree._Element:
        """``ext:scheduleTermination``: terminate the application at a time (nil: cancel), as
        the termination-time option does."""
        app = self.app(req)
        when, now = requested_time(req.body, ns.EXT, "at", "after")
        new = self.service.schedule_termination(app.id, when, principal=req.principal)
        out = etree.Element(_q(ns.EXT, "scheduleTerminationResponse"), nsmap={"ext": ns.EXT})
        out.append(rp.termination_time(new, _q(ns.EXT, "scheduledTermination")))
        etree.SubElement(out, _q(ns.EXT, "currentTime")).text = format_datetime(now)
        return out

    # -- WS-ResourceLifetime on the portal ------------------------------------------------------
    def destroy_portal(self, req: Request) -> etree._Element:
        raise ResourceNotDestroyed("the portal endpoint is not destroyed through its API (it lives "
                                   "as long as its process); wsrf-rl:Destroy applies to "
                                   "application views and subscriptions")

    def set_portal_termination_time(self, req: Request) -> etree._Element:
        when, now = requested_time(req.body, RL, "RequestedTerminationTime", "RequestedLifetimeDuration")
        if when is not None:
            raise TerminationTimeChangeRejected("the portal has no scheduled termination; only nil "
                                                "(never) is accepted")
        return set_termination_response(None, now)

    def app_properties(self, req: Request) -> rp.Properties:
        # the application's component tree, placement and properties are read only for the
        # properties built from them
        names = rp.requested(req.body)
        light = names is not None and HEAVY_PROPERTIES.isdisjoint(names)
        return rp.Properties(APP_DOCUMENT, self._app_table, (self.app(req, light), req))

    def _app_builders(self) -> dict[str, Callable[[App, Request], list[etree._Element]]]:
        """The application's resource properties in document order, each a function of the
        application and the request: built once, not per request (the hot path)."""
        return {
            m.q("name"): lambda app, req: [m.element("name", value=app.name)] if app.name else [],
            m.q("id"): lambda app, req: [m.element("id", value=app.id)],
            m.q("deploymentInfo"): lambda app, req: [self.deployment_info(app, req.principal)],
            m.q("state"): lambda app, req: [m.element("state", value=app.state)],
            m.q("stateInfo"): lambda app, req: [m.element("stateInfo", value=app.state_info)]
            if app.state_info else [],
            m.q("terminationInfo"): lambda app, req: [termination_info(app.termination_info)]
            if app.termination_info else [],
            m.q("created"): lambda app, req: [m.timestamp("created", app.created)],
            m.q("started"): lambda app, req: [m.timestamp("started", app.started) if app.started
                                              else rp.termination_time(None, m.q("started"))],
            m.q("terminated"): lambda app, req: [m.timestamp("terminated", app.terminated)]
            if app.terminated else [],
            m.q("stateHistory"): lambda app, req: [self.state_history(app)],
            _q(RL, "CurrentTime"): lambda app, req: rp.current_time(),
            _q(RL, "TerminationTime"): lambda app, req: [rp.termination_time(app.view_termination_time)],
            **{qname: (lambda build: lambda app, req: build())(build)
               for qname, build in producer_properties(topics.LIFECYCLE).items()},
            _q(ns.EXT, "placementAudit"): lambda app, req: [placement_audit(app.placement.get("audit"))]
            if app.placement and app.placement.get("audit") else [],
            _q(ns.EXT, "scheduledTermination"): lambda app, req: [
                rp.termination_time(app.termination_time, _q(ns.EXT, "scheduledTermination"))],
            _q(ns.EXT, "components"): lambda app, req: [self.components(app, req)],
        }

    def deployment_info(self, app: App, principal: Principal) -> etree._Element:
        info = m.element("deploymentInfo")
        if app.language:
            m.sub(info, "language", app.language)
        if app.descriptor_digest:
            m.sub(info, "descriptorDigest", app.descriptor_digest)
        if app.properties:
            shown, hidden = visible_properties(app.properties, app.deployment)
            info.append(m.properties_element("properties", shown, hidden))
        if app.options:
            info.append(m.options_element("options", app.options))
        if app.placement:
            subs = self.service.sub_applications(app.id)
            # a running component's pid and ports on its host (a host portal's, as it reports them)
            live = {c["path"]: c for c in self.views.components(principal, app.id) if c["pid"]}
            placement = m.sub(info, "placement")
            types = {}
            if app.deployment:
                from cddlm.lang.model import Deployment
                types = {p: c.type for p, c in Deployment.from_json(app.deployment).walk()}
            for path, where in sorted(app.placement.get("components", {}).items()):
                c = m.sub(placement, "component")
                c.set("path", path)
                c.set("type", types.get(path, "process"))
                if where.get("host"):
                    c.set("host", where["host"])
                if where.get("provider"):
                    c.set("provider", where["provider"])
                if path in live:
                    c.set("pid", str(live[path]["pid"]))
                    if live[path]["ports"]:
                        c.set("ports", " ".join(str(p) for p in live[path]["ports"]))
                for provider, amounts in sorted((where.get("allocations") or {}).items()):
                    for dim, amount in sorted(amounts.items()):   # what it holds, and where
                        a = m.sub(c, "allocation", _number(amount))
                        a.set("provider", provider)
                        a.set("resource", dim)
                if path in subs:    # the sub-application on its host portal that runs it
                    c.append(wsa.epr(m.q("applicationReference"), *subs[path]))
        return info

    def state_history(self, app: App) -> etree._Element:
        hist = m.element("stateHistory")
        for seq, state, at, info in self.service.history(app.id):
            t = m.sub(hist, "transition")
            t.set("sequence", str(seq))
            m.sub(t, "state", state)
            m.sub(t, "time", format_datetime(at))
            if info:
                m.sub(t, "info", info)
        return hist

    # -- tables ---------------------------------------------------------------------------------
    def endpoints(self) -> tuple[Endpoint, Endpoint]:
        portal_ops = {
            m.q("createRequest"): Operation(self.create, api_action("Portal", "create")),
            m.q("lookupRequest"): Operation(self.lookup, api_action("Portal", "lookup"), direct=True),
            m.q("rebindRequest"): Operation(self.rebind, api_action("Portal", "rebind")),
            _q(ns.EXT, "setHostStateRequest"): Operation(self.set_host_state,
                                                           ns.EXT + ":Portal:setHostStateResponse"),
            _q(ns.EXT, "listApplicationsRequest"): Operation(
                self.list_applications, ns.EXT + ":Portal:listApplicationsResponse"),
            _q(RL, "Destroy"): Operation(self.destroy_portal,
                                         RLW + "ImmediateResourceTermination/DestroyResponse"),
            _q(RL, "SetTerminationTime"): Operation(
                self.set_portal_termination_time,
                RLW + "ScheduledResourceTermination/SetTerminationTimeResponse"),
            **rp.operations(self.portal_properties, self.xpath),
        }
        app_ops = {
            m.q("initializeRequest"): Operation(self.initialize, api_action("Application", "initialize")),
            m.q("runRequest"): Operation(self.run, api_action("Application", "run")),
            m.q("pingRequest"): Operation(self.ping, api_action("Application", "ping")),
            m.q("resolveRequest"): Operation(self.resolve, api_action("Application", "resolve")),
            m.q("terminateRequest"): Operation(self.terminate, api_action("Application", "terminate")),
            m.q("destroyRequest"): Operation(self.destroy, api_action("Application", "destroy")),
            _q(RL, "Destroy"): Operation(self.destroy_view,
                                         RLW + "ImmediateResourceTermination/DestroyResponse"),
            _q(RL, "SetTerminationTime"): Operation(
                self.set_termination_time, RLW + "ScheduledResourceTermination/SetTerminationTimeResponse"),
            _q(ns.EXT, "scheduleTerminationRequest"): Operation(
                self.schedule_termination, ns.EXT + ":Application:scheduleTerminationResponse"),
            _q(ns.EXT, "logsRequest"): Operation(self.logs, ns.EXT + ":Application:logsResponse"),
            **rp.operations(self.app_properties, self.xpath),
        }
        if self.subscriptions is not None:
            portal_ops.update(self.subscriptions.producer_operations(
                topics.PORTAL, lambda req: (ns.PORTAL_PRODUCER, None)))
            app_ops.update(self.subscriptions.producer_operations(topics.APPLICATION, self.producer))
        return Endpoint("portal", portal_ops), Endpoint("application", app_ops)


def _number(amount: float) -> str:
    return str(int(amount)) if float(amount).is_integer() else repr(float(amount))


def set_waiting(el: etree._Element, component: dict) -> None:
    """``ext:waitingFor``, ``ext:waited`` and ``ext:timeout`` on a starting component's element."""
    if component.get("waitingFor"):
        el.set(_q(ns.EXT, "waitingFor"), m.clean(component["waitingFor"]))
        el.set(_q(ns.EXT, "waited"), "%.1f" % component["waited"])
        el.set(_q(ns.EXT, "timeout"), "%g" % component["timeout"])


def view_of(req: Request) -> str:
    """The view an application request is addressed to (the last segment of its address)."""
    return req.path.strip("/").split("/")[0]


def requested_time(body: etree._Element, namespace: str, at: str,
                   after: str) -> tuple[float | None, float]:
    """(the time a SetTerminationTime-shaped request asks for: a nillable dateTime ``at`` or
    a duration ``after`` from now, None for nil; now)."""
    requested = body.find(_q(namespace, at))
    duration = body.find(_q(namespace, after))
    now = time.time()
    if requested is not None:
        return (None if is_nil(requested) else parse_datetime(requested.text or "")), now
    if duration is not None:
        return from_now(duration.text or "", now), now
    raise BadArgument("the request needs %s or %s" % (at, after))


def set_termination_response(new: float | None, now: float) -> etree._Element:
    out = etree.Element(_q(RL, "SetTerminationTimeResponse"), nsmap={"wsrf-rl": RL, "xsi": ns.XSI})
    out.append(rp.termination_time(new, _q(RL, "NewTerminationTime")))
    etree.SubElement(out, _q(RL, "CurrentTime")).text = format_datetime(now)
    return out


def placement_audit(audit: dict) -> etree._Element:
    ext = "{%s}" % ns.EXT
    out = etree.Element(ext + "placementAudit", nsmap={"ext": ns.EXT})
    for key in ("status", "solver", "objective"):
        if audit.get(key) is not None:
            out.set(key, str(audit[key]))
    for p in audit.get("policies", []):
        el = etree.SubElement(out, ext + "policy", index=str(p["index"]), type=str(p["type"]),
                              hard="true" if p.get("hard", True) else "false",
                              met="true" if p.get("met") else "false")
        for key in ("violations", "weight", "level", "scope"):
            if p.get(key) is not None:
                el.set(key, str(p[key]))
        for component, where in (p.get("members") or {}).items():
            text = where if not isinstance(where, dict) else " ".join(
                "%s=%s" % kv for kv in sorted(where.items()))
            etree.SubElement(el, ext + "member", component=str(component)).text = m.clean(text)
        for component in p.get("violated_members") or []:
            etree.SubElement(el, ext + "violated").text = str(component)
    return out
