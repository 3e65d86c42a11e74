"""A notification consumer for clients: a small HTTP server (plain WSGI under ``cddlm.httpserver``) that
accepts ``wsnt:Notify`` requests, answers ``202 Accepted`` and queues one ``Event`` per
NotificationMessage.

    with Listener() as listener:                    # 127.0.0.1, a free port
        sub = app.subscribe(listener.url("app"))     # cddlm.client
        event = listener.get(timeout=30)             # an Event, or None
        print(event.state, event.sequence)

Delivery is at least once: after a lost response the portal sends a message again. The
listener drops what it has already queued (per subscription: lifecycle events up to the
highest sequence seen for their application, creation events once per application), so the
queue holds each event once, in order. Bodies are parsed with ``cddlm.xmlsafe``.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from lxml import etree

from cddlm import httpserver, ns, wsa, xmlsafe
from cddlm.errors import BadArgument

ENV = "{%s}" % ns.SOAP11_ENV
WSNT = "{%s}" % ns.WSNT
A = "{%s}" % ns.API
MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class Event:
    """One notification message as received."""
    path: str                          # the listener path it was posted to
    topic: str | None                  # Clark name
    subscription: str | None           # the subscription manager's address
    producer: str | None               # the producer's address
    message: etree._Element = field(repr=False)   # the payload element
    resource_id: str | None = None     # the application
    name: str | None = None
    state: str | None = None           # lifecycle events
    previous_state: str | None = None
    sequence: int | None = None
    timestamp: str | None = None
    application: wsa.Reference | None = None   # creation events: the new application's EPR
    received: float = 0.0              # time.time() when it arrived

    @property
    def kind(self) -> str:
        return {A + "lifecycleEvent": "lifecycle", A + "applicationCreatedEvent": "created"}.get(
            self.message.tag, etree.QName(self.message).localname)


def parse_message(holder: etree._Element, path: str, received: float = 0.0) -> Event | None:
    message = holder.find(WSNT + "Message")
    payload = next((c for c in message if isinstance(c.tag, str)), None) if message is not None else None
    if payload is None:
        return None
    topic_el = holder.find(WSNT + "Topic")
    topic = None
    if topic_el is not None and topic_el.text:
        prefix, _, local = topic_el.text.strip().rpartition(":")
        namespace = topic_el.nsmap.get(prefix or None)
        topic = "{%s}%s" % (namespace, local) if namespace else local
    sub = holder.find(WSNT + "SubscriptionReference")
    producer = holder.find(WSNT + "ProducerReference")
    sequence = payload.findtext(A + "sequence")
    app = payload.find(A + "applicationReference")
    return Event(path=path, topic=topic, message=payload,
                 subscription=_address(sub), producer=_address(producer),
                 resource_id=_text(payload, "ResourceId"), name=_text(payload, "name"),
                 state=_text(payload, "state"), previous_state=_text(payload, "previousState"),
                 sequence=int(sequence) if sequence else None, timestamp=_text(payload, "timestamp"),
                 application=wsa.parse_epr(app) if app is not None else None, received=received)


def _address(el: etree._Element | None) -> str | None:
    ref = wsa.parse_epr(el) if el is not None else None
    return ref.address if ref is not None else None


def _text(el: etree._Element, local: str) -> str | None:
    value = el.findtext(A + local)
    return value.strip() if value is not None else None


class Listener:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, base_url: str | None = None,
                 keep_envelopes: bool = False):
        self.host = host
        self.port = port
        self.base_url = base_url            # what the portal should post to, if not host:port
        self.keep_envelopes = keep_envelopes
        self.events: queue.Queue[Event] = queue.Queue()
        self.envelopes: list[tuple[str, bytes]] = []   # (path, body) as received, if kept
        self._seen: dict[tuple, int] = {}
        self._lock = threading.Lock()
        self._server: httpserver.HttpServer | None = None

    # -- life -------------------------------------------------------------------------------
    def start(self) -> "Listener":
        self._server = httpserver.serve(self, self.host, self.port,
                                        httpserver.ServerOptions(threads=4), name="cddlm-listener")
        self.port = self._server.port
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(timeout=5)   # granian aborts the process if still running at exit
            self._server = None

    def __enter__(self) -> "Listener":
        return self.start() if self._server is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def url(self, path: str = "") -> str:
        base = self.base_url or "http://%s:%d" % (self.host if ":" not in self.host
                                                 else "[%s]" % self.host, self.port)
        return base.rstrip("/") + "/" + path.lstrip("/")

    def get(self, timeout: float | None = None) -> Event | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            return None

    # -- the WSGI application ---------------------------------------------------------------------
    def __call__(self, environ, start_response):
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, "405 Method Not Allowed", b"POST a wsnt:Notify\n")
        try:
            size = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            size = 0
        if size > MAX_BODY:
            return _answer(start_response, "413 Request Entity Too Large", b"too large\n")
        data = environ["wsgi.input"].read(size) if size else environ["wsgi.input"].read(MAX_BODY)
        path = environ.get("PATH_INFO", "/")
        try:
            doc = xmlsafe.parse(data, max_bytes=MAX_BODY)
        except BadArgument as e:
            return _answer(start_response, "400 Bad Request", str(e).encode() + b"\n")
        notify = doc.find("%sBody/%sNotify" % (ENV, WSNT))
        if notify is None:
            return _answer(start_response, "400 Bad Request", b"no soapenv:Body/wsnt:Notify\n")
        now = time.time()
        with self._lock:
            if self.keep_envelopes:
                self.envelopes.append((path, data))
            for holder in notify.iterfind(WSNT + "NotificationMessage"):
                event = parse_message(holder, path, now)
                if event is not None and self._first_time(event):
                    self.events.put(event)
        return _answer(start_response, "202 Accepted", b"")

    def _first_time(self, event: Event) -> bool:
        """At-least-once delivery, deduplicated: True unless this event was queued before. A
        subscription is known by its id (the end of its manager's address), which stays when
        another portal of the store delivers it and names its own manager."""
        subscription = (event.subscription or "").rstrip("/").rsplit("/", 1)[-1]
        if event.kind == "lifecycle" and event.sequence is not None:
            key = (subscription, event.resource_id)
            if event.sequence <= self._seen.get(key, 0):
                return False
            self._seen[key] = event.sequence
        elif event.kind == "created":
            key = (subscription, event.resource_id, "created")
            if key in self._seen:
                return False
            self._seen[key] = 1
        return True


def _answer(start_response, status: str, body: bytes):
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                            ("Content-Length", str(len(body)))])
    return [body]
