"""The composition root: settings in, a running portal out.

It wires the store (and its migrations), the hosts, the enactment engine, the use cases, the
notification machinery, the users and the authenticator, the SOAP endpoints and the scheduler
(the only user of APScheduler), and serves them with the HTTP server of ``httpserver``
(granian). ``exposure`` decides whether the settings are safe to start with.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import os
import pwd
import socket
import threading
import time
from typing import Callable

from cddlm import httpserver
from cddlm.application.enactment.engine import Engine
from cddlm.application.hosts import Hosts
from cddlm.application.service import Service
from cddlm.application.store import Store
from cddlm.application.tenancy import Accounts
from cddlm.application.users import Directory
from cddlm.application.views import Views
from cddlm.config import Settings
from cddlm.errors import ConfigurationError
from cddlm.notify.delivery import Delivery
from cddlm.notify.messages import portal_address
from cddlm.notify.subscriptions import Subscriptions
from cddlm.portal import wsgi
from cddlm.portal.auth import Authenticator
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


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def exposure(settings: Settings) -> list[str]:
    """Refuse settings that would expose the portal (``ConfigurationError``, saying what to
    do); return the warnings to print loudly for those ``--insecure`` lets through."""
    sec = settings.security
    warnings = []
    exposed = not is_loopback(settings.host)
    missing = [what for what, ok in (("a users file (--users)", sec.users_file),
                                     ("TLS (--tls-cert and --tls-key)", settings.tls_cert)) if not ok]
    if exposed and missing:
        text = ("listening on %s without %s lets anyone who reaches the port %s" % (
            settings.host, " and ".join(missing),
            "run any command on this machine as the portal's user" if not sec.users_file
            else "read the passwords sent to it"))
        if not sec.insecure:
            raise ConfigurationError(
                "refusing to start: %s. Create users with `cddlm user add NAME --users FILE`, "
                "give --users FILE --tls-cert PEM --tls-key PEM (or listen on 127.0.0.1 behind a "
                "TLS reverse proxy), or pass --insecure to do it anyway" % text)
        warnings.append("INSECURE: %s (--insecure)" % text)
    root = os.geteuid() == 0
    if sec.run_as:
        fixed = "{user}" not in sec.run_as
        account = _account(sec.run_as) if fixed else None
        if fixed and account is None:
            raise ConfigurationError("--run-as %s: no such account on this machine" % sec.run_as)
        if account is not None and account.pw_uid == 0:
            raise ConfigurationError("--run-as %s is root; give an unprivileged account" % sec.run_as)
        if not root and (account is None or account.pw_uid != os.geteuid()):
            raise ConfigurationError("--run-as needs the portal to run as root (it switches to "
                                     "that account for each component)")
    elif root and sec.users_file:
        text = ("components would run as root, the portal's own account; give --run-as "
                "ACCOUNT (an unprivileged account, or a pattern such as 'cddlm-{user}')")
        if not sec.insecure:
            raise ConfigurationError("refusing to start: " + text + ", or pass --insecure")
        warnings.append("INSECURE: " + text + " (--insecure)")
    return warnings


def _check_reachable(folder: str) -> None:
    """The accounts components run as must be able to pass through every folder above their
    own (``o+x``), though not list them."""
    path = os.path.abspath(folder)
    while True:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not mode & 0o001:
            raise ConfigurationError(
                "--run-as: the components' accounts cannot reach their directories below %s: %s "
                "has mode %o (others need x: chmod o+x %s, or choose another --state-dir or "
                "--hosts-dir)" % (folder, path, mode & 0o7777, path))
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


class Portal:
    """Everything one portal process runs. ``start()`` begins enactment and scheduling;
    ``wsgi`` is the WSGI application; ``serve()`` runs it on a real HTTP server."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.warnings = exposure(settings)
        for warning in self.warnings:
            log.warning(warning)
        sec = settings.security
        self.users = Directory(sec.users_file, sec.credential_cache) if sec.users_file else None
        os.makedirs(settings.state_dir, exist_ok=True)
        if sec.run_as:
            _check_reachable(settings.hosts_root)
        scheme = "https" if settings.tls_cert else "http"
        self.url = settings.public_url or "%s://%s:%d" % (scheme, settings.host, settings.port)
        self.store = Store(settings.database_url)
        self.store.migrate()
        self.hosts = load_hosts(settings)
        self.engine = Engine(self.store, settings, self.hosts, clock=clock, url=self.url)
        self.engine.accounts = Accounts(sec.run_as, self.users.account if self.users else lambda _: None)
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
        self.authenticator = Authenticator(self.users, self.store, sec, clock=clock)
        local = self.users is None
        self.dashboard = Dashboard(self.views, settings, self.portal_url,
                                   None if local else self.authenticator.http)
        self.wsgi = wsgi.build({"/cddlm/portal": portal_ep, "/cddlm/applications": app_ep,
                                "/cddlm/subscriptions": notify.manager_endpoint()},
                               settings.limits, self.portal_url, self.dashboard,
                               None if local else self.authenticator.soap)
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
        self.scheduler.add_job(self.authenticator.prune, "interval", seconds=60.0, id="nonces",
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
