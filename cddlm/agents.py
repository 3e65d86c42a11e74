"""Other portals as the runners see them (``application/enactment/remote.py``): the
``HostPortal`` they ask for, made from ``cddlm.client`` over ``PortalHttp``, the one way this
portal calls another portal.

**Credentials go only where the operator says** (``--agent-credentials FILE``, TOML, readable
by its owner only when it holds a secret)::

    [default]                  # for every host the datacenter names with a portal agent
    user = "front"
    password = "..."           # or token = "..." (a bearer token)
    ca_file = "ca.pem"         # the CA that signed the host portals' certificates
    client_cert = "front.pem"  # mutual TLS (the host portal's --tls-client-ca)
    client_key = "front.key"

    [hosts.h2]                 # what differs for one host (by its datacenter name)
    user = "front-h2"
    password = "..."

    [hosts."https://other.example/cddlm/portal"]   # a portal delegate components may name
    token = "..."              # (by its exact URL: only this one, never [default])

    [hosts.s1]                 # a host whose agent is ssh://USER@ADDRESS[:PORT]
    ssh_key = "id_ed25519"     # the private key offered (no ssh-agent, no ~/.ssh/config)
    known_hosts = "known"      # its host key must be there (else ~/.ssh/known_hosts)

A datacenter host gets ``[default]``, then its URL's entry, then its name's. A ``delegate``
component's portal (a URL a tenant wrote) gets its exact URL's entry and nothing else; it must
be under a prefix the operator allows (``--allow-delegate-url``) and on an address the outbound
policy allows (public, or ``--delegate-network``), checked at initialize (a ``ResolutionFault``
saying which flag to set) and again at every connection. Credentials with a client certificate
never go over plain http: such a configuration is refused at startup.

**Every call is bounded**: one call to another portal takes at most ``--agent-timeout`` in all
and reads at most ``--agent-max-response-bytes`` (``cddlm.outbound``); its requests go only to
the origin the operator or tenant named (an EPR that names another host is taken as a path on
that origin); a request thread (a delegate's initialize) waits on other portals only within
one such deadline, and only ``--agent-request-slots`` at once (more: ``Busy``, try again).

Faults become ``RemoteFault`` whose ``cause`` is a WS-BaseFault (``cddlm.relay``, which bounds
what it keeps): the fault's own when it is one, else the fault wrapped, as is an HTTP error
page answering a create, initialize, run, terminate or destroy; silence, refusals, garbage,
answers too large, HTTP 429 (a limiter's "not now") and error pages answering reads (ping,
resolve, probe) become ``AgentUnreachable`` (judged by the lease); so does, from a datacenter's
host portal, a page saying "not now" (502, 503, 504: a proxy or balancer in front of it; the
lease judges, a brief outage fails nothing), while a delegate's portal answering one refuses at
once; a ``ResourceUnavailableFault`` (a busy host portal's "not now") likewise; a
sub-application the portal does not know becomes ``Gone``; a ``ResolutionFault`` answering a
resolve becomes a ``ResolutionError``: "none yet", unless its ``api:kind`` says it never will
be (``resolution_error``). A host portal may lie: what it says is bounded (its texts clipped),
an answer no honest host portal gives (an EPR for a component's value, a log offset no log has)
is garbage, and what it says of a component another host runs is not taken
(``Views._observed_there``).
"""

from __future__ import annotations

import contextlib
import os
import ssl
import stat
import threading
import tomllib
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import urlsplit

from lxml import etree

from cddlm import client, netsafe, ns, outbound, relay, transport
from cddlm.application import options as opts
from cddlm.application.enactment.remote import AgentUnreachable, Gone, Ref, Status
from cddlm.application.hosts import Host
from cddlm.config import Settings
from cddlm.errors import (Busy, ConfigurationError, RemoteFault, ResolutionError, UnsupportedLanguage,
                          clip)
from cddlm.lang import registry
from cddlm.lang.model import NEVER
from cddlm.transport import Reply

KEYS = {"user", "password", "token", "ca_file", "client_cert", "client_key",
        "ssh_key", "known_hosts"}     # the last two: SSH hosts (application/enactment/ssh.py)
GONE_FAULTS = {"ResourceUnknownFault", "NoSuchApplicationFault"}
# "not now" (errors.Busy: too many password checks at once, its store out of reach): silence
# judged by the lease, never a failure of the components asked about
BUSY_FAULTS = {"ResourceUnavailableFault"}
ANY_NETWORK = ("0.0.0.0/0", "::/0")     # the hosts the operator's datacenter names


def load_credentials(path: str | None) -> dict[str, dict[str, str]]:
    """{"default": {...}, host name or exact URL: {...}} from the file (empty without one)."""
    if not path:
        return {}
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        mode = os.stat(path).st_mode
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigurationError("--agent-credentials %s: %s" % (path, e)) from None
    out: dict[str, dict[str, str]] = {"default": dict(data.get("default") or {})}
    for name, values in (data.get("hosts") or {}).items():
        out[_key(str(name))] = dict(values)
    for name, values in out.items():
        unknown = set(values) - KEYS
        if unknown:
            raise ConfigurationError("--agent-credentials %s: unknown key(s) %s in [%s]" % (
                path, ", ".join(sorted(unknown)), name))
        if (values.get("password") or values.get("token")) and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigurationError("--agent-credentials %s holds a secret and others may read "
                                     "it: chmod 600 %s" % (path, path))
    return out


def _key(name_or_url: str) -> str:
    return name_or_url.rstrip("/") if "://" in name_or_url else name_or_url


def tls_context(creds: dict[str, str]) -> ssl.SSLContext:
    """TLS as these credentials say: only their CA when they name one, their certificate."""
    context = ssl.create_default_context(cafile=creds.get("ca_file"))
    if creds.get("client_cert"):
        context.load_cert_chain(creds["client_cert"], creds.get("client_key"))
    return context


class PortalHttp:
    """HTTP to one other portal (``transport.Http``): requests go to the origin of ``url`` only,
    to addresses the network policy allows (checked at every connection), with these
    credentials, within the deadline and the size cap."""

    def __init__(self, url: str, creds: dict[str, str], settings: Settings,
                 networks: tuple[str, ...] = ANY_NETWORK, public: bool = False,
                 refusal: str | None = None):
        parts = urlsplit(url)
        self.url = url
        self.refusal = refusal          # why nothing may be sent there at all
        self.scheme = parts.scheme.lower()
        self.origin = "%s://%s" % (parts.scheme, parts.netloc)
        self.networks, self.public = networks, public
        self.timeout = settings.agent_timeout
        self.max_bytes = settings.agent_max_response_bytes
        try:
            self.context = tls_context(creds) if self.scheme == "https" else None
        except (OSError, ssl.SSLError) as e:
            raise AgentUnreachable("cannot use the TLS files of the credentials for %s: %s" % (url, e)) \
                from None
        who = client.Credentials(creds.get("user"), creds.get("password"), creds.get("token"))
        self.authorization = who.authorization()

    def post(self, address: str, data: bytes, headers: dict[str, str], timeout: float) -> Reply:
        if self.refusal:
            raise client.Unreachable(self.refusal, sent=False)
        parts = urlsplit(address)
        here = self.origin + (parts.path or "/") + ("?" + parts.query if parts.query else "")
        try:
            t = netsafe.vet(here, self.networks, public=self.public, schemes=(self.scheme,),
                            what="portal")
        except netsafe.Refused as e:
            raise client.Unreachable("refused by this portal's outbound policy: %s" % e, sent=False) \
                from None
        if self.authorization:
            headers = dict(headers, Authorization=self.authorization)
        try:
            r = outbound.exchange(t, "POST", data, headers, timeout=min(timeout, self.timeout),
                                  max_bytes=self.max_bytes, context=self.context, keep_alive=True)
        except outbound.Unreachable as e:
            why = "no complete answer within %gs" % self.timeout if e.expired else str(e)
            raise client.Unreachable("%s: %s" % (self.url, why), sent=e.sent) from None
        if not r.complete:
            raise client.Unreachable("%s answered more than %d bytes (--agent-max-response-bytes)"
                                     % (self.url, self.max_bytes))
        if r.status == 429:     # a limiter's "not now" (the lease decides), never a failure
            raise client.Unreachable("%s answered HTTP 429 (too many requests)" % self.url)
        return Reply(r.status, r.body, r.headers, r.reason)


def known_version(language: str) -> str | None:
    """The version of ``language`` this portal speaks (None: a language it does not know)."""
    try:
        return registry.get(language).version
    except UnsupportedLanguage:
        return None


# what a proxy or balancer answers for a peer that is briefly away: silence, from a host portal
NOT_NOW = frozenset({502, 503, 504})


def resolution_error(fault: client.PortalFault, path: str) -> ResolutionError:
    """Another portal's ``ResolutionFault`` about ``path`` as this portal would raise it: of the
    kind its ``api:kind`` says when that kind never resolves (``NEVER``: a key its value lacks,
    a loop), else ``unresolved-reference``, "none yet" (so is every fault of a portal that
    writes no kind); its reason from the ``Description`` (the faultstring adds kind and path)."""
    said = fault.detail if fault.detail is not None else etree.Element("none")
    kind = (said.findtext("{%s}kind" % ns.API) or "").strip()
    reason = (said.findtext("{%s}Description" % ns.WSRF_BF) or "").strip() or fault.message
    return ResolutionError(clip(reason), kind=kind if kind in NEVER else "unresolved-reference",
                           path=path)


class ClientHostPortal:
    """Another portal through ``cddlm.client`` (no failover: a host portal stands alone);
    ``host``: a datacenter's host portal, whose "not now" pages are silence under the lease
    (a delegate's portal, watched by no lease, refuses with them)."""

    def __init__(self, url: str, http: PortalHttp, settings: Settings, host: bool = False):
        self.url = url
        self.host = host
        self.timeout = settings.agent_timeout
        self.portal = client.Portal(url, timeout=self.timeout, failover=False, http=http)

    def _do(self, fn: Callable[[], Any], read: bool = False) -> Any:
        """``fn()`` with its errors translated (module docstring); ``read``: an error page is
        silence (the lease judges), not a refusal."""
        try:
            return fn()
        except client.PortalFault as e:
            if e.fault in GONE_FAULTS:
                raise Gone(str(e)) from None
            if e.fault in BUSY_FAULTS:
                raise AgentUnreachable("%s is busy: %s" % (self.url, e)) from None
            raise RemoteFault(clip("%s answered %s" % (self.url, e)),
                              relay.fault_cause(e.code, e.message, e.detail)) from None
        except transport.NotSoap as e:
            if read or (self.host and e.status in NOT_NOW):
                raise AgentUnreachable(str(e)) from None
            raise RemoteFault(str(e), relay.wrap(None, "HTTP %d %s" % (e.status, e.reason), status=e.status,
                                                 content_type=e.content_type, page=e.text)) from None
        except client.Unreachable as e:
            raise AgentUnreachable(str(e)) from None
        except (RemoteFault, Gone, AgentUnreachable, ResolutionError):
            raise
        except Exception as e:      # zeep or lxml on an answer that is not what the WSDL says
            raise AgentUnreachable("%s answered garbage: %s: %s" % (self.url, type(e).__name__, e)) from None

    def _app(self, ref: Ref) -> client.Application:
        return self.portal.application(client.Reference(ref.address, ref.resource_id))

    def create(self, token: str) -> Ref:
        """A sub-application named ``token`` (the client-token option goes too: a portal that
        understands it makes a repeat harmless; one that ignores it is asked once, ``find``)."""
        app = self._do(lambda: self.portal.create(name=token, options={opts.CLIENT_TOKEN: token}))
        return Ref(app.reference.address, app.reference.resource_id)

    def find(self, token: str) -> Ref | None:
        """The sub-application created under ``token`` (spec ``lookup`` by name), None when the
        portal knows none (or answers lookup with any fault)."""
        try:
            app = self._do(lambda: self.portal.lookup(token), read=True)
        except (Gone, RemoteFault):
            return None
        return Ref(app.reference.address, app.reference.resource_id)

    def initialize(self, ref: Ref, descriptor: etree._Element, token: str) -> None:
        self._do(lambda: self._app(ref).initialize(ns.NATIVE, body=descriptor,
                                                   options={opts.CLIENT_TOKEN: token},
                                                   version=known_version(ns.NATIVE)))

    def initialize_foreign(self, ref: Ref, language: str, text: str, properties: dict[str, str],
                           token: str, version: str | None = None) -> None:
        """Spec 4.4.1: the language and version of the descriptor are supplied (the version
        the delegate names, else the one this portal knows of that language)."""
        self._do(lambda: self._app(ref).initialize(language, text=text, properties=properties or None,
                                                   options={opts.CLIENT_TOKEN: token},
                                                   version=version or known_version(language)))

    def run(self, ref: Ref) -> None:
        """Run; a sub-application already asked to run (by an earlier try whose answer was
        lost, a front portal killed before it recorded the ask) is no error: the lifecycle
        refuses a second run while it starts (initialized, desired running) or once it runs."""
        def go() -> None:
            try:
                self._app(ref).run()
            except client.PortalFault as e:
                if e.fault != "WrongStateFault" or \
                        self._app(ref).ping().get("state") not in ("initialized", "running"):
                    raise
        self._do(go)

    def terminate(self, ref: Ref, reason: str) -> None:
        self._do(lambda: self._app(ref).terminate(reason))

    def destroy(self, ref: Ref) -> None:
        self._do(lambda: self._app(ref).destroy())

    def status(self, ref: Ref) -> Status:
        r = self._do(lambda: self._app(ref).ping(), read=True)
        info = r.get("terminationInfo") or {}
        fault = info.get("fault")
        if fault is not None:
            fault = relay.bounded(fault) if relay.is_base_fault(fault) else \
                relay.wrap(None, info.get("reason") or "failed", fault)
        return Status(r.get("state") or "",
                      {h["path"]: (h.get("state") or "", clip(h.get("detail") or ""))
                       for h in r.get("health") or [] if h.get("path")},
                      clip(info["reason"]) if info.get("reason") else None, fault)

    def subscribe(self, ref: Ref, consumer: str) -> None:
        self._do(lambda: self._app(ref).subscribe(consumer, termination=None))

    def resolve(self, ref: Ref, path: str) -> Any:
        """The value there; the portal's ``ResolutionFault`` as ``ResolutionError``
        (``resolution_error``)."""
        def ask() -> Any:
            try:
                value = self._app(ref).resolve(path)
            except client.PortalFault as e:
                if e.fault != "ResolutionFault":
                    raise
                raise resolution_error(e, path) from None
            if self.host and isinstance(value, client.Reference):
                # (a host runs no delegate: a component's value is never an EPR)
                raise ValueError("an application reference")
            return value
        return self._do(ask, read=True)

    def logs(self, ref: Ref, path: str, stream: str, lines: int | None, offset: int | None) -> dict:
        """The lines and the offset to read on from; an offset no log has (negative, past
        2**63) is garbage: relayed, the next read of ``cddlm logs -f`` would be refused."""
        def read() -> dict:
            found = self._app(ref).logs(path, stream, lines=lines, offset=offset)
            if not 0 <= found["offset"] < 2 ** 63:
                raise ValueError("offset %d" % found["offset"])
            return found
        return self._do(read, read=True)

    def components(self, ref: Ref) -> list[dict]:
        return self._do(lambda: self._app(ref).components(), read=True)

    def probe(self) -> None:
        self._do(self.portal.probe, read=True)


class AgentClients:
    """The portal's calls to other portals, as its operator configured them: the runners'
    ``PortalFactory`` for datacenter hosts (``host``) and delegates' portals (``delegate``),
    the startup check (``check``), the initialize check of a delegate's portal (``admit``) and
    the bound on request threads waiting on other portals (``waiting``)."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.creds = load_credentials(settings.agent_credentials_file)
        self._slots = threading.BoundedSemaphore(max(1, settings.agent_request_slots))
        # an allowed prefix that names an address allows that address
        self.delegate_networks = tuple(settings.delegate_networks) + \
            netsafe.literal_addresses(settings.allowed_delegate_urls)

    def host_creds(self, host: Host) -> dict[str, str]:
        chosen = dict(self.creds.get("default") or {})
        chosen.update(self.creds.get(_key(host.agent or "")) or {})
        chosen.update(self.creds.get(host.name) or {})
        return chosen

    def delegate_creds(self, url: str) -> dict[str, str]:
        return dict(self.creds.get(_key(url)) or {}) if "://" in url else {}

    def check(self, hosts: Iterable[Host]) -> None:
        """Refuse to start where credentials with a client certificate would go over plain
        http, or name TLS files that cannot be used."""
        targets = [(h.agent, self.host_creds(h), "host %s" % h.name) for h in hosts
                   if urlsplit(h.agent or "").scheme.lower() in ("http", "https")]
        targets += [(k, v, "[hosts.\"%s\"]" % k) for k, v in self.creds.items() if "://" in k]
        for url, creds, what in targets:
            scheme = urlsplit(url).scheme.lower()
            if creds.get("client_cert") and scheme == "http":
                raise ConfigurationError(
                    "--agent-credentials: %s (%s) is plain http, but its credentials hold a client "
                    "certificate (mutual TLS): give its https URL, or credentials without "
                    "client_cert for it" % (what, url))
            if scheme == "https":
                try:
                    tls_context(creds)
                except (OSError, ssl.SSLError) as e:
                    files = ", ".join("%s = %s" % (k, creds[k]) for k in ("ca_file", "client_cert",
                                                                         "client_key") if creds.get(k))
                    raise ConfigurationError("--agent-credentials: the TLS files for %s (%s): %s"
                                             % (what, files or "the system's CAs", e)) from None

    def host(self, host: Host) -> ClientHostPortal:
        url = host.agent or ""
        return ClientHostPortal(url, PortalHttp(url, self.host_creds(host), self.settings), self.settings,
                                host=True)

    def delegate(self, host: Host) -> ClientHostPortal:
        url = host.agent or ""
        refusal = None if self._allowed(url) else self._not_allowed(url)
        http = PortalHttp(url, self.delegate_creds(url), self.settings, self.delegate_networks,
                          public=True, refusal=refusal)
        return ClientHostPortal(url, http, self.settings)

    def _allowed(self, url: str) -> bool:
        return any(netsafe.url_under(url, prefix) for prefix in self.settings.allowed_delegate_urls)

    def _not_allowed(self, url: str) -> str:
        return "the portal %s is not under a URL prefix this portal allows delegates to name (%s)" % (
            url, ", ".join(self.settings.allowed_delegate_urls) or
            "none: its operator allows some with --allow-delegate-url")

    def admit(self, path: str, url: object) -> None:
        """``ResolutionError`` unless delegate component ``path`` may name portal ``url``."""
        def refuse(why: str) -> ResolutionError:
            return ResolutionError(why, kind="delegate", path=path + "/portal")

        if not isinstance(url, str):
            raise refuse("a delegate's portal must be written as a URL, not computed at run time")
        if not self._allowed(url):
            raise refuse(self._not_allowed(url))
        try:
            netsafe.vet(url, self.delegate_networks, public=True, what="the portal")
        except netsafe.Refused as e:
            raise refuse("%s (its operator allows other networks with --delegate-network)" % e) from None

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """A request thread's calls to other portals inside: one deadline for them all, and a
        slot among the few request threads that may wait so (``Busy`` when none is free)."""
        if not self._slots.acquire(blocking=False):
            raise Busy("every request thread that may wait on another portal is waiting "
                       "(--agent-request-slots %d): try again shortly" % self.settings.agent_request_slots)
        try:
            with outbound.within(self.settings.agent_timeout):
                yield
        finally:
            self._slots.release()

