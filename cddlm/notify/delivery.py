"""Delivery: one dispatcher thread over the outbox and a pool of sender threads.

The dispatcher does all the database work, in one write transaction per round: record what
the senders found, fan out new events, claim due subscriptions. Message-content filters are
evaluated before that transaction, from a read, by a helper process within the filter budget
(``cddlm.xpathsafe``): a user's XPath never runs while the store is locked, and a filter that
passes its budget fails its subscription. It builds each claimed
batch's Notify request and hands it to a sender, then sleeps until it is woken (new events
committed, a sender done, a subscription resumed) or the next retry is due; it also polls
every ``delivery_poll_interval`` for events other portals wrote. Senders only do HTTP.

A slow or dead consumer never holds up the others, nor one subscriber (tenant) the others:
each request has connect and read timeouts and a deadline; the due subscriptions are claimed
in turns by subscriber (each one's most overdue first), and the ``delivery_workers`` senders
are shared by consumer host and by subscriber as ``senders`` says, both by the claims (up to
twice as many requests in flight as there are senders) and by the senders picking their next
request. A failing subscription backs off without blocking anyone, and only subscriptions
whose head is due are claimed.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import Counter, OrderedDict
from typing import Callable
from urllib.parse import urlsplit

from lxml import etree

from cddlm import metrics, ns, wsa, xmlsafe
from cddlm.application.enactment.queue import live_engines as queue_live
from cddlm.application.store import Store
from cddlm.config import Settings
from cddlm.errors import Busy, QueryError, StoreUnavailable
from cddlm.notify import messages, outbox, records
from cddlm.notify.outbound import Sender
from cddlm.notify.senders import Senders, Shares
from cddlm.xpathsafe import BudgetExceeded, XPathPool

log = logging.getLogger(__name__)
MAINTENANCE_INTERVAL = 1.0
PRUNE_INTERVAL = 60.0     # a sweep of the outbox starts this long after the last one started
PRUNE_STEP = 2000         # event ids one maintenance pass of a sweep looks at
FAN_OUT_LIMIT = 1000
IDLE_GAP = 0.02   # seconds between rounds that found nothing to do


def _base(url: str) -> str:
    return (url or "").rstrip("/")


class _Bounded(OrderedDict):
    """A cache that forgets its oldest entries beyond ``size``."""

    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def put(self, key, value):
        self[key] = value
        if len(self) > self.size:
            self.popitem(last=False)
        return value

    def get_or(self, key, make: Callable):
        value = self.get(key)
        return value if value is not None else self.put(key, make())


class Delivery:
    def __init__(self, store: Store, settings: Settings, owner: str, *,
                 clock: Callable[[], float] = time.time, sender: Sender | None = None,
                 portal_url: Callable[[], str] | None = None, xpath: XPathPool | None = None):
        self.store = store
        self.settings = settings
        self.owner = owner
        limits = settings.limits
        self.xpath = xpath or XPathPool(1, seconds=limits.filter_seconds, wait=30.0,
                                        max_chars=limits.max_expression_chars)
        # the base URL of the portal delivering: its Notify requests name its own manager and
        # application views (None: the portal each subscription was made through)
        self.portal_url = portal_url
        self.clock = clock
        self.sender = sender or Sender(settings)
        self.workers = max(1, settings.delivery_workers)
        self.flight = Shares(2 * self.workers)     # requests claimed and not yet recorded
        self.senders = Senders(self.workers, self._send)
        self.lease = 2 * (settings.delivery_connect_timeout + 2 * settings.delivery_timeout) + 10
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._results: queue.SimpleQueue[outbox.Outcome] = queue.SimpleQueue()
        self._heads = _Bounded(4096)          # (sub id, portal, view) -> (Route, head bytes)
        self._payloads = _Bounded(16384)      # event id -> payload bytes
        self._thread: threading.Thread | None = None
        self._pending_outcomes: list[outbox.Outcome] = []   # found by senders, not yet recorded
        self._next_maintenance = 0.0
        self._next_prune = 0.0
        self._sweep: tuple[int, int] | None = None   # (ids below done, the newest to look at)

    # -- life -------------------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self.senders.start()
        self._thread = threading.Thread(target=self._loop, name="cddlm-dispatch", daemon=True)
        self._thread.start()

    def stop(self, grace: float = 2.0) -> None:
        """Stop claiming, give requests in flight ``grace`` seconds, record what they found and
        release every lease (an unfinished batch is sent again later: at least once)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for batch, _, _ in self.senders.stop():     # never sent: not in flight any more
            self.flight.count(self.flight.held, _host(batch.address), batch.subscriber, -1)
        deadline = time.monotonic() + grace
        while self.flight.busy() and time.monotonic() < deadline:
            self._drain(block=0.05)
        try:
            with self.store.write() as conn:
                outcomes = self._pending_outcomes
                if outcomes:
                    outbox.record(conn, self.owner, self.clock(), outcomes, self.settings)
                outbox.release(conn, self.owner)
        except StoreUnavailable as e:
            log.warning("cannot release notification leases: %s", e)
        self._pending_outcomes = []
        self.sender.close()
        self.xpath.close()

    def wake(self) -> None:
        self._wake.set()

    # -- the dispatcher ---------------------------------------------------------------------------
    def _drain(self, block: float = 0.0) -> None:
        try:
            while True:
                o = self._results.get(timeout=block) if block else self._results.get_nowait()
                block = 0.0
                self.flight.count(self.flight.held, _host(o.batch.address), o.batch.subscriber, -1)
                self._pending_outcomes.append(o)
        except queue.Empty:
            pass

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._drain()
            now = self.clock()
            try:
                wait = self._round(now)
                if wait > 0:
                    # an idle round: the next wake-up (one per state change, hundreds a second
                    # under load) need not come sooner than IDLE_GAP; a busy one goes on at once
                    self._stop.wait(IDLE_GAP)
                if now >= self._next_maintenance:
                    self._maintain(now)
            except StoreUnavailable as e:
                log.warning("notification delivery cannot reach the store: %s", e)
                wait = 1.0
            except Exception:
                log.exception("notification dispatcher round failed")
                wait = 1.0
            if wait > 0:
                self._wake.wait(wait)

    def _round(self, now: float) -> float:
        """One round; returns how long to sleep before the next."""
        capacity = self.flight.size - self.flight.busy()
        with self.store.single() as conn:
            unfanned, due = outbox.pending(conn, now)
        claimable = capacity > 0 and due is not None and due <= now
        if not (self._pending_outcomes or unfanned or claimable):
            return min(self.settings.delivery_poll_interval,
                       max(0.01, due - now) if due is not None else float("inf"))
        outcomes = self._pending_outcomes
        claimed: Counter = Counter()       # this round's, until they are handed to senders

        def take(address: str, subscriber: str, waiting: set[str]) -> bool:
            if not self.flight.allows(_host(address), subscriber, waiting, claimed):
                return False
            self.flight.count(claimed, _host(address), subscriber)
            return True

        postgres = not self.store.is_sqlite
        matched: dict[tuple[str, int], bool] = {}
        failing: dict[str, str] = {}
        if unfanned:
            with self.store.single() as conn:
                pairs = outbox.filter_pairs(conn, now, FAN_OUT_LIMIT)
            matched, failing = self._evaluate(pairs)      # outside any transaction
        with self.store.write() as conn:
            if outcomes:
                outbox.record(conn, self.owner, now, outcomes, self.settings)
            if failing:
                outbox.fail_filters(conn, failing, now)
            fanned = outbox.fan_out(conn, now, FAN_OUT_LIMIT, postgres, matched)
            batches = outbox.claim(conn, self.owner, now, self.lease, capacity,
                                   self.settings.delivery_batch, postgres, take) if capacity > 0 else []
            wanted = {i for b in batches for i in b.events}
            payloads = {i: self._payloads[i] for i in wanted if i in self._payloads}
            loaded = outbox.load_events(conn, sorted(wanted - payloads.keys())) if batches else {}
            names = self._names(conn, batches, now)
        self._pending_outcomes = []
        for event in loaded.values():        # each message serialized once for every subscriber
            payloads[event.id] = self._payloads.put(event.id, _payload_bytes(event))
        for batch in batches:
            self._submit(batch, [payloads[i] for i in batch.events], *names[batch.sub_id])
        # go on at once while there is more to do; else sleep until woken (or the next poll)
        return 0.0 if fanned >= FAN_OUT_LIMIT or batches else self.settings.delivery_poll_interval

    def _names(self, conn, batches: list[outbox.Batch], now: float) -> dict[str, tuple]:
        """Per claimed subscription, (portal, view) its Notify names. Spec 6.3: the EPRs the
        subscriber used, whichever portal delivers: the portal it subscribed through and the
        view ``records.view_to_name`` chooses there; when that portal no longer lives (it left
        the store's heartbeats), this one, as the subscriber's calls then go (issue 12).
        Without ``portal_url``: the subscription's own."""
        me = self.portal_url() if self.portal_url is not None else None
        views: dict[tuple, str | None] = {}
        live: set[str] | None = None
        out = {}
        for b in batches:
            if me is None:
                out[b.sub_id] = (b.portal, b.view)
                continue
            portal = b.portal
            if _base(portal) != _base(me):
                if live is None:
                    live = {_base(r[1]) for r in queue_live(conn, now, 3 * self.settings.heartbeat_seconds)}
                if _base(portal) not in live:
                    portal = me
            if b.producer == ns.PORTAL_PRODUCER:
                out[b.sub_id] = (portal, b.view)
                continue
            key = (b.producer, b.view, portal)
            if key not in views:
                views[key] = records.view_to_name(conn, b.producer, b.view, portal, now)
            out[b.sub_id] = (portal, views[key])
        return out

    def _submit(self, batch: outbox.Batch, payloads: list[bytes], portal: str,
                view: str | None) -> None:
        route, head = self._heads.get_or((batch.sub_id, portal, view),
                                         lambda: self._route(batch, portal, view))
        request = messages.notify_request(route, head, payloads)
        host = _host(batch.address)
        self.flight.count(self.flight.held, host, batch.subscriber)
        self.senders.put(host, batch.subscriber, (batch, request, self.clock()))

    def _send(self, job: tuple[outbox.Batch, bytes, float]) -> None:
        batch, request, started = job
        try:
            error = self.sender.post(batch.address, request, messages.NOTIFY_ACTION)
        except Exception as e:   # a bug must not lose the outcome (and the in-flight slot)
            log.exception("sending to %s failed unexpectedly", batch.address)
            error = "internal error: %s" % type(e).__name__
        if error is not None:
            log.info("notification to %s failed: %s", batch.address, error)
        metrics.delivered(_host(batch.address), self.clock() - started, error is not None)
        self._results.put(outbox.Outcome(batch, started, error))
        self._wake.set()

    def _route(self, batch: outbox.Batch, portal: str, view: str | None):
        consumer = wsa.parse_epr(xmlsafe.parse(batch.consumer.encode("utf-8"))) or wsa.Reference(batch.address)
        route = messages.Route(batch.sub_id, portal, batch.producer, view, batch.topic, consumer)
        return route, route.head()

    def _evaluate(self, pairs: list[outbox.FilterPair]) -> tuple[dict, dict]:
        """Each filtered subscription's filter over its events of this round, in one helper
        call per subscription: {(sub id, event id): matches}, and {sub id: why it fails} for
        filters that passed their budget. A pair left out (the helpers busy) waits for the next
        round."""
        by_sub: dict[str, list[outbox.FilterPair]] = {}
        for pair in pairs:
            by_sub.setdefault(pair.sub_id, []).append(pair)
        matched: dict[tuple[str, int], bool] = {}
        failing: dict[str, str] = {}
        seconds = self.settings.limits.filter_seconds
        for sub_id, mine in by_sub.items():
            filters = [tuple(f) for f in json.loads(mine[0].message_filter)]
            payloads = [self._payloads.get_or(p.event.id, lambda p=p: _payload_bytes(p.event))
                        for p in mine]
            try:
                results = self.xpath.filter(filters, payloads, seconds * len(mine))
            except BudgetExceeded:
                failing[sub_id] = ("the message filter took longer than its budget (%gs a "
                                   "message); subscribe again with a cheaper one" % seconds)
                results = [False] * len(mine)
            except Busy:
                continue
            except QueryError:      # refused at subscribe already; a non-match
                results = [False] * len(mine)
            for pair, ok in zip(mine, results):
                matched[(sub_id, pair.event.id)] = ok
        return matched, failing

    def _maintain(self, now: float) -> None:
        self._next_maintenance = now + MAINTENANCE_INTERVAL
        prune = self._sweep is not None or now >= self._next_prune
        with self.store.single() as conn:
            todo = outbox.maintenance(conn, now, self.owner)
        if not (any(todo) or prune):
            return
        with self.store.write() as conn:
            if todo.expirable:
                outbox.expire(conn, now)
            if todo.unwanted:
                outbox.mark_unwanted(conn, now)
            if todo.orphaned:
                outbox.release_orphaned(conn, self.owner)
            if prune:
                self._prune_step(conn, now)

    def _prune_step(self, conn, now: float) -> None:
        """One step of the sweep that prunes the outbox: ``PRUNE_STEP`` event ids a pass, from
        the oldest event to the newest there was when the sweep began."""
        if self._sweep is None:
            self._next_prune = now + PRUNE_INTERVAL
            low, high = outbox.event_ids(conn)
            self._sweep = (low - 1, high)
        done, last = self._sweep
        upto = min(done + PRUNE_STEP, last)
        outbox.prune_events(conn, now, self.settings.event_retention_seconds, done, upto)
        self._sweep = (upto, last) if upto < last else None



def _payload_bytes(event: outbox.Event) -> bytes:
    return etree.tostring(messages.payload(event.topic, event.data))


def _host(address: str) -> str:
    try:
        return urlsplit(address).netloc.lower()
    except ValueError:
        return address
