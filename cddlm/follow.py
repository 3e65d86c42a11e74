"""Following applications through notifications: what ``cddlm watch`` does.

One application: subscribe to its lifecycle, print its history so far, then each event as it
arrives, until it terminates. Every application: subscribe to the portal's
ApplicationCreated topic, then follow each application that exists or is created, and go on
until interrupted. An application's history is read after subscribing and events are
printed by sequence, each once, so nothing falls between the two. Subscriptions are short
(ten minutes) and renewed while watching, so a watcher that dies leaves nothing behind for
long; a normal end unsubscribes them all.
"""

from __future__ import annotations

import time
from typing import Callable, TextIO

from cddlm import ns
from cddlm.client import (Application, Listener, Portal, PortalFault, Reference, Subscription,
                          Unreachable)
from cddlm.listener import Event

LIFETIME = "PT10M"
RENEW_EVERY = 300.0
A = "{%s}" % ns.API


class Follower:
    def __init__(self, portal: Portal, listener: Listener, out: TextIO,
                 clock: Callable[[], float] = time.monotonic):
        self.portal = portal
        self.listener = listener
        self.out = out
        self.clock = clock
        self.subscriptions: dict[str, Subscription] = {}    # application id (or "portal") -> sub
        self.labels: dict[str, str] = {}
        self.printed: dict[str, int] = {}                    # application id -> last sequence shown
        self.states: dict[str, str] = {}
        self._renewed = clock()

    # -- what to follow ---------------------------------------------------------------------------
    def follow_portal(self, page: int | None = None) -> None:
        """Every application that may still change, however many (listed ``page`` at a time),
        and every one created from now on (the portal's subscription is made first)."""
        self.subscriptions["portal"] = self.portal.subscribe(self.listener.url("portal"),
                                                             termination=LIFETIME)
        for row in self.portal.each_application(page):
            if row["state"] == "terminated" or row["id"] in self.subscriptions:
                continue
            try:
                app = self.portal.lookup(row["id"])
            except PortalFault as e:
                if e.fault != "NoSuchApplicationFault":
                    raise
                continue        # destroyed since it was listed
            self.follow(app, row.get("name"))

    def follow(self, app: Application, name: str | None = None) -> None:
        if app.id in self.subscriptions:
            return
        self.subscriptions[app.id] = app.subscribe(self.listener.url("app"), termination=LIFETIME)
        props = {el.tag: el for el in app.property_many("name", "stateHistory")}
        self.labels[app.id] = name or (props.get(A + "name").text if A + "name" in props else app.id)
        previous = None
        for t in props[A + "stateHistory"]:
            state = t.findtext(A + "state")
            self._show(app.id, int(t.get("sequence")), t.findtext(A + "time"), previous, state)
            previous = state

    # -- running --------------------------------------------------------------------------------
    def run(self, until_terminated: str | None = None) -> None:
        """Print events until interrupted, or until application ``until_terminated`` is."""
        while until_terminated is None or self.states.get(until_terminated) != "terminated":
            event = self.listener.get(timeout=1.0)
            if event is not None:
                self.handle(event)
            if self.clock() - self._renewed > RENEW_EVERY:
                self.renew()

    def handle(self, event: Event) -> None:
        if event.kind == "created" and event.application is not None and event.resource_id:
            label = event.name or event.resource_id
            self._line(event.timestamp, label, "created", event.resource_id)
            app = self.portal.application(_reference(event))
            try:
                self.follow(app, event.name)
            except PortalFault:   # destroyed already
                pass
        elif event.kind == "lifecycle" and event.resource_id and event.sequence:
            self._show(event.resource_id, event.sequence, event.timestamp, event.previous_state,
                       event.state)

    def _show(self, app_id: str, sequence: int, when: str | None, previous: str | None,
              state: str | None) -> None:
        if sequence <= self.printed.get(app_id, 0):
            return
        self.printed[app_id] = sequence
        self.states[app_id] = state or ""
        change = "%s -> %s" % (previous, state) if previous else str(state)
        self._line(when, self.labels.get(app_id, app_id), change, "#%d" % sequence)
        if state == "terminated" and "portal" in self.subscriptions:
            self._drop(app_id)        # nothing follows termination but destroy

    def _line(self, when: str | None, label: str, what: str, extra: str) -> None:
        self.out.write("%-24s  %-20s  %-28s  %s\n" % (when or "", label, what, extra))
        self.out.flush()

    def renew(self) -> None:
        self._renewed = self.clock()
        for key, sub in list(self.subscriptions.items()):
            try:
                sub.renew(LIFETIME)
            except PortalFault:
                del self.subscriptions[key]

    def _drop(self, key: str) -> None:
        sub = self.subscriptions.pop(key, None)
        if sub is not None:
            try:
                sub.unsubscribe()
            except (PortalFault, Unreachable):
                pass

    def close(self) -> None:
        for key in list(self.subscriptions):
            self._drop(key)


def _reference(event: Event) -> Reference:
    ref = event.application
    return Reference(ref.address, ref.parameter(A + "ResourceId") or event.resource_id or "")
