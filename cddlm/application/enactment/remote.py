"""The remote runner: enacts the components placed on a host whose agent is another portal.

The front portal (this one) enacts each host's share of an application as one **delegated
sub-application** on that host's portal, through the ordinary deployment API: ``create`` with
``urn:cddlm:option:client-token`` derived from the application, its generation, the host and
the start group (so a retried or re-adopted delegation never makes a second one),
``initialize`` with the share as a native descriptor (the same component paths as here),
``run``, ``terminate`` and ``destroy``. Everything about a delegation is a row of the
``delegations`` table, written *before* the remote call it prepares, so a front portal killed
at any point finds it again after a restart and repeats the call safely.

Start groups keep ``sequence`` order across hosts: a host's leaves that some sequence orders
differently (the leaf of step 0 and the leaf of step 2 of one sequence) go to different
sub-applications, started when the engine's planner starts them; leaves that no sequence
orders against each other share one.

The engine gives this runner a batch's components of its host at once (``deploy_many``,
``start_many``, ``stop_many``), and the hosts of a batch side by side (``parallel``): each
start group's share is created and initialized with one call, run with one, terminated and
destroyed with one each, and watched with one ``ping`` per share and round (shared by the
batches and liveness checks of a short moment) until its components report; a host portal's
notification ends the pause between rounds at once. A share that cannot go on yet (its host
portal silent, a value from elsewhere not there yet) has its components asked again shortly,
holding no worker. A host portal that does not answer is the host monitor's business
(``Agents``): after the lease it marks the host down, which fails its components and the
application with a reason naming the host.

This module speaks to host portals through ``HostPortal`` objects that the composition root
makes from ``cddlm.client`` (``cddlm/agents.py``): the application layer knows runners, not
transports.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from sqlalchemy import insert, select, update

from cddlm.application import repository as repo
from cddlm.application.enactment.local import Later, Outcome, Report, Target, cap_lines
from cddlm.application.fencing import DELEGATED_PREFIX
from cddlm.application.hosts import Host
from cddlm.application.store import Store
from cddlm.application.tables import agents, applications, components, delegations, hosts as hosts_table
from cddlm.config import Settings
from cddlm.errors import CddlmError, HostUnreachable, RemoteFault, ResolutionError
from cddlm.lang import native
from cddlm.lang.model import NEVER, Component, Deployment, Lazy, has_lazy, references

log = logging.getLogger(__name__)

FOREIGN_WAIT = 120.0    # seconds a share waits for another host's value before it fails
STATUS_TTL = 0.2        # seconds one ping of a sub-application answers for every component
STATUS_TTL_PER = 0.0007  # ... or this per component it holds, up to LAST_PAUSE (a share of 1,500
                         # costs its host ~0.1 s of CPU a ping: a batch's rounds, the others'
                         # and the liveness pass share one a second, not five)
OBSERVED_TTL = 1.0      # seconds the host portal's component table answers for every read
ROW_TTL = 1.0           # seconds one read of a delegation answers for its share's components
AWAIT = 10.0            # seconds a batch watches its shares on a host before asking again later
                        # (not longer: a slow host would hold the workers that other hosts need)
FIRST_PAUSE = 0.05      # seconds between a batch's first looks at its shares ...
LAST_PAUSE = 1.0        # ... growing to this (a notification from the host portal ends a pause)
CALM = 2.0              # seconds a share seen all running, its host portal notifying this portal
                        # of changes and silent since, is not pinged by the liveness pass (no
                        # more: a host portal's --fence-seconds counts on a ping every 2 s)
DOWN_PREFIX = "unreachable"     # the reason the host monitor gives; only it lifts such a mark
CONTAINERS = ("compound", "sequence", "parallel")
# the states a deploy's look reports a component in, as its host portal gives it: a share it
# was also asked to run is reported once it is starting there
DEPLOYED_THERE = ("deployed", "starting", "running", "completed")
STARTED_THERE = ("starting", "running", "completed")


class AgentUnreachable(CddlmError):
    """The host portal did not answer (connection refused, timeout, garbage)."""


class Gone(CddlmError):
    """The host portal no longer knows the sub-application (destroyed, or never made)."""


@dataclass
class Status:
    """A sub-application as its portal reports it (``ping``)."""
    state: str
    components: dict[str, tuple[str, str]] = field(default_factory=dict)   # path -> (state, detail)
    reason: str | None = None       # terminationInfo's reason, when it has ended
    fault: str | None = None        # terminationInfo's fault element (XML), when it failed


@dataclass(frozen=True)
class Shape:
    """What the runner needs of an application's tree: fixed once it is initialized."""
    tree: Deployment
    placed: dict[str, str | None]     # component path -> host
    groups: dict[str, str]            # leaf path -> start group


@dataclass(frozen=True)
class Ref:
    address: str
    resource_id: str


class HostPortal(Protocol):
    """What the runner needs of a host portal; faults come as ``RemoteFault`` (``cause`` the
    fault's XML), silence as ``AgentUnreachable``, an unknown sub-application as ``Gone``."""
    url: str

    def create(self, token: str) -> Ref: ...
    def find(self, token: str) -> Ref | None: ...
    def initialize(self, ref: Ref, descriptor: Any, token: str) -> None: ...
    def run(self, ref: Ref) -> None: ...
    def terminate(self, ref: Ref, reason: str) -> None: ...
    def destroy(self, ref: Ref) -> None: ...
    def status(self, ref: Ref) -> Status: ...
    def probe(self) -> None: ...
    def initialize_foreign(self, ref: Ref, language: str, text: str, properties: dict[str, str],
                           token: str, version: str | None = None) -> None: ...
    def subscribe(self, ref: Ref, consumer: str) -> None: ...
    def resolve(self, ref: Ref, path: str) -> Any: ...
    def logs(self, ref: Ref, path: str, stream: str, lines: int | None,
             offset: int | None) -> dict: ...
    def components(self, ref: Ref) -> list[dict]: ...


PortalFactory = Callable[[Host], HostPortal]


# -- pure parts ---------------------------------------------------------------------------------
def start_groups(tree: Deployment) -> dict[str, str]:
    """Each leaf's start group: the indices of its ancestors among their sequence siblings
    (``"0"`` for leaves no sequence orders). Two leaves of one group start together safely."""
    out: dict[str, str] = {}

    def visit(comp: Component, path: str, key: tuple[str, ...]) -> None:
        if comp.type not in CONTAINERS:
            out[path] = ".".join(key) or "0"
            return
        for i, child in enumerate(comp.children):
            visit(child, path + "/" + child.name, key + ((str(i),) if comp.type == "sequence" else ()))

    for root in tree.components:
        visit(root, root.name, ())
    return out


def token_for(app_id: str, generation: int, host: str, group: str) -> str:
    """The client-token of a delegation: the same inputs, the same sub-application."""
    raw = "%s|%d|%s|%s" % (app_id, generation, host, group)
    return DELEGATED_PREFIX + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:40]


def share(tree: Deployment, paths: set[str]) -> list[Component]:
    """The part of ``tree`` holding the leaves ``paths``, with their ancestors (as compounds,
    keeping names so paths stay the same); the ``host`` pin is this portal's concern only."""
    def cut(comp: Component, path: str) -> Component | None:
        if comp.type not in CONTAINERS:
            if path not in paths:
                return None
            return Component(comp.name, comp.type,
                             {k: v for k, v in comp.attributes.items() if k != "host"})
        kids = [c for c in (cut(ch, path + "/" + ch.name) for ch in comp.children) if c]
        return Component(comp.name, "compound", {}, kids) if kids else None

    return [c for c in (cut(r, r.name) for r in tree.components) if c]


def foreign_refs(tree: Deployment, comps: list[Component], mine: set[str]) -> set[str]:
    """Lazy references in ``comps`` (a share of ``tree``) to components outside ``mine`` (on
    another host, or in another start group), or to none: the front portal resolves them
    before it sends the share. (``w/env/X`` is a value of ``w``: ``tree`` tells.)"""
    found: set[str] = set()

    def component_of(target: str) -> str | None:
        try:
            return tree.split_target(target).component
        except ResolutionError:
            return None

    stack = list(comps)
    while stack:
        comp = stack.pop()
        for v in comp.attributes.values():
            found.update(ref.target for _, ref in references(v)
                         if component_of(ref.target) not in mine)
        stack.extend(comp.children)
    return found


def substitute(comps: list[Component], values: dict[str, Any]) -> list[Component]:
    """Copies of ``comps`` with the lazy references in ``values`` replaced by their values."""
    def sub(value: Any) -> Any:
        if isinstance(value, Lazy) and value.kind == "ref" and value.target in values:
            return values[value.target]
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value

    return [Component(c.name, c.type, {k: sub(v) for k, v in c.attributes.items()},
                      substitute(c.children, values)) for c in comps]


def remote_info(host: str, portal: str, ref: Ref | None, reason: str, fault: str | None) -> dict:
    """What a failure's terminationInfo says of the remote side (messages.termination_info
    turns it into an ``api:RemoteFault`` with the remote fault in ``wsrf-bf:FaultCause``)."""
    return {"host": host, "hostPortal": portal, "subApplication": ref.resource_id if ref else None,
            "reason": reason, "fault": fault}


def unreachable_line(host: str, since: float | None, error: str | None) -> str:
    """The one line a person reads about a host portal that does not answer:
    ``host h1 unreachable since 01:02:03 UTC: cannot connect`` (the raw error goes to the log)."""
    return "host %s unreachable%s" % (host, since_and_cause(since, error))


def since_and_cause(since: float | None, error: str | None) -> str:
    """`` since 01:02:03 UTC: cannot connect``: the end of the unreachable line, and of the
    reason a host is marked down with."""
    when = " since %s UTC" % time.strftime("%H:%M:%S", time.gmtime(since)) if since else ""
    cause = short_cause(error)
    return when + (": " + cause if cause else "")


# (a needle, its few words; None: a line already written for a person, kept whole, such as an
# SSH host's refused key naming the known_hosts file to fix)
CAUSES = (("host's key", None), ("cannot connect", "cannot connect"),
          ("connect call failed", "cannot connect"),        # (an SSH host's: asyncio's words)
          ("refused", "connection refused"),
          ("certificate", "certificate not trusted"), ("tls", "TLS failed"),
          ("429", "too many requests"), ("more than", "answer too large"),
          ("garbage", "answer is not SOAP"), ("without soap", "answer is not SOAP"),
          ("timed out", "no answer in time"), ("too slow", "no answer in time"),
          ("no complete answer", "no answer in time"))


def short_cause(error: str | None) -> str:
    """A raw error (the outbound client's, a library's) in the few words of its class."""
    text = (error or "").lower()
    first = (error or "").strip().splitlines()[0] if (error or "").strip() else ""
    for needle, words in CAUSES:
        if needle in text:
            return words or first
    return first if len(first) <= 60 else first[:57] + "..."


def describe(host: str, ref: Ref | None, reason: str) -> str:
    where = "sub-application %s" % ref.resource_id if ref and ref.resource_id else "its sub-application"
    return "host %s, %s: %s" % (host, where, reason)


class _Fresh:
    """Answers kept for ``ttl`` seconds, at most ``size`` of them (past it all are forgotten)."""
    MISSING = object()

    def __init__(self, ttl: float, size: int):
        self.ttl, self.size = ttl, size
        self._kept: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        kept = self._kept.get(key)
        return kept[1] if kept is not None and time.monotonic() - kept[0] < self.ttl else self.MISSING

    def put(self, key: Any, value: Any) -> Any:
        with self._lock:
            if len(self._kept) > self.size:
                self._kept.clear()
            self._kept[key] = (time.monotonic(), value)
        return value

    def clear(self) -> None:
        self._kept.clear()


def _young(cached: tuple[float, Status]) -> bool:
    """Whether a ping's answer (when, status) still answers for its sub-application."""
    ttl = min(LAST_PAUSE, max(STATUS_TTL, STATUS_TTL_PER * len(cached[1].components)))
    return time.monotonic() - cached[0] < ttl


# -- the runner -----------------------------------------------------------------------------------
class RemoteRunner:
    remote = True
    _shared: dict[str, Shape] = {}      # app id -> its tree, placement, start groups (all runners)
    _building = threading.Lock()        # one thread builds a shape; the others wait for it
    parallel = True         # a batch's hosts are enacted side by side (each waits on its own portal)
    monitored = True        # the host monitor (``Agents``) decides when silence is a failure
    # a host portal (this program) takes ``run`` while it deploys (initialize and run back to
    # back), so a share with nothing ordering its starts is run as soon as it is sent
    early_run = True
    _silent_since: float | None = None
    failing: float | None = None    # when the host monitor's pings went unanswered first (clock)

    def __init__(self, host: Host, store: Store, settings: Settings, factory: PortalFactory,
                 clock: Callable[[], float] = time.time,
                 callback: Callable[[], str | None] | None = None):
        self.host = host
        # the base URL host portals notify this portal at (None: no push, pings only)
        self.callback = callback or (lambda: settings.agent_callback_url)
        self.store = store
        self.settings = settings
        self.factory = factory
        self.clock = clock
        self._portal: HostPortal | None = None
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._status: dict[str, tuple[float, Status]] = {}
        self._rows = _Fresh(ROW_TTL, 4096)          # (app, group) -> its newest delegation row
        self._ready: dict[str, Any] = {}           # token -> its row once initialized there
        self._foreigns: dict[tuple[int, str], tuple[Shape, set[str]]] = {}  # references out of a share
        self._waiting: dict[str, float] = {}       # token -> since when it waits for a value
        self._observed = _Fresh(OBSERVED_TTL, 256)  # app id -> its components there, by path
        self._notice = threading.Condition()       # notified by ``forget`` (a host's notification)
        self._notices = 0
        self._pushed: set[str] = set()             # tokens whose sub-application notifies here
        # token -> the count of notices when a ping saw the share all running (``_quiet``)
        self._calm = _Fresh(min(CALM, settings.agent_lease / 2), 4096)
        # the runners of the other remote hosts (set by the composition root): where a lazy
        # reference to a component on another host is resolved
        self.peers: dict[str, "RemoteRunner"] = {}
        # the hosts this portal enacts itself, and a value of a component there (app id,
        # target; ``ResolutionError`` while it has none): set by the composition root
        self.own_hosts: set[str] = set()
        self.own_value: Callable[[str, str], Any] | None = None

    # -- plumbing ---------------------------------------------------------------------------------
    def portal(self) -> HostPortal:
        with self._lock:
            if self._portal is None:
                self._portal = self.factory(self.host)
            return self._portal

    def _token_lock(self, token: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(token, threading.Lock())

    def component_dir(self, app_id: str, path: str) -> str:
        return ""

    def stderr_tail(self, app_id: str, path: str, lines: int = 20) -> str:
        return ""

    def remove_app(self, app_id: str) -> None:
        """The front application is destroyed: destroy what is left of its delegations here."""
        with self.store.read() as conn:
            rows = conn.execute(select(delegations).where(delegations.c.app_id == app_id,
                                                          delegations.c.host == self.host.name)).all()
        for row in rows:
            if row.asked != "destroyed" and row.address:
                ref = Ref(row.address, row.resource_id or "")
                try:
                    self._end(ref, "the front application was destroyed")
                except Gone:
                    pass
                except (AgentUnreachable, RemoteFault) as e:
                    # kept: the host monitor's sweep ends it when the host portal answers
                    log.warning("cannot destroy %s on host %s yet: %s", row.resource_id,
                                self.host.name, e)
                    continue
            with self.store.write() as conn:
                conn.execute(delegations.delete().where(delegations.c.token == row.token))
            self._rows.clear()

    def _end(self, ref: Ref, reason: str) -> None:
        """Terminate a sub-application, wait (bounded) until it is, and destroy it."""
        self.portal().terminate(ref, reason)
        deadline = time.monotonic() + 2 * self.settings.agent_timeout
        while self.portal().status(ref).state != "terminated":
            if time.monotonic() > deadline:
                raise AgentUnreachable("still terminating")
            time.sleep(0.2)
        self.portal().destroy(ref)

    def sweep(self) -> int:
        """Delegations whose front application is gone (destroyed while this host portal did
        not answer): end them there now. Returns how many were ended."""
        with self.store.read() as conn:
            rows = conn.execute(select(delegations.c.app_id).distinct().where(
                delegations.c.host == self.host.name,
                delegations.c.app_id.not_in(select(applications.c.id)))).all()
        for (app_id,) in rows:
            self.remove_app(app_id)
        return len(rows)

    def where(self, app_id: str, path: str) -> str:
        """Where ``path`` runs, for the failure of a host marked down (whose message names the
        host already): its sub-application."""
        row = self._row(app_id, path)
        return "sub-application %s" % row.resource_id if row is not None and row.resource_id \
            else "no sub-application yet"

    # -- what only the host portal can tell (the read side: logs, runtime values) ----------------
    def _ref_of(self, app_id: str, path: str) -> Ref | None:
        row = self._row(app_id, path)
        return Ref(row.address, row.resource_id or "") if row is not None and row.address else None

    def _ask(self, fn: Callable[[], Any]) -> Any:
        """One read of the host portal; its silence is ``HostUnreachable`` naming the host."""
        try:
            out = fn()
        except AgentUnreachable as e:
            log.info("host %s did not answer a read: %s", self.host.name, e)
            raise HostUnreachable(self.host.name, self.unreachable(str(e))) from None
        if not self.monitored:      # (no host monitor's ping says it answers again)
            self.failing = None
        return out

    def unreachable(self, error: str) -> str:
        """The one line a person reads about this host not answering, since the host monitor's
        first unanswered ping (``failing``; else since now)."""
        self.failing = self.failing or self.clock()
        return unreachable_line(self.host.name, self.failing, error)

    def log_read(self, app_id: str, path: str, stream: str, *, lines: int = 0,
                 offset: int | None = None, max_bytes: int = 8192) -> tuple[list[str], int]:
        """As ``LocalRunner.log_read``, read by the host portal that runs the component (its
        ``ext:logs``, with its offsets) and held to this portal's limits whatever it answers:
        at most ``lines`` lines and ``max_bytes`` of them (``cap_lines``). After ``offset``,
        what did not fit is read next: the offset answered is where the kept lines end. Nothing
        yet while it has not been given the component."""
        ref = self._ref_of(app_id, path)
        if ref is None:
            return [], offset or 0
        try:
            found = self._ask(lambda: self.portal().logs(
                ref, path, stream, (lines or None) if offset is None else None, offset))
        except Gone:
            return [], offset or 0
        # (a line with line breaks in it is the lines it shows)
        got = [part for line in found["lines"] if isinstance(line, str)
               for part in line.splitlines() or [""]]
        kept, size = cap_lines(got, max_bytes, lines if offset is None else None)
        end = found["offset"]
        if offset is None or kept == got:
            return kept, end
        # read from ``offset``, or from the start when the answer goes back (the log was replaced)
        return kept, min(end, (offset if end >= offset else 0) + size)

    def observed(self, app_id: str) -> dict[str, dict]:
        """The components the host portal runs for ``app_id``, as it reports them
        (``ext:components``: pid, ports, state ...) by path; read at most every
        ``OBSERVED_TTL`` seconds."""
        cached = self._observed.get(app_id)
        if cached is not _Fresh.MISSING:
            return cached
        with self.store.read() as conn:
            rows = conn.execute(select(delegations).where(
                delegations.c.app_id == app_id, delegations.c.host == self.host.name,
                delegations.c.address.is_not(None), delegations.c.asked != "destroyed")
                .order_by(delegations.c.generation)).all()
        out: dict[str, dict] = {}
        for row in rows:
            ref = Ref(row.address, row.resource_id or "")
            try:
                out.update((c["path"], c) for c in self._ask(lambda: self.portal().components(ref)))
            except Gone:
                continue
        return self._observed.put(app_id, out)

    def value(self, app_id: str, comp_path: str, path: str) -> Any:
        """``resolve`` of ``path`` (the component ``comp_path`` or one of its values) as the
        host portal that runs it answers."""
        ref = self._ref_of(app_id, comp_path)
        if ref is None:
            raise ResolutionError("%s has no value yet: host %s has not been given %s yet" % (
                path, self.host.name, comp_path), kind="unresolved-reference", path=path)
        try:
            return self._ask(lambda: self.portal().resolve(ref, path))
        except Gone:
            raise ResolutionError("%s has no value: host %s no longer runs %s" % (
                path, self.host.name, comp_path), kind="unresolved-reference", path=path) from None

    # -- delegation rows --------------------------------------------------------------------------
    def _app(self, app_id: str) -> tuple[repo.App, Shape]:
        """The application (its state and generation, not its tree) and its shape."""
        with self.store.read() as conn:
            app = repo.get_app(conn, app_id, light=True)
        if app is None:
            raise Gone("application %s is gone" % app_id)
        return app, self._shape(app_id)

    def _shape(self, app_id: str) -> Shape:
        """The application's shape (``Gone``: no such application), built once for all the
        runners of this portal: the tree and the placement are fixed at initialize, which
        happens once. (Each host's runner and each batch built its own: 200 parses of a
        10,000-component tree for one application over 10 hosts.)"""
        shape = RemoteRunner._shared.get(app_id)
        if shape is not None:
            return shape
        with RemoteRunner._building:
            shape = RemoteRunner._shared.get(app_id)
            if shape is None:
                with self.store.read() as conn:
                    app = repo.get_app(conn, app_id)
                    if app is None:
                        raise Gone("application %s is gone" % app_id)
                    rows = conn.execute(select(components.c.path, components.c.host)
                                        .where(components.c.app_id == app_id)).all()
                tree = Deployment.from_json(app.deployment or {})
                shape = Shape(tree, dict(rows), start_groups(tree))
                if len(RemoteRunner._shared) > 256:
                    RemoteRunner._shared.clear()
                RemoteRunner._shared[app_id] = shape
        return shape

    def _group(self, shape: Shape, path: str) -> str:
        return shape.groups.get(path, "0")

    def _row(self, app_id: str, path: str) -> Any:
        """The newest delegation of this host holding ``path`` (None: never delegated). Read
        at most every ``ROW_TTL`` seconds per share (a liveness pass asks for each of its
        components; this portal's own changes, ``_set``, are seen at once)."""
        try:
            shape = self._shape(app_id)
        except Gone:
            return None
        key = (app_id, self._group(shape, path))
        cached = self._rows.get(key)
        if cached is not _Fresh.MISSING:
            return cached
        with self.store.read() as conn:
            row = conn.execute(select(delegations).where(
                delegations.c.app_id == app_id, delegations.c.host == self.host.name,
                delegations.c.grp == key[1])
                .order_by(delegations.c.generation.desc())).first()
        return self._rows.put(key, row)

    def _ensure(self, app_id: str, path: str, initialize: bool = True) -> Any:
        """The delegation holding ``path``: recorded, created and initialized on the host
        portal (each step recorded before it is taken, and repeatable)."""
        app, shape = self._app(app_id)
        group = self._group(shape, path)
        token = token_for(app_id, app.generation, self.host.name, group)
        row = self._ready.get(token)
        if row is not None:
            return row
        with self._token_lock(token):
            row, ref = self._created(app_id, app.generation, group, token)
            if row.asked == "created" and not initialize:
                return row
            if row.asked == "created" and self.portal().status(ref).state == "instantiated":
                # (a sub-application already initialized, by an earlier try or at the front's
                # initialize, is not sent its descriptor twice: another portal may refuse that)
                self._initialize(ref, token, shape, group, path, app_id)
            if row.asked == "created":
                self._subscribe(ref, token)
                self._set(token, asked="initialized")
            row = self._by_token(token)
            if row.asked in ("initialized", "running"):
                # known from now on: the deploys of this share's other components ask no more
                self._ready[token] = row
            return row

    def _by_token(self, token: str, conn: Any = None) -> Any:
        """The delegation row ``token`` as the store has it now (``conn``: inside a transaction
        already open)."""
        query = select(delegations).where(delegations.c.token == token)
        if conn is not None:
            return conn.execute(query).first()
        with self.store.read() as conn:
            return conn.execute(query).first()

    def _created(self, app_id: str, generation: int, group: str, token: str) -> tuple[Any, Ref]:
        """The delegation ``token`` (its row, written before the create is asked) and its
        sub-application. A row without an address was written by an earlier try whose create
        may have been done there, its answer lost (the front was killed): the sub-application
        is first looked for by the name it was created with (the token), so that another
        portal that ignores the client-token option still gets one create."""
        row = self._by_token(token)
        fresh = row is None
        if fresh:
            with self.store.write() as conn:
                conn.execute(insert(delegations).values(
                    token=token, app_id=app_id, host=self.host.name, grp=group,
                    generation=generation, asked="created", updated=self.clock()))
                row = self._by_token(token, conn)
            self._rows.clear()
        if row.address is not None:
            return row, Ref(row.address, row.resource_id or "")
        ref = (None if fresh else self.portal().find(token)) or self.portal().create(token)
        self._set(token, address=ref.address, resource_id=ref.resource_id)
        return row, ref

    def _mine(self, shape: Shape, group: str) -> set[str]:
        return {p for p, h in shape.placed.items() if h == self.host.name and shape.groups.get(p) == group}

    def _foreign(self, shape: Shape, group: str) -> set[str]:
        key = (id(shape), group)
        known = self._foreigns.get(key)
        if known is not None and known[0] is shape:
            return known[1]
        if len(self._foreigns) > 4096:
            self._foreigns.clear()
        mine = self._mine(shape, group)
        found = foreign_refs(shape.tree, share(shape.tree, mine), mine)
        self._foreigns[key] = (shape, found)
        return found

    def _initialize(self, ref: Ref, token: str, shape: Shape, group: str, path: str,
                    app_id: str = "") -> None:
        """Send the share: this host's leaves of ``group`` as a native descriptor, with the
        lazy references to other hosts' components resolved there first (remote resolve)."""
        mine = self._mine(shape, group)
        comps = share(shape.tree, mine)
        foreign = foreign_refs(shape.tree, comps, mine)
        if foreign:
            comps = substitute(comps, {t: self._resolve_elsewhere(app_id, shape, t, token)
                                       for t in sorted(foreign)})
        # every value this portal keeps secret (a literal, a copy of one, a reference to one:
        # the value put in its place) goes marked secret: the host portal keeps it so too
        self.portal().initialize(ref, native.to_xml(comps, shape.tree.secrets), token)

    def _resolve_elsewhere(self, app_id: str, shape: Shape, target: str, token: str) -> Any:
        """The value of ``target`` outside the share: an attribute the descriptor gave, from
        the tree (as a reference between this portal's own components reads it: a secret one
        too, which its host portal does not return); a runtime value of a component another
        host portal runs, through its ``resolve``, or of one this portal runs on a host of its
        own, from its record; ``Later`` while it has none yet (for at most ``FOREIGN_WAIT``
        seconds), a ``ResolutionError`` at once when that record says it never will (``NEVER``:
        a key its value lacks, a loop), naming the reference and the host."""
        at = shape.tree.split_target(target)
        comp_path = at.component
        given = shape.tree.find(comp_path).attributes.get(at.name)
        try:
            given = at.select(given, secret=shape.tree.within_secret) if given is not None \
                else None       # the part named
        except ResolutionError as e:
            if e.kind != "lazy-value":
                raise       # a key the value given does not have: never will
            # (a lazy value on the way to the part: resolved where it runs)
        if given is not None and not has_lazy(given):
            return given    # a value the descriptor gave
        if given is not None and shape.tree.is_secret(target):
            raise ResolutionError("%s is a secret its host resolves itself and returns to nobody: "
                                  "a component on another host cannot be given it" % target,
                                  kind="unresolved-reference", path=target)
        where = shape.placed.get(comp_path) or ""
        peer = self.peers.get(where)
        try:
            if peer is None and where in self.own_hosts and self.own_value is not None:
                # on a host this portal enacts itself (``local``, SSH, Slurm): its own record
                value = self.own_value(app_id, target)
            elif peer is None:
                raise RemoteFault("%s is on host %s, which neither this portal nor a host portal "
                                  "runs" % (target, where))
            else:
                row = peer._row(app_id, comp_path)
                if row is None or row.address is None:
                    raise RemoteFault("%s is not delegated yet" % comp_path)
                value = peer.portal().resolve(Ref(row.address, row.resource_id or ""), target)
        except (CddlmError, AgentUnreachable, Gone) as e:
            if isinstance(e, ResolutionError) and e.kind in NEVER:
                # the record of the host that runs it says it never will be (a key not there,
                # a loop): the share fails now, not after FOREIGN_WAIT
                self._waiting.pop(token, None)
                reason = e.message if e.message.startswith(target) else "%s: %s" % (target, e.message)
                raise ResolutionError("host %s says %s" % (where, reason), kind=e.kind,
                                      path=target) from None
            since = self._waiting.setdefault(token, time.monotonic())
            if time.monotonic() - since > FOREIGN_WAIT:
                raise RemoteFault("%s has no value after %.0f s: %s" % (target, FOREIGN_WAIT, e)) from None
            raise Later(0.5, "waiting for %s: %s" % (target, e)) from None
        self._waiting.pop(token, None)
        return value

    def _subscribe(self, ref: Ref, token: str) -> None:
        """Push: the host portal notifies this portal of the sub-application's lifecycle
        (``--agent-callback``, else its own URL). Only a hint to look now; the pings decide, so a
        host portal that refuses the subscription is still followed."""
        consumer = self.callback()
        if not consumer:
            return
        try:
            self.portal().subscribe(ref, consumer.rstrip("/") + "/cddlm/agents/" + self.host.name)
            if len(self._pushed) > 4096:
                self._pushed.clear()
            self._pushed.add(token)
        except (RemoteFault, Gone, AgentUnreachable) as e:
            log.info("host %s took no lifecycle subscription: %s (pings follow it)", self.host.name, e)

    def _set(self, token: str, **values: Any) -> None:
        self._ready.pop(token, None)
        self._rows.clear()
        with self.store.write() as conn:
            conn.execute(update(delegations).where(delegations.c.token == token)
                         .values(updated=self.clock(), **values))

    def status(self, row: Any, fresh: bool = False) -> Status:
        """The sub-application's status, pinged at most every ``STATUS_TTL`` seconds (longer for
        a large one); a notification from its host portal (``forget``) ends that at once."""
        cached = self._status.get(row.token)
        if cached and not fresh and _young(cached):
            return cached[1]
        with self._token_lock(row.token + "/status"):
            cached = self._status.get(row.token)
            if cached and not fresh and _young(cached):
                return cached[1]
            st = self.portal().status(Ref(row.address, row.resource_id or ""))
            self._status[row.token] = (time.monotonic(), st)
            if st.state != row.remote_state:
                self._set(row.token, remote_state=st.state, info=st.reason)
            return st

    def forget(self) -> None:
        """Drop cached statuses (a notification came: the next look pings again), and wake the
        batches watching their shares here."""
        self._status.clear()
        with self._notice:
            self._notices += 1
            self._notice.notify_all()

    # -- the runner interface -----------------------------------------------------------------------
    def _component(self, st: Status, path: str) -> tuple[str, str]:
        """The state and detail of the component at ``path`` in the sub-application."""
        return st.components.get(path, ("", ""))

    def _outcome(self, row: Any, st: Status, path: str, wanted: tuple[str, ...],
                 event: str | None) -> Outcome | None:
        """``event`` (None: the state the host portal gives it; ``completed`` always is)
        when the component is in one of the ``wanted`` states; a failure (naming the host, the
        sub-application and the remote reason) when it or the sub-application failed or
        ended; None while it is on its way."""
        ref = Ref(row.address, row.resource_id or "")
        runtime = {"subApplication": row.address, "subApplicationId": row.resource_id,
                   "hostPortal": self.host.agent}
        state, detail = self._component(st, path)
        if state in wanted:
            return Outcome("completed" if state == "completed" else event or state, runtime=runtime)
        if state == "failed" or st.state == "failed" or st.state == "terminated":
            reason = detail or st.reason or st.state
            if st.state == "terminated" and state != "failed":
                reason = "ended: %s" % (st.reason or "terminated")
            runtime["remote"] = remote_info(self.host.name, self.host.agent, ref, reason, st.fault)
            return Outcome("failed", describe(self.host.name, ref, reason), runtime=runtime)
        return None

    def _failed(self, reason: str, cause: str | None = None) -> Outcome:
        """A failure of the host portal's part (no sub-application named), with the remote
        side in ``runtime`` for the terminationInfo."""
        return Outcome("failed", describe(self.host.name, None, reason), runtime={
            "remote": remote_info(self.host.name, self.host.agent, None, reason, cause)})

    def _guard(self, members: list[tuple[Any, str]], fn: Callable[[], list]) -> list:
        """``fn()``'s (key, outcome) pairs for a share's ``members``; a fault or a lost
        sub-application fails them all, naming the host; silence is ``Later`` (or, for a
        delegate's portal, which no host monitor watches, a failure after the lease)."""
        try:
            out = fn()
            self._silent_since = None
            return out
        except AgentUnreachable as e:
            if not self.monitored:
                since = self._silent_since = self._silent_since or time.monotonic()
                if time.monotonic() - since > self.settings.agent_lease:
                    failed = self._failed("the portal gave no answer for %.0f s: %s" % (
                        time.monotonic() - since, e))
                    return [(key, failed) for key, _ in members]
            raise Later(1.0, str(e)) from None
        except RemoteFault as e:
            failed = self._failed("the host portal answered with a fault: %s" % e.message, e.cause)
        except Gone as e:
            failed = self._failed("the host portal no longer knows the sub-application: %s" % e)
        except ResolutionError as e:    # a value the share needs cannot be had (never will)
            failed = self._failed(e.message)
        return [(key, failed) for key, _ in members]

    def _outcomes(self, row: Any, st: Status, members: list[tuple[Any, str]],
                  wanted: tuple[str, ...], event: str | None) -> list:
        return [(key, out) for key, out in ((key, self._outcome(row, st, path, wanted, event))
                                            for key, path in members) if out is not None]

    def _shares(self, jobs: list[tuple[Any, Target]]) -> dict[str, list[tuple[Any, str]]]:
        """A batch's (key, path) pairs by start group: one sub-application each."""
        shape = self._shape(jobs[0][1].app_id)
        out: dict[str, list[tuple[Any, str]]] = {}
        for key, t in jobs:
            out.setdefault(self._group(shape, t.path), []).append((key, t.path))
        return out

    def _rounds(self, shares: dict[str, list[tuple[Any, str]]],
                look: Callable[[str, list[tuple[Any, str]]], list], keep_lease, report: Report,
                why: str) -> None:
        """Ask ``look(share, members)`` about each share (one ping of its sub-application) in
        rounds until every member is reported; it returns the (key, outcome) pairs known now.
        Between rounds: until the host portal notifies a change, or a pause that grows from
        ``FIRST_PAUSE`` to ``LAST_PAUSE``, keeping the batch's lease. After ``AWAIT`` seconds,
        or when a share cannot go on yet (``Later``), the members not reported are asked again
        later, holding no worker meanwhile."""
        deadline = time.monotonic() + AWAIT
        pause = FIRST_PAUSE
        later: Later | None = None
        seen = self._notices
        while shares:
            for name in list(shares):
                try:
                    done = look(name, shares[name])
                except Later as e:
                    later = e if later is None or e.delay < later.delay else later
                    del shares[name]
                    continue
                if done:
                    report(done)
                    gone = {id(key) for key, _ in done}
                    shares[name] = [m for m in shares[name] if id(m[0]) not in gone]
                if not shares[name]:
                    del shares[name]
            if not shares:
                break
            if time.monotonic() > deadline:
                raise Later(0.3, why)
            keep_lease()
            seen = self._pause(pause, seen)
            pause = min(LAST_PAUSE, pause * 1.5)
        if later is not None:
            raise later

    def _pause(self, seconds: float, seen: int) -> int:
        """Wait up to ``seconds`` for a notification newer than ``seen``; the newest one's number."""
        with self._notice:
            if self._notices == seen:
                self._notice.wait(seconds)
            return self._notices

    def deploy_many(self, jobs: Iterable[tuple[Any, Target]], keep_lease, report: Report) -> None:
        """Deploy a batch's components of this host: each start group's share is made and sent
        whole, in one ``initialize`` (``_ensure``), then watched with one ping per round until
        each component is deployed or failed. A share needing values of components elsewhere,
        which exist once those run, is only made now: it is sent when its group starts.
        Each component is reported as its host portal says it is: a share run as soon as it
        is sent (``_starts_with_deploy``) is reported as it starts there (starting, running),
        not as deployed, which it is only for the moment before its host portal starts it."""
        jobs = list(jobs)
        app_id = jobs[0][1].app_id

        def look(group: str, members: list[tuple[Any, str]]) -> list:
            def go() -> list:
                shape = self._shape(app_id)
                if self._foreign(shape, group):
                    row = self._ensure(app_id, members[0][1], initialize=False)
                    out = Outcome("deployed", runtime={"subApplication": row.address,
                                                       "subApplicationId": row.resource_id,
                                                       "hostPortal": self.host.agent})
                    return [(key, out) for key, _ in members]
                row = self._ensure(app_id, members[0][1])
                if row.asked == "initialized" and self._starts_with_deploy(app_id, shape):
                    row = self._run(row) or row
                return self._outcomes(row, self.status(row), members, STARTED_THERE
                                      if row.asked == "running" else DEPLOYED_THERE, None)
            return self._guard(members, go)
        self._rounds(self._shares(jobs), look, keep_lease, report,
                     "the sub-application is still deploying")

    def _starts_with_deploy(self, app_id: str, shape: Shape) -> bool:
        """Whether a share may be run as soon as it is sent: the application is to run, and
        nothing orders its starts (one start group: no sequence; a share needing values of
        components elsewhere is sent at its start, not here). The host portal then deploys
        and starts its share in one go, as a portal takes initialize and run back to back,
        rather than waiting for every host's deploy and this portal's start of the group."""
        if not self.early_run or set(shape.groups.values()) - {"0"}:
            return False
        app, _ = self._app(app_id)
        return app.desired == "running"

    def _run(self, row: Any) -> Any:
        """The share's ``run``, asked once (recorded): its newest row, None while it cannot be
        asked yet (another batch is asking; a portal not ours still deploying it)."""
        with self._token_lock(row.token):
            row = self._by_token(row.token)     # another batch may have run it
            if row.asked != "initialized":
                return None
            st = self.status(row, fresh=True)
            if st.state == "instantiated" and not self.early_run:
                return None     # still deploying: the next round looks again
            if st.state in ("instantiated", "initialized"):
                self.portal().run(Ref(row.address, row.resource_id or ""))
            self._set(row.token, asked="running")
            return self._by_token(row.token)

    def start_many(self, jobs: Iterable[tuple[Any, Target, Any, Any]], keep_lease,
                   report: Report) -> None:
        """Start a batch's components of this host: one ``run`` per share (recorded, so it is
        asked once), then one ping per share and round until each runs or failed."""
        jobs = [(key, t) for key, t, *_ in jobs]
        app_id = jobs[0][1].app_id

        def look(group: str, members: list[tuple[Any, str]]) -> list:
            def go() -> list:
                row = self._ensure(app_id, members[0][1])
                if row.asked == "initialized":
                    row = self._run(row)
                    if row is None:
                        return []
                return self._outcomes(row, self.status(row), members, ("running", "completed"),
                                      "running")
            return self._guard(members, go)
        self._rounds(self._shares(jobs), look, keep_lease, report,
                     "the sub-application is still starting")

    def check(self, t: Target, pid: int | None, started: str | None) -> Outcome | None:
        row = self._row(t.app_id, t.path)
        if row is None or row.address is None:
            return None
        try:
            st = self.status(row)
        except AgentUnreachable:
            return None     # the host monitor decides when silence is a failure
        except Gone:
            return Outcome("failed", describe(self.host.name, Ref(row.address, row.resource_id or ""),
                                              "the host portal no longer knows it"))
        except RemoteFault as e:
            return self._failed("the host portal answered with a fault: %s" % e.message, e.cause)
        out = self._outcome(row, st, t.path, ("running", "completed", "starting", "deployed"), "running")
        return out if out is not None and out.event in ("failed", "completed") else None

    def attention(self, app_id: str, paths: list[str]) -> set[str]:
        """Of ``paths`` (running here, as this portal recorded them), those a liveness check
        must look at: the ones their sub-application's answer (one ping per share, shared) does
        not show running. A pass over 10,000 remote components then reads none of their rows
        while all run. A share whose host portal is silent is the host monitor's business."""
        try:
            shape = self._shape(app_id)
        except Gone:
            return set(paths)
        shares: dict[str, list[str]] = {}
        for path in paths:
            shares.setdefault(self._group(shape, path), []).append(path)
        out: set[str] = set()
        for members in shares.values():
            row = self._row(app_id, members[0])
            if row is None or row.address is None or self._quiet(row.token):
                continue
            seen = self._notices        # (a notification during the ping is not missed)
            try:
                st = self.status(row)
            except AgentUnreachable:
                continue
            except (Gone, RemoteFault):
                out.update(members)
                continue
            changed = {p for p in members if self._component(st, p)[0] != "running"}
            out.update(changed)
            if not changed:
                self._calm.put(row.token, seen)
        return out

    def _quiet(self, token: str) -> bool:
        """Whether the share ``token`` was seen all running lately by a ping (``CALM``, at most
        half the lease: the default liveness interval, so that a fencing host portal is renewed
        as often as before), and its host portal, which notifies this portal of its changes
        (the push path), has sent none since: the liveness pass need not ping it again (a pass
        over 10,000 components on 10 host portals, every 0.5 s, pinged each share of 1,500
        components each time). A share that does not notify here is pinged every pass."""
        return token in self._pushed and self._calm.get(token) == self._notices

    def stop_many(self, jobs: Iterable[tuple[Any, Target, Any, Any]], keep_lease,
                  report: Report) -> None:
        """Stop a batch's components of this host: each sub-application holding some is
        terminated once (recorded), watched with one ping per round, and destroyed when it
        has terminated; a component is stopped when it is (or its sub-application is gone)."""
        jobs = [(key, t) for key, t, *_ in jobs]
        try:
            shares = self._shares(jobs)
        except Gone:
            report([(key, Outcome("stopped")) for key, _ in jobs])
            return
        rows: dict[str, Any] = {}
        for group, members in list(shares.items()):
            row = self._row(jobs[0][1].app_id, members[0][1])
            if row is None or row.address is None or row.asked == "destroyed":
                report([(key, Outcome("stopped")) for key, _ in shares.pop(group)])
            else:
                rows[group] = row

        def look(group: str, members: list[tuple[Any, str]]) -> list:
            row = self._by_token(rows[group].token)
            stopped = [(key, Outcome("stopped")) for key, _ in members]
            if row is None or row.asked == "destroyed":
                return stopped
            ref = Ref(row.address, row.resource_id or "")
            try:
                with self._token_lock(row.token):
                    asked = row.asked != "terminated"
                    if asked:
                        self.portal().terminate(ref, "terminated by its front portal")
                        self._set(row.token, asked="terminated")
                    st = self.status(row, fresh=asked)     # (a round's look: shared)
                    if st.state == "terminated":
                        self.portal().destroy(ref)
                        self._set(row.token, asked="destroyed")
                        return stopped
                return [(key, Outcome("stopped")) for key, path in members
                        if st.components.get(path, ("", ""))[0] in ("stopped", "failed", "pending")]
            except Gone:
                self._set(row.token, asked="destroyed")
                return stopped
            except AgentUnreachable as e:
                if self._abandoned():
                    # the operator marked the host down: its part is given up, not waited for
                    out = Outcome("stopped", "host %s is marked down: its part was abandoned "
                                             "(sub-application %s)" % (self.host.name, row.resource_id))
                    return [(key, out) for key, _ in members]
                raise Later(1.0, str(e)) from None
            except RemoteFault as e:
                raise Later(2.0, "fault while terminating: %s" % e.message) from None
        self._rounds(shares, look, keep_lease, report, "the sub-application is still stopping")

    def _abandoned(self) -> bool:
        """Whether an operator (not the host monitor) marked this host down."""
        with self.store.read() as conn:
            mark = conn.execute(select(hosts_table).where(hosts_table.c.name == self.host.name)).first()
        return mark is not None and mark.down and not (mark.reason or "").startswith(DOWN_PREFIX)


class DelegateRunner(RemoteRunner):
    """A ``delegate`` component: its own descriptor (``language``, ``descriptor`` inline or
    read from a file or URL the portal may read, ``properties``) deployed as a sub-application
    of the portal it names, which may be any CDDLM portal: only the spec's operations are
    used, and the component follows the sub-application's state (initialized: deployed;
    running; terminated normally: completed; failed)."""

    STATES = {"initialized": "deployed", "running": "running", "failed": "failed"}
    monitored = False
    early_run = False       # any CDDLM portal: run once its sub-application is initialized

    def __init__(self, url: str, store: Store, settings: Settings, factory: PortalFactory,
                 read: Callable[[str], bytes], clock: Callable[[], float] = time.time,
                 callback: Callable[[], str | None] | None = None):
        super().__init__(Host(url[:256], url), store, settings, factory, clock, callback)
        self.read = read

    def _group(self, shape: Shape, path: str) -> str:
        return "delegate:" + path

    def _foreign(self, shape: Shape, group: str) -> set[str]:
        return set()

    def _initialize(self, ref: Ref, token: str, shape: Shape, group: str, path: str,
                    app_id: str = "") -> None:
        node = shape.tree.find(path)
        attrs = node.attributes if node is not None else {}
        descriptor = attrs.get("descriptor")
        text = descriptor if isinstance(descriptor, str) else ""
        if text and not text.lstrip().startswith("<") and "\n" not in text.strip():
            try:
                text = self.read(text.strip()).decode("utf-8", errors="replace")
            except CddlmError as e:
                raise RemoteFault("cannot read the delegate's descriptor %s: %s" % (text.strip(), e)) from None
        props = {str(k): str(v) for k, v in (attrs.get("properties") or {}).items()}
        self.portal().initialize_foreign(ref, str(attrs.get("language") or ""), text, props, token,
                                         str(attrs["version"]) if attrs.get("version") else None)

    def prepare(self, app_id: str, generation: int, path: str, tree: Deployment) -> None:
        """Before the front's initialize commits: make and initialize the sub-application
        (under the token the engine's deploy uses later, which then finds it done). A fault
        is raised as ``RemoteFault`` after the sub-application is destroyed again; a portal
        that does not answer now is left to the engine, which keeps asking."""
        group = self._group(None, path)
        token = token_for(app_id, generation, self.host.name, group)
        ref: Ref | None = None
        try:
            with self._token_lock(token):
                _, ref = self._created(app_id, generation, group, token)
                # (one initialized by a try before a crash is not sent its descriptor twice)
                if self.portal().status(ref).state == "instantiated":
                    self._initialize(ref, token, Shape(tree, {}, {}), "", path, app_id)
        except AgentUnreachable:
            return
        except (RemoteFault, Gone) as e:
            try:
                if ref is not None:
                    self._end(ref, "its front portal's initialize was refused")
                with self.store.write() as conn:
                    conn.execute(delegations.delete().where(delegations.c.token == token))
            except (RemoteFault, Gone, AgentUnreachable):
                pass
            if isinstance(e, RemoteFault):
                raise RemoteFault("component %s: the portal %s refused its descriptor: %s"
                                  % (path, self.host.agent, e.message), e.cause) from None
            raise RemoteFault("component %s: the portal %s lost its sub-application"
                              % (path, self.host.agent)) from None

    def _component(self, st: Status, path: str) -> tuple[str, str]:
        if st.state == "terminated":
            return ("completed", "") if not st.fault else ("failed", st.reason or "")
        return self.STATES.get(st.state, st.state), st.reason or ""


# -- the host monitor -------------------------------------------------------------------------------
class Agents:
    """Pings every host portal on a schedule; one silent for ``Settings.agent_lease`` is
    marked down (reason ``unreachable: ...``), and marked up again when it answers."""

    def __init__(self, store: Store, settings: Settings, runners: dict[str, RemoteRunner],
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.settings = settings
        self.runners = runners
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(16, len(runners))),
                                        thread_name_prefix="cddlm-agent")

    def interval(self) -> float:
        return max(0.5, self.settings.agent_lease / 4)

    def _probe(self, runner: RemoteRunner) -> str | None:
        try:
            runner.portal().probe()
            return None
        except (AgentUnreachable, RemoteFault, Gone) as e:
            return str(e)
        except Exception as e:      # a garbage answer is silence too
            return "%s: %s" % (type(e).__name__, e)

    def check(self) -> tuple[list[str], list[str]]:
        """One round; returns (hosts newly down, hosts back up)."""
        names = list(self.runners)
        results = dict(zip(names, self._pool.map(lambda n: self._probe(self.runners[n]), names)))
        now = self.clock()
        went_down, came_up = [], []
        with self.store.write() as conn:
            known = {r.host: r for r in conn.execute(select(agents)).all()}
            marks = {r.name: r for r in conn.execute(select(hosts_table)).all()}
            for name, error in results.items():
                runner = self.runners[name]
                if error is None:
                    runner.failing = None
                elif getattr(runner, "failing", None) is None:
                    runner.failing = now        # its first unanswered ping (or read; SSH hosts too)
                row = known.get(name)
                if row is None:     # a host seen for the first time gets one lease of grace
                    last_ok = now
                    conn.execute(insert(agents).values(host=name, last_ok=now, last_error=error,
                                                       checked=now))
                else:
                    last_ok = now if error is None else (row.last_ok or row.checked)
                    conn.execute(update(agents).where(agents.c.host == name).values(
                        last_ok=last_ok, last_error=error, checked=now))
                mark = marks.get(name)
                down = mark is not None and mark.down
                if error is None and down and (mark.reason or "").startswith(DOWN_PREFIX):
                    self._mark(conn, name, False, None, now)
                    came_up.append(name)
                elif error is not None and not down and now - last_ok >= self.settings.agent_lease:
                    # one short line for people (the raw error is logged below, once)
                    reason = DOWN_PREFIX + since_and_cause(runner.failing, error)
                    self._mark(conn, name, True, reason, now)
                    went_down.append(name)
                    log.warning("host %s is unreachable: marked down; %s answered nothing since "
                                "%.1f s ago (last answer %.1f s ago, lease %.0f s): %s", name,
                                runner.host.agent, now - runner.failing, now - last_ok,
                                self.settings.agent_lease, error)
        for name in came_up:
            log.info("host %s answers again: marked up", name)
        if went_down or came_up:
            for runner in self.runners.values():
                runner.forget()
        for name, error in results.items():
            if error is None:
                try:
                    self.runners[name].sweep()
                except (AgentUnreachable, RemoteFault) as e:
                    log.info("could not end the orphans on host %s yet: %s", name, e)
        return went_down, came_up

    @staticmethod
    def _mark(conn, name: str, down: bool, reason: str | None, now: float) -> None:
        done = conn.execute(update(hosts_table).where(hosts_table.c.name == name)
                            .values(down=down, reason=reason, updated=now)).rowcount
        if not done:
            conn.execute(insert(hosts_table).values(name=name, down=down, reason=reason, updated=now))

    def close(self) -> None:
        self._pool.shutdown(wait=False)
