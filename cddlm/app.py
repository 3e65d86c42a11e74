"""The composition root: settings in, a running portal out.

It wires the store (and its migrations), the hosts, the enactment engine, the use cases, the
notification machinery, the SOAP endpoints and the scheduler (the only user of APScheduler),
and serves them with the HTTP server of ``httpserver`` (granian).
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
from typing import Callable

from cddlm import httpserver
from cddlm.application.enactment.engine import Engine
from cddlm.application.hosts import Hosts
from cddlm.application.service import Service
from cddlm.application.store import Store
from cddlm.application.views import Views
from cddlm.config import Settings
from cddlm.notify.delivery import Delivery
from cddlm.notify.messages import portal_address
from cddlm.notify.subscriptions import Subscriptions
from cddlm.portal import wsgi
from cddlm.portal.handlers import Handlers
from cddlm.portal.subscriptions import SubscriptionHandlers
from cddlm.web.app import Dashboard

log = logging.getLogger(__name__)
# Spyne logs every fault a handler raises, with a traceback: a caller's mistake is not the
# portal's error, and the fault itself tells the caller everything
logging.getLogger("spyne.application.client").setLevel(logging.CRITICAL)
logging.getLogger("spyne.application.server").setLevel(logging.CRITICAL)
logging.getLogger("spyne.util.appreg").setLevel(logging.ERROR)


def load_hosts(settings: Settings) -> Hosts:
    if not settings.datacenter_file:
        return Hosts.default()
    from cddlm.application.descriptors import load_data_file
    return Hosts.from_datacenter(load_data_file(settings.datacenter_file))


class Portal:
    """Everything one portal process runs. ``start()`` begins enactment and scheduling;
    ``wsgi`` is the WSGI application; ``serve()`` runs it on a real HTTP server."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time):
        self.settings = settings
        os.makedirs(settings.state_dir, exist_ok=True)
        scheme = "https" if settings.tls_cert else "http"
        self.url = settings.public_url or "%s://%s:%d" % (scheme, settings.host, settings.port)
        self.store = Store(settings.database_url)
        self.store.migrate()
        self.hosts = load_hosts(settings)
        self.engine = Engine(self.store, settings, self.hosts, clock=clock, url=self.url)
        self.service = Service(self.store, settings, self.hosts, clock=clock, engine=self.engine)
        # notifications: the use cases, the delivery workers, and who wakes them
        self.subscriptions = Subscriptions(self.store, settings, clock=clock)
        self.delivery = Delivery(self.store, settings, self.engine.id, clock=clock,
                                 portal_url=self.portal_url)
        self.service.subscriptions = self.subscriptions
        self.service.on_events.append(self.delivery.wake)
        self.engine.on_events.append(self.delivery.wake)
        self.subscriptions.on_change.append(self.delivery.wake)
        notify = SubscriptionHandlers(self.subscriptions)
        self.views = Views(self.service)
        self.handlers = Handlers(self.service, time.time(), notify, self.views)
        portal_ep, app_ep = self.handlers.endpoints()
        self.dashboard = Dashboard(self.views, settings, self.portal_url)
        self.wsgi = wsgi.build({"/cddlm/portal": portal_ep, "/cddlm/applications": app_ep,
                                "/cddlm/subscriptions": notify.manager_endpoint()},
                               settings.limits, self.portal_url, self.dashboard)
        self.scheduler = None
        self.server: httpserver.HttpServer | None = None
        self._stopped = threading.Event()

    def portal_url(self) -> str:
        return self.url

    @property
    def endpoint(self) -> str:
        return portal_address(self.url)

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        self.engine.start()
        self.delivery.start()
        self.scheduler = BackgroundScheduler(daemon=True)
        self.scheduler.add_job(self.engine.check_all, "interval", seconds=self.settings.liveness_interval,
                               id="liveness", max_instances=1, coalesce=True)
        self.scheduler.add_job(self.service.expire, "interval", seconds=1.0, id="termination-time",
                               max_instances=1, coalesce=True)
        self.scheduler.start()
        # everything built so far lives as long as the portal: keep it out of the collector's
        # full passes, which otherwise stall requests longer the more the portal has loaded
        gc.freeze()

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.server is not None:
            self.server.stop()
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        self.delivery.stop()
        self.engine.stop()
        self.store.dispose()

    def summary(self) -> dict:
        """What a starting portal says about itself: its store (password hidden), its hosts,
        and the running components of its local hosts it re-adopted."""
        from sqlalchemy import func, select
        from sqlalchemy.engine import make_url
        from cddlm.application import repository as repo
        from cddlm.application.enactment import states
        from cddlm.application.tables import components
        local = [h.name for h in self.hosts.hosts.values() if h.local]
        with self.store.read() as conn:
            running, apps = conn.execute(
                select(func.count(), func.count(components.c.app_id.distinct()))
                .where(components.c.observed == states.RUNNING, components.c.pid.is_not(None),
                       components.c.host.in_(local))).one()
            down = repo.down_hosts(conn)
        return {"store": make_url(self.settings.database_url).render_as_string(hide_password=True),
                "hosts": [{"name": h.name, "agent": h.agent, "down": h.name in down}
                          for h in self.hosts.hosts.values()],
                "running": running, "applications": apps}

    def server_options(self) -> httpserver.ServerOptions:
        s = self.settings
        return httpserver.ServerOptions(
            threads=s.server_threads, max_connections=s.max_connections, header_timeout=s.header_timeout,
            body_timeout=s.body_timeout, max_body_bytes=s.limits.max_body_bytes,
            tls_cert=s.tls_cert, tls_key=s.tls_key, tls_client_ca=s.tls_client_ca)

    def bind(self) -> httpserver.HttpServer:
        """Create the HTTP server, binding the port (``--port 0`` picks a free one)."""
        httpserver.raise_file_limit()
        self.server = httpserver.HttpServer(self.wsgi, self.settings.host, self.settings.port,
                                            self.server_options(), name="cddlm-http")
        if not self.settings.public_url:
            self.url = self.server.url
            self.engine.url = self.url
        return self.server

    def serve_forever(self, ready: Callable[[str], None] | None = None) -> None:
        """Run until ``stop()``; call ``ready(endpoint)`` once the portal answers requests."""
        server = self.server or self.bind()
        self.start()
        server.start()
        self._wait_answering(server)
        if ready is not None:
            ready(self.endpoint)
        while not self._stopped.wait(0.5):
            if not server.alive():
                log.error("the HTTP server stopped; the portal stops too")
                break

    def _wait_answering(self, server: httpserver.HttpServer, timeout: float = 30.0) -> None:
        """Wait until the server accepts connections (a TCP connect: TLS and authentication
        are the clients' business)."""
        deadline = time.monotonic() + timeout
        host = self.settings.host if self.settings.host not in ("0.0.0.0", "::") else "127.0.0.1"
        while time.monotonic() < deadline and server.alive():
            try:
                with socket.create_connection((host, server.port), timeout=2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("the portal's HTTP server did not start on %s" % server.url)
