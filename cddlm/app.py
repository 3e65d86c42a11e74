"""The composition root: settings in, a running portal out.

It wires the store (and its migrations), the hosts, the enactment engine, the use cases, the
notification machinery, the users and the authenticator, the SOAP endpoints and the scheduler
(the only user of APScheduler), and serves them with the HTTP server of ``httpserver``
(granian). ``exposure`` decides whether the settings are safe to start with.
"""

from __future__ import annotations

import datetime
import fcntl
import gc
import ipaddress
import logging
import os
import pwd
import socket
import stat
import threading
import time
from typing import Callable

from cddlm import agents as agent_clients
from cddlm import httpserver, metrics
from cddlm.application import census, fencing
from cddlm.application.enactment import logs
from cddlm.application.enactment.engine import Engine
from cddlm.application.enactment import slurm
from cddlm.application.enactment.remote import Agents, DelegateRunner, RemoteRunner
from cddlm.application.enactment.slurmctl import Slurm, SlurmUnavailable
from cddlm.application.enactment.ssh import SshRunner
from cddlm.application.enactment.sshlink import Loop as SshLoop
from cddlm.application.loader import Loader
from cddlm.application.health import Readiness, StoreProbe, front_renewed
from cddlm.application.nonces import open_record
from cddlm.application.hosts import Hosts
from cddlm.application.service import Service
from cddlm.application.store import Store, open_sqlite_file, sqlite_file
from cddlm.application.tenancy import Accounts
from cddlm.application.users import Directory
from cddlm.application.views import Views
from cddlm.config import Settings
from cddlm.errors import BadArgument, ConfigurationError, StoreUnavailable
from cddlm.notify.delivery import Delivery
from cddlm.notify.messages import portal_address
from cddlm.notify.subscriptions import Subscriptions
from cddlm.portal import wsgi
from cddlm.portal.auth import Authenticator
from cddlm.portal.handlers import Handlers
from cddlm.portal.subscriptions import SubscriptionHandlers
from cddlm.web.app import Dashboard
from cddlm.web.operations import Operations
from cddlm.xpathsafe import XPathPool

log = logging.getLogger(__name__)
# the collector's passes: the youngest every 7,000 new containers (Python's default is 700), so
# the full passes over everything a portal holds (10,000 components' trees and rows, 50 ms
# each) come ten times less often
GC_THRESHOLDS = (7000, 10, 10)
# Spyne logs every fault a handler raises, with a traceback: a caller's mistake is not the
# portal's error, and the fault itself tells the caller everything
logging.getLogger("spyne.application.client").setLevel(logging.CRITICAL)
logging.getLogger("spyne.application.server").setLevel(logging.CRITICAL)
logging.getLogger("spyne.application").setLevel(logging.CRITICAL)   # faults are not errors (Busy)
logging.getLogger("spyne.util.appreg").setLevel(logging.ERROR)
logging.getLogger("asyncssh").setLevel(logging.WARNING)    # (it logs every SSH channel at info)


def load_hosts(settings: Settings) -> Hosts:
    if not settings.datacenter_file:
        return Hosts.default()
    if settings.datacenter_file.startswith("slurm:") and settings.datacenter_file != "slurm:":
        raise ConfigurationError("--datacenter %s: write slurm: alone for the cluster this machine "
                                 "submits to (SLURM_CONF chooses it)" % settings.datacenter_file)
    if settings.datacenter_file == "slurm:":     # the Slurm cluster this machine submits to
        try:
            return Hosts.from_datacenter(slurm.cluster_datacenter(settings))
        except (SlurmUnavailable, BadArgument) as e:
            raise ConfigurationError("--datacenter slurm: cannot read the cluster: %s" % e) from None
    from cddlm.application.descriptors import load_data_file
    return Hosts.from_datacenter(load_data_file(settings.datacenter_file))


class StateDir:
    """The portal's state directory, held: made (or made) readable by its owner only, whatever
    the umask (0700; 0711 when components run as other accounts, which must pass through it
    to their own directories, though not list it), and locked for the portal's lifetime, so
    that a second portal on the same directory refuses to start (portals share a store
    through PostgreSQL, each with its own state directory)."""

    def __init__(self, path: str, traversable: bool = False):
        self.path = os.path.abspath(path)
        mode = 0o711 if traversable else 0o700
        os.makedirs(self.path, mode=mode, exist_ok=True)
        try:
            os.chmod(self.path, mode)
        except PermissionError:
            log.warning("cannot make %s private (mode %o): it is not this user's", self.path, mode)
        self._fd = os.open(os.path.join(self.path, "portal.lock"),
                           os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip()
            os.close(self._fd)
            raise StoreUnavailable(
                "another portal%s is running on the state directory %s; stop it, or give this "
                "one its own --state-dir (portals share applications through --db postgresql://...)"
                % (" (pid %s)" % holder if holder else "", self.path)) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)
        self.identity = _identity(self.path)

    def gone(self) -> bool:
        """Whether the directory was deleted or replaced since it was taken."""
        return _identity(self.path) != self.identity

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)       # the lock goes with it
            self._fd = None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino

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

    def refuse(text: str, remedy: str) -> None:
        if not sec.insecure:
            raise ConfigurationError("refusing to start: %s%s, or pass --insecure to do it anyway"
                                     % (text, remedy))
        warnings.append("INSECURE: %s (--insecure)" % text)

    exposed = not is_loopback(settings.host)
    missing = [what for what, ok in (("a users file (--users)", sec.users_file),
                                     ("TLS (--tls-cert and --tls-key)", settings.tls_cert)) if not ok]
    if exposed and missing:
        refuse("listening on %s without %s lets anyone who reaches the port %s" % (
            settings.host, " and ".join(missing),
            "run any command on this machine as the portal's user" if not sec.users_file
            else "read the passwords sent to it"),
            ". Create users with `cddlm user add NAME --users FILE`, give --users FILE "
            "--tls-cert PEM --tls-key PEM (or listen on 127.0.0.1 behind a TLS reverse proxy)")
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
    if sec.users_file and (not sec.run_as or not root):
        # every user's components would run as the portal itself: they could rewrite the users
        # file (its name is on the portal's command line) or the store and become administrators
        refuse("components would run as %s, the portal's own account, and could rewrite the "
               "users file and the store: any user could make themselves an administrator"
               % ("root" if root else _account_of(os.geteuid())),
               "; %s --run-as ACCOUNT (an unprivileged account, or a pattern such as "
               "'cddlm-{user}')" % ("give" if root else "run the portal as root with"))
    elif sec.users_file:
        replaceable = _replaceable(sec.users_file)
        if replaceable:
            refuse("the users file %s can be changed by accounts other than the portal's (%s): "
                   "components running as them could make themselves administrators"
                   % (sec.users_file, replaceable),
                   "; keep the file and the folders above it writable by the portal's account "
                   "only (chmod go-w)")
    return warnings


def _account_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return "uid %d" % uid


def _replaceable(path: str) -> str | None:
    """Why ``path`` (a file the portal trusts) could be rewritten or replaced by an account other
    than the portal's own and root, or None: it, or a folder above it, belongs to another
    account or is writable by its group or others (a sticky folder, /tmp, only lets each
    account replace its own names)."""
    mine = (0, os.geteuid())
    path = os.path.abspath(path)
    first = True
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return None if first else "%s cannot be examined" % path
        writable = st.st_mode & 0o022 and (first or not st.st_mode & stat.S_ISVTX)
        if st.st_uid not in mine:
            return "%s belongs to %s" % (path, _account_of(st.st_uid))
        if writable:
            return "%s has mode %o" % (path, stat.S_IMODE(st.st_mode))
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path, first = parent, False


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
        # components running as other accounts pass through the state directory (o+x)
        self.state = StateDir(settings.state_dir, traversable=bool(sec.run_as))
        try:
            if sec.run_as:
                _check_reachable(settings.hosts_root)
            self._open_store(settings)
            self.hosts = load_hosts(settings)
            # how this portal calls other portals (cddlm/agents.py: the credentials and limits
            # of every such call), refused here when unsafe
            self.clients = clients = agent_clients.AgentClients(settings)
            clients.check(self.hosts.hosts.values())
        except BaseException:
            self.state.release()
            raise
        scheme = "https" if settings.tls_cert else "http"
        self.url = settings.public_url or "%s://%s:%d" % (scheme, settings.host, settings.port)
        # hosts whose agent is another portal: a remote runner each, and a monitor of them all;
        # delegate components: a runner per portal they name
        callback = lambda: settings.agent_callback_url or self.url  # noqa: E731
        # hosts whose agent is a Slurm node: one client of the cluster, and one runner for
        # the whole cluster (the engine gives it all the nodes' shares of a batch at once)
        self.slurm = Slurm(settings.slurm_timeout, ttl=min(0.5, settings.liveness_interval / 2))
        self.slurm_runner = slurm.SlurmRunner(self.slurm, os.path.join(settings.hosts_root,
                                                                       slurm.AGENT), settings)
        self.ssh_loop: SshLoop | None = None     # the SSH hosts' connections, made on first use

        def remote(h):
            if h.agent.startswith("ssh://"):
                return self._ssh_runner(h)
            if slurm.is_slurm_agent(h.agent):
                return self.slurm_runner.add(h)
            return RemoteRunner(h, self.store, settings, clients.host, clock, callback)
        read = Loader.for_portal(settings)     # a delegate's descriptor file, as initialize reads one
        delegate = lambda url: DelegateRunner(url, self.store, settings, clients.delegate,  # noqa: E731
                                              read, clock, callback)
        self.engine = Engine(self.store, settings, self.hosts, clock=clock, url=self.url,
                             remote=remote, delegate=delegate)
        self.engine.admit_delegate = clients.admit
        self.engine.waiting_on_portals = clients.waiting
        remotes = {n: r for n, r in self.engine.runners.items() if isinstance(r, RemoteRunner)}
        own = {n for n, r in self.engine.runners.items() if not isinstance(r, RemoteRunner)}
        for runner in remotes.values():     # lazy references between hosts resolve through them
            runner.peers = remotes
            runner.own_hosts, runner.own_value = own, self.engine.own_value
        # the host monitor watches host portals and SSH hosts alike (down after the lease)
        watched = {n: r for n, r in self.engine.runners.items() if isinstance(r, SshRunner)}
        watched.update(remotes)
        self.agents = Agents(self.store, settings, watched, clock) if watched else None
        nodes = self.slurm_runner.nodes
        self.slurm_nodes = slurm.SlurmNodes(self.store, self.slurm, nodes, clock) if nodes else None
        self.engine.accounts = Accounts(sec.run_as, self.users.account if self.users else lambda _: None)
        self.service = Service(self.store, settings, self.hosts, clock=clock, engine=self.engine)
        # users' XPath is evaluated in helper processes with a budget: queries in one pool,
        # message-content filters (tried at subscribe, matched at fan-out) in another
        limits = settings.limits
        self.queries = XPathPool(limits.query_workers, seconds=limits.query_seconds,
                                 wait=limits.query_wait_seconds,
                                 max_result_bytes=limits.max_query_result_bytes,
                                 max_chars=limits.max_expression_chars)
        self.filters = XPathPool(2, seconds=limits.filter_seconds, wait=30.0,
                                 max_chars=limits.max_expression_chars)
        # notifications: the use cases, the delivery workers, and who wakes them
        self.subscriptions = Subscriptions(self.store, settings, self.filters, clock=clock)
        self.delivery = Delivery(self.store, settings, self.engine.id, clock=clock,
                                 portal_url=self.portal_url, xpath=self.filters)
        self.service.subscriptions = self.subscriptions
        self.service.on_events.append(self.delivery.wake)
        self.engine.on_events.append(self.delivery.wake)
        self.subscriptions.on_change.append(self.delivery.wake)
        notify = SubscriptionHandlers(self.subscriptions, self.queries)
        self.views = Views(self.service)
        self.handlers = Handlers(self.service, time.time(), notify, self.views, xpath=self.queries)
        portal_ep, app_ep = self.handlers.endpoints()
        self.authenticator = Authenticator(self.users, self.store, sec, clock=clock,
                                           nonces=open_record(sec.users_file) if sec.users_file else None)
        local = self.users is None
        self.dashboard = Dashboard(self.views, settings, self.portal_url,
                                   None if local else self.authenticator.http)
        metrics.configure(settings.metrics_consumer_hosts)
        self.readiness = Readiness(self._ready_checks(), after_store=frozenset({"front"}))
        self.operations = Operations(self.dashboard, self.readiness, self.census,
                                     None if local else self.authenticator.http)
        self.wsgi = wsgi.build({"/cddlm/portal": portal_ep, "/cddlm/applications": app_ep,
                                "/cddlm/subscriptions": notify.manager_endpoint()},
                               settings.limits, self.portal_url, self.operations,
                               None if local else self.authenticator.soap,
                               wsgi.own_names(settings.host, settings.public_url,
                                              settings.allowed_hosts),
                               notified=self.agent_notified if self.agents else None,
                               authenticator=self.authenticator)
        self.scheduler = None
        self.server: httpserver.HttpServer | None = None
        self._stopped = threading.Event()
        self._stopping = threading.Event()  # asked to stop (a signal): serve_forever returns
        self.failure: str | None = None      # why the portal stopped serving by itself

    def _ssh_runner(self, host) -> SshRunner:
        """The runner of a host whose agent is ``ssh://USER@ADDRESS[:PORT]``: its credentials
        are ``ssh_key`` and ``known_hosts`` of ``--agent-credentials``."""
        if self.ssh_loop is None:
            self.ssh_loop = SshLoop()
        return SshRunner(host, self.store, self.settings, self.ssh_loop, self.clients.host_creds(host))

    def _open_store(self, settings: Settings) -> None:
        """Check an SQLite store before anything writes to it (a damaged one is refused),
        then open and migrate it."""
        path = sqlite_file(settings.database_url)
        self.store_file = path
        if path is not None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if open_sqlite_file(path):
                log.info("no store at %s: started with a new, empty one", path)
            self.store_identity = _identity(path)
        self.store = Store(settings.database_url)
        self.store.migrate()

    def _ready_checks(self) -> dict:
        """What /readyz looks at (application/health.py)."""
        self.store_probe = StoreProbe(self.store, self.settings.ready_store_seconds)
        checks = {"store": self.store_probe, "engine": self.engine.dead, "log capper": logs.CAPPER.dead,
                  "scheduler": lambda: None if self.scheduler is not None and self.scheduler.running
                  else "the scheduler is not running", "state": self.lost_state}
        if self.settings.agent_mode:
            checks["front"] = front_renewed(
                lambda: self.service.front_pinged, lambda: fencing.holds_delegated(self.store),
                self.settings.fence_seconds or self.settings.ready_front_seconds)
        return checks

    def census(self) -> metrics.Census:
        """The store's counts for a metrics scrape."""
        return census.read(self.store, self.hosts.hosts, time.time())

    def lost_state(self) -> str | None:
        """Why the portal cannot go on (its state directory or store file deleted or replaced
        under it), or None."""
        if self.state.gone():
            return "the state directory %s was deleted or replaced" % self.state.path
        if self.store_file is not None and _identity(self.store_file) != self.store_identity:
            return "the store %s was deleted or replaced" % self.store_file
        return None

    def portal_url(self) -> str:
        return self.url

    @property
    def endpoint(self) -> str:
        return portal_address(self.url)

    def start(self) -> None:
        from apscheduler.schedulers.background import BackgroundScheduler
        self.store.start()      # its own thread: other portals' changes, or the log
        self.engine.start()
        self.delivery.start()
        self.scheduler = BackgroundScheduler(daemon=True)
        self.scheduler.add_job(self.engine.check_all, "interval", seconds=self.settings.liveness_interval,
                               id="liveness", max_instances=1, coalesce=True)
        if self.settings.fence_seconds:
            self.scheduler.add_job(self.service.fence, "interval",
                                   seconds=max(0.5, self.settings.fence_seconds / 4), id="fence",
                                   max_instances=1, coalesce=True)
        if self.agents is not None:
            # the first round at once: a host marked down before a restart is asked about now,
            # not a lease/4 later (placement avoids it meanwhile)
            self.scheduler.add_job(self.check_agents, "interval", seconds=self.agents.interval(),
                                   id="agents", max_instances=1, coalesce=True,
                                   next_run_time=datetime.datetime.now(datetime.timezone.utc))
        ssh = [n for n, r in self.engine.runners.items() if isinstance(r, SshRunner)]
        if ssh and self.settings.ssh_liveness < self.settings.liveness_interval:
            # no watcher reports an SSH host's exits: a pass over those hosts alone, more often
            self.scheduler.add_job(self.engine.check_all, "interval", kwargs={"hosts": ssh},
                                   seconds=self.settings.ssh_liveness, id="ssh-liveness",
                                   max_instances=1, coalesce=True)
        if self.slurm_nodes is not None:
            self.scheduler.add_job(self.check_slurm_nodes, "interval",
                                   seconds=self.settings.liveness_interval, id="slurm-nodes",
                                   max_instances=1, coalesce=True)
        self.scheduler.add_job(self.service.expire, "interval", seconds=1.0, id="termination-time",
                               max_instances=1, coalesce=True)
        self.scheduler.add_job(self.authenticator.prune, "interval", seconds=60.0, id="nonces",
                               max_instances=1, coalesce=True)
        self.scheduler.start()
        if self.hosts.datacenter is not None:
            # a portal with a datacenter places every application: its solver (OR-Tools, over
            # half a second of imports) is loaded now rather than inside the first initialize
            import cddlm.application.placement_bridge  # noqa: F401
        # everything built so far lives as long as the portal: keep it out of the collector's
        # full passes, which otherwise stall requests longer the more the portal has loaded
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)

    def agent_notified(self, host: str) -> None:
        """A host portal says a sub-application changed: look at that host now (a thread of the
        scheduler, not the HTTP worker's)."""
        runner = self.engine.runners.get(host)
        if self.agents is None or not isinstance(runner, RemoteRunner) or self.scheduler is None:
            return
        runner.forget()
        self.scheduler.add_job(self.engine.check_all, args=[host], id="agent-notified-" + host,
                               replace_existing=True, misfire_grace_time=30)
        self.engine.wake()

    def check_agents(self) -> None:
        """One round of the host monitor; a host just marked down fails its components now."""
        self._hosts_round(self.agents.check, "host monitor")

    def check_slurm_nodes(self) -> None:
        """One round of the Slurm node monitor; a host just marked down fails its components
        now (and their jobs are cancelled)."""
        self._hosts_round(self.slurm_nodes.check, "Slurm node monitor")

    def _hosts_round(self, check: Callable[[], tuple[list[str], list[str]]], name: str) -> None:
        try:
            went_down, came_up = check()
        except StoreUnavailable as e:
            log.warning("%s skipped: %s", name, e)
            return
        for host in went_down + came_up:
            self.engine.check_all(host)

    def request_stop(self) -> None:
        """Ask ``serve_forever`` to return (from a signal handler: nothing else is done)."""
        self._stopping.set()

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
        if self.agents is not None:
            self.agents.close()
        if self.ssh_loop is not None:
            self.ssh_loop.close()
        self.queries.close()
        self.filters.close()
        self.store_probe.close()
        self.authenticator.close()
        self.store.dispose()
        self.state.release()

    def summary(self) -> dict:
        """What a starting portal says about itself: its store (password hidden), its hosts,
        and the running processes it re-adopted: its local hosts' (by pid), and those that other
        hosts run for it (host portals, SSH, Slurm), which it follows again as well."""
        from sqlalchemy import func, or_, select
        from sqlalchemy.engine import make_url
        from cddlm.application import repository as repo
        from cddlm.application.enactment import states
        from cddlm.application.tables import components
        local = [h.name for h in self.hosts.hosts.values() if h.local]
        with self.store.read() as conn:
            running, apps = conn.execute(
                select(func.count(), func.count(components.c.app_id.distinct()))
                .where(components.c.observed == states.RUNNING,
                       or_(components.c.host.in_(local) & components.c.pid.is_not(None),
                           components.c.host.not_in(local) & (components.c.type == "process")))
            ).one()
            down = repo.down_hosts(conn)
        return {"store": make_url(self.settings.database_url).render_as_string(hide_password=True),
                "hosts": [{"name": h.name, "agent": h.agent, "down": h.name in down}
                          for h in self.hosts.hosts.values()],
                "running": running, "applications": apps}

    def server_options(self) -> httpserver.ServerOptions:
        s = self.settings
        return httpserver.ServerOptions(
            threads=s.server_threads, max_connections=s.max_connections, header_timeout=s.header_timeout,
            max_connections_per_address=s.max_connections_per_address,
            body_timeout=s.body_timeout, max_body_bytes=s.limits.max_body_bytes,
            tls_cert=s.tls_cert, tls_key=s.tls_key, tls_client_ca=s.tls_client_ca)

    def bind(self) -> httpserver.HttpServer:
        """Create the HTTP server, binding the port (``--port 0`` picks a free one)."""
        limit = httpserver.raise_file_limit()
        # every running component holds a pidfd, every client a socket
        (log.info if limit >= 4096 else log.warning)(
            "open-file limit %d: room for about %d running processes (raise the hard limit, "
            "ulimit -Hn, for more)", limit, max(0, limit - 256))
        self.server = httpserver.HttpServer(self.wsgi, self.settings.host, self.settings.port,
                                            self.server_options(), name="cddlm-http",
                                            gate=self.wsgi.gate if self.users is not None else None)
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
        while not (self._stopping.wait(0.5) or self._stopped.is_set()):
            if not server.alive():
                log.error("the HTTP server stopped; the portal stops too")
                break
            lost = self.lost_state()
            if lost is not None:
                # answering from a deleted store would lose every write; a restart on the
                # path starts from whatever is there then, and says so
                self.failure = "%s under the running portal; it stops serving" % lost
                log.error("%s", self.failure)
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
