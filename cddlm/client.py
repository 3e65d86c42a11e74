"""A Python client for a CDDLM portal, on zeep and the project's own WSDL.

    from cddlm.client import Portal
    portal = Portal("http://127.0.0.1:8080/cddlm/portal")
    app = portal.create(name="web")
    app.initialize(language="urn:cddlm:lang:components:1", body=descriptor_element)
    app.run()
    app.wait_for("running")
    app.terminate("done"); app.wait_for("terminated"); app.destroy()

Typed operations go through zeep; resource properties are read as raw XML (zeep turns the
``any`` content of WS-RP responses into a mix of objects and elements), and WS-Notification
requests are built with lxml (zeep cannot send a topic expression's mixed content). A fault
from the portal is raised as ``PortalFault`` with the fault element's name and text. The
protocol comes from the project's WSDL and schemas (``cddlm.transport``): no ``?wsdl`` is
fetched, and every message carries SOAPAction, ``wsa:To``, ``wsa:Action`` and ``wsa:MessageID``.
A ``Portal`` contacts its portal once when made (``Unreachable`` if none of it and its
fallbacks answers); one given an ``http`` (a portal calling another) contacts it when used.

Failover: portals sharing a store list each other (``ext:portals``). When the portal stops
answering, a call is sent again through a live peer: the ``Portal`` binds to it, an
``Application`` rebinds its EPR there, a ``Subscription`` reaches its manager there. A call
that may have reached the dead portal is repeated only when repeating it is harmless (reads,
lookup, rebind, terminate, ping ...); create, initialize, run, destroy and subscribe are
repeated only when the connection was refused, so they never happen twice.

Credentials and TLS: a portal with users (README, "Running on a network") wants HTTP Basic
credentials or a bearer token on every request, and over https the client verifies the
portal's certificate (against ``Tls.ca_file``, else the system's CAs; never not at all) and may
present its own (mutual TLS, as portals delegating to each other do)::

    portal = Portal(url, credentials=Credentials("alice", password="..."),
                    tls=Tls(ca_file="ca.pem", cert="me.pem", key="me.key"))
    portal = Portal.from_environment()    # $CDDLM_PORTAL, $CDDLM_USER ... or the config file

Notifications arrive at a ``Listener`` (``cddlm.listener``, re-exported here):

    with Listener() as listener:
        sub = app.subscribe(listener.url("web"))      # or portal.subscribe(...): creations
        for event in iter(lambda: listener.get(timeout=60), None):
            print(event.state, event.sequence)
        sub.unsubscribe()
"""

from __future__ import annotations

import copy
import os
import stat
import time
import tomllib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import requests
import zeep
from lxml import etree

from cddlm import ns, transport, wsa, xmlsafe
from cddlm.config import DEFAULT_PORTAL
from cddlm.errors import ClientError
from cddlm.listener import Event, Listener
from cddlm.notify.topics import topic_element
from cddlm.transport import Http, RequestsHttp, Unreachable

__all__ = ["Application", "ClientConfig", "Credentials", "Event", "Listener", "Portal", "PortalFault",
           "Reference", "Subscription", "Tls", "Unreachable"]

A = "{%s}" % ns.API
APP_BINDING = "{%s}ApplicationBinding" % ns.API_WSDL
PORTAL_BINDING = "{%s}PortalBinding" % ns.API_WSDL
FINAL = {"terminated"}
WSNT = "{%s}" % ns.WSNT
EXT = "{%s}" % ns.EXT
LIFECYCLE, CREATED = ns.LIFECYCLE_TOPIC, ns.CREATED_TOPIC


class PortalFault(ClientError):
    """A SOAP fault from the portal; ``fault`` is the detail element's local name (the
    faultcode's without one), ``code`` the faultcode as written (``soapenv:Client``)."""

    def __init__(self, fault: str, message: str, detail: etree._Element | None = None,
                 code: str | None = None):
        super().__init__(message)
        self.fault = fault
        self.detail = detail
        self.code = code

    def __str__(self) -> str:
        return "%s: %s" % (self.fault, self.message)


@dataclass(frozen=True)
class Credentials:
    """Who the client is: a user and password (sent as HTTP Basic) or a bearer token."""
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def apply(self, session: requests.Session) -> None:
        if self.user and self.password is not None:
            session.auth = (self.user, self.password)
        elif self.token:
            session.headers["Authorization"] = "Bearer " + self.token

    def authorization(self) -> str | None:
        """The Authorization header these credentials send (None: none)."""
        if self.user and self.password is not None:
            return requests.auth._basic_auth_str(self.user, self.password)
        return "Bearer " + self.token if self.token else None


@dataclass(frozen=True)
class Tls:
    """How the client speaks TLS: the CAs it trusts for the portal's certificate (None: the
    system's), and its own certificate and key for mutual TLS."""
    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None

    def apply(self, session: requests.Session) -> None:
        if self.ca_file:
            if not os.path.isfile(self.ca_file):
                raise ClientError("the CA file %s does not exist" % self.ca_file)
            session.verify = self.ca_file
            # requests lets $REQUESTS_CA_BUNDLE override a session's own CAs: not these
            session.mount("https://", _TrustOnly(self.ca_file))
        elif session.verify is False:      # never silently unverified
            session.verify = True
        if self.cert:
            session.cert = (self.cert, self.key) if self.key else self.cert


class _TrustOnly(requests.adapters.HTTPAdapter):
    """HTTPS verified against one CA file, whatever the environment says."""

    def __init__(self, ca_file: str):
        super().__init__()
        self.ca_file = ca_file

    def send(self, request, **kwargs):
        kwargs["verify"] = self.ca_file
        return super().send(request, **kwargs)


CONFIG_KEYS = {"portal", "user", "password", "token", "ca_file", "client_cert", "client_key"}


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to reach a portal, from (in this order) what is given, the environment
    (``CDDLM_PORTAL``, ``CDDLM_USER``, ``CDDLM_PASSWORD``, ``CDDLM_TOKEN``, ``CDDLM_CA_FILE``,
    ``CDDLM_CLIENT_CERT``, ``CDDLM_CLIENT_KEY``) and the config file (``$CDDLM_CONFIG``, else
    ``~/.config/cddlm/client.toml``: the same keys in lower case without the prefix). A config
    file holding a password or token must be readable by its owner only (mode 0600)."""
    portal: str
    credentials: Credentials
    tls: Tls

    @classmethod
    def load(cls, portal: str | None = None, user: str | None = None, ca_file: str | None = None,
             client_cert: str | None = None, client_key: str | None = None,
             environ: dict | None = None) -> "ClientConfig":
        env = os.environ if environ is None else environ
        path = env.get("CDDLM_CONFIG") or os.path.join(
            env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config"),
            "cddlm", "client.toml")
        found = _config_file(path, explicit=bool(env.get("CDDLM_CONFIG")))

        def pick(given: str | None, key: str) -> str | None:
            return given or env.get("CDDLM_" + key.upper()) or found.get(key)

        who = pick(user, "user")
        password = env.get("CDDLM_PASSWORD") or (found.get("password") if found.get("user") in (None, who)
                                                 else None)
        return cls(pick(portal, "portal") or DEFAULT_PORTAL,
                   Credentials(who, password, env.get("CDDLM_TOKEN") or found.get("token")),
                   Tls(pick(ca_file, "ca_file"), pick(client_cert, "client_cert"),
                       pick(client_key, "client_key")))


def _config_file(path: str, explicit: bool) -> dict:
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        if explicit:
            raise ClientError("the config file %s does not exist" % path) from None
        return {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ClientError("cannot read the config file %s: %s" % (path, e)) from None
    unknown = set(data) - CONFIG_KEYS
    if unknown:
        raise ClientError("the config file %s has unknown keys: %s (known: %s)"
                          % (path, ", ".join(sorted(unknown)), ", ".join(sorted(CONFIG_KEYS))))
    if (data.get("password") or data.get("token")) and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ClientError("the config file %s holds a secret but others may read it (mode %o): "
                          "chmod 600 %s" % (path, stat.S_IMODE(st.st_mode), path))
    return {k: str(v) for k, v in data.items()}


@dataclass(frozen=True)
class Reference:
    """An application EPR: its address and its ResourceId."""
    address: str
    resource_id: str


def _address(value: Any) -> str:
    return str(getattr(value, "_value_1", value) or "").strip()


def _reference(response: Any) -> Reference:
    """The application EPR of a response (zeep returns a lone child element unwrapped, and
    reference parameters as their text)."""
    epr = getattr(response, "applicationReference", None) if not hasattr(response, "Address") \
        else response
    epr = epr if epr is not None else response
    rid = None
    params = getattr(epr, "ReferenceParameters", None)
    items = getattr(params, "_value_1", None) or []
    for item in items if isinstance(items, list) else [items]:
        if isinstance(item, etree._Element) and item.tag == A + "ResourceId":
            rid = (item.text or "").strip()
        elif isinstance(item, str) and item.strip():
            rid = item.strip()
    return Reference(_address(epr.Address), rid or "")


def _fault(e: zeep.exceptions.Fault) -> PortalFault:
    detail = e.detail[0] if e.detail is not None and len(e.detail) else None
    name = etree.QName(detail).localname if detail is not None else str(e.code).split(":")[-1]
    code = e.code.text if isinstance(e.code, etree.QName) else e.code
    return PortalFault(name, e.message or name, detail, str(code) if code else None)


def _option_value(value: Any) -> dict:
    if isinstance(value, bool):
        return {"boolean": value}
    if isinstance(value, int):
        return {"integer": value}
    if isinstance(value, etree._Element):
        return {"data": {"_value_1": [value]}}
    return {"string": str(value)}


def options_arg(options: dict[str, Any] | None, must_understand: Iterable[str] = ()) -> dict | None:
    if not options:
        return None
    required = set(must_understand)
    return {"option": [dict(name=uri, mustUnderstand=uri in required, **_option_value(v))
                       for uri, v in options.items()]}


class Portal:
    """A portal, and the live peers sharing its store (``peers``, from ``ext:portals``; also
    ``fallbacks`` given here), to fail over to (``failover=False``: never). ``credentials`` and
    ``tls`` say who the client is and how it checks the portal (module docstring)."""

    def __init__(self, url: str, timeout: float = 30.0, session: requests.Session | None = None,
                 *, fallbacks: Iterable[str] = (), failover: bool = True,
                 credentials: Credentials | None = None, tls: Tls | None = None,
                 http: Http | None = None):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = session or requests.Session()
        if http is None:        # a user's client: a requests session with their credentials
            (tls or Tls()).apply(self.session)
            if credentials is not None:
                credentials.apply(self.session)
        self.http = http or RequestsHttp(self.session)
        self.zeep = transport.client(self.http, timeout)
        self.failover_enabled = failover
        self.fallbacks = [f.rstrip("/") for f in fallbacks]
        self.peers = [f for f in self.fallbacks if f != self.url]
        self._bind(self.url)
        if http is None:
            self._reach()
        if failover:
            self.refresh_peers()

    def _reach(self) -> None:
        """Bind to the first of the portal and its fallbacks that answers (a fault is an answer);
        ``Unreachable`` when none does, at once when one's TLS certificate is not trusted."""
        error: Unreachable | None = None
        for candidate in [self.url] + self.peers:
            try:
                self.probe(candidate)
            except PortalFault:
                pass
            except Unreachable as e:
                if isinstance(e.__cause__, requests.exceptions.SSLError):
                    raise
                error = e
                continue
            self._bind(candidate)
            return
        assert error is not None
        raise Unreachable("cannot reach the portal at %s: %s" % (self.url, error.message),
                          sent=error.sent) from error.__cause__

    @classmethod
    def from_environment(cls, config: ClientConfig | None = None, **kwargs) -> "Portal":
        """The portal the environment and the config file name, with their credentials and TLS."""
        config = config or ClientConfig.load()
        return cls(config.portal, credentials=config.credentials, tls=config.tls, **kwargs)

    def _bind(self, url: str) -> None:
        self.url = url
        self.service = self.zeep.create_service(PORTAL_BINDING, url)

    def _call(self, fn: Callable, *args, **kwargs) -> Any:
        try:
            return fn(*args, **kwargs)
        except zeep.exceptions.Fault as e:
            raise _fault(e) from None

    # -- failover -----------------------------------------------------------------------------
    def refresh_peers(self) -> list[str]:
        """Learn the live portals sharing this one's store (``ext:portals``; a portal that
        does not publish it has no known peers but those given)."""
        try:
            (holder,) = _get_property(self, self.service, self.url, ns.EXT, "portals")
        except (PortalFault, Unreachable, ValueError):
            return self.peers
        found = [(a.text or "").strip().rstrip("/") for a in holder.iterfind(
            "{%s}portal/{%s}reference/{%s}Address" % (ns.EXT, ns.EXT, ns.WSA))]
        self.peers = list(dict.fromkeys(u for u in found + self.fallbacks if u and u != self.url))
        return self.peers

    def failover(self) -> bool:
        """Make sure a portal answers: this one, else the first peer that does, bound in its
        place (the WSDL is the same). False when none answers."""
        for candidate in dict.fromkeys([self.url] + self.peers):
            try:
                self.probe(candidate)
            except (Unreachable, PortalFault):
                continue
            if candidate != self.url:
                self._bind(candidate)
            self.refresh_peers()
            return True
        return False

    def probe(self, url: str | None = None) -> None:
        """One cheap request (``wsrf-rl:CurrentTime``) to this portal, or to ``url``: raises
        when it does not answer."""
        url = url or self.url
        body = etree.Element("{%s}GetResourceProperty" % ns.WSRF_RP,
                             nsmap={"wsrf-rp": ns.WSRF_RP, "wsrf-rl": ns.WSRF_RL})
        body.text = "wsrf-rl:CurrentTime"
        _post(self, url, body, timeout=min(5.0, self.timeout or 5.0))

    def _invoke(self, attempt: Callable[[], Any], recover: Callable[[], None] | None = None,
                idempotent: bool = True) -> Any:
        """``attempt()``; when the portal does not answer, once more through a live portal
        (after ``recover()``, which re-addresses what the attempt uses), if that is safe."""
        try:
            return attempt()
        except Unreachable as e:
            if not self.failover_enabled or (e.sent and not idempotent) or not self.failover():
                raise
        if recover is not None:
            recover()
        return attempt()

    def _op(self, operation: str, idempotent: bool = True, **kwargs) -> Any:
        return self._invoke(lambda: self._call(getattr(self.service, operation), **kwargs),
                            idempotent=idempotent)

    # -- operations -----------------------------------------------------------------------------
    def create(self, name: str | None = None, hostname: str | None = None,
               options: dict[str, Any] | None = None) -> "Application":
        r = self._op("create", idempotent=False, name=name, hostname=hostname,
                     options=options_arg(options))
        return Application(self, _reference(r))

    def lookup(self, app: str) -> "Application":
        """An application by id (``urn:uuid:...``) or by name."""
        if app.startswith("urn:uuid:"):
            r = self._op("lookup", ResourceId=app)
        else:
            r = self._op("lookup", name=app)
        return Application(self, _reference(r))

    def application(self, reference: Reference) -> "Application":
        return Application(self, reference)

    def rebind(self, reference: Reference) -> "Application":
        epr = {"Address": {"_value_1": reference.address}}
        if reference.resource_id:
            rid = etree.Element(A + "ResourceId", nsmap={"api": ns.API})
            rid.text = reference.resource_id
            epr["ReferenceParameters"] = {"_value_1": [rid]}
        r = self._op("rebind", applicationReference=epr)
        return Application(self, _reference(r))

    def property(self, local: str, namespace: str = ns.API) -> list[etree._Element]:
        return self._invoke(lambda: _get_property(self, self.service, self.url, namespace, local))

    def applications(self) -> list["Application"]:
        (holder,) = self.property("applications")
        return [Application(self, _epr_reference(epr))
                for epr in holder.iterfind(A + "applicationReference")]

    def list_applications(self, limit: int | None = None,
                          after: str | None = None) -> tuple[list[dict], str | None]:
        """One page of ``ext:listApplications``: the applications this caller may see, in
        creation order (``id``, ``name``, ``state``, ``created``, ``owner``; times as the
        portal wrote them), and the marker of the next page (None after the last)."""
        req = etree.Element(EXT + "listApplicationsRequest", nsmap={"ext": ns.EXT})
        if limit is not None:
            etree.SubElement(req, EXT + "limit").text = str(int(limit))
        if after is not None:
            etree.SubElement(req, EXT + "after").text = after
        out = self._invoke(lambda: _post(self, self.url, req))
        return ([{"id": el.get("id"), "name": el.get("name"), "state": el.get("state"),
                  "created": el.get("created"), "owner": el.get("owner")}
                 for el in out.iterfind(EXT + "application")], out.findtext(EXT + "next"))

    def each_application(self, page: int | None = None) -> Iterator[dict]:
        """Every application this caller may see, ``page`` at a time (``list_applications``;
        the portal's own page size if it refuses one that large)."""
        after = None
        while True:
            try:
                rows, after = self.list_applications(page, after)
            except PortalFault as e:
                if page is None or e.fault != "BadArgumentFault" or "limit" not in str(e):
                    raise
                page = None
                continue
            yield from rows
            if after is None:
                return

    def set_host_state(self, host: str, down: bool, reason: str | None = None) -> etree._Element:
        req = etree.Element("{%s}setHostStateRequest" % ns.EXT, nsmap={"ext": ns.EXT})
        etree.SubElement(req, "{%s}host" % ns.EXT).text = host
        etree.SubElement(req, "{%s}down" % ns.EXT).text = "true" if down else "false"
        if reason:
            etree.SubElement(req, "{%s}reason" % ns.EXT).text = reason
        return self._invoke(lambda: _post(self, self.url, req)[0])

    def hosts(self) -> list[dict]:
        (info,) = self.property("dynamicInfo")
        def free(el: etree._Element) -> dict:
            return {f.get("resource"): float(f.text) for f in el.iterfind(A + "free")}

        return [{"name": h.get("name"), "agent": h.get("agent"), "down": h.get("down") == "true",
                 "components": int(h.get("components") or 0), "free": free(h), "providers": {p.get("name"): free(p) for p in h.iterfind(A + "provider")}}
                for h in info.iterfind("%shosts/%shost" % (A, A))]

    def static_info(self) -> etree._Element:
        return self.property("staticInfo")[0]

    def subscribe(self, consumer: str, *, termination: str | None = "PT1H",
                  message_filter: str | None = None) -> "Subscription":
        """Subscribe ``consumer`` (a URL) to every application created from now on."""
        return self._invoke(lambda: _subscribe(self, self.url, [], consumer, CREATED, termination,
                                               message_filter), idempotent=False)

    def current_message(self) -> etree._Element:
        """The newest api:applicationCreatedEvent (``NoCurrentMessageOnTopicFault`` if none)."""
        return self._invoke(lambda: _current_message(self, self.url, [], CREATED))


def _post(portal: Portal, address: str, body: etree._Element,
          headers: Iterable[etree._Element] = (), timeout: float | None = None) -> etree._Element:
    """POST ``body`` in an envelope with ``headers`` (and the addressing every message carries);
    return the response's body element, raising ``PortalFault`` for a fault."""
    data, http_headers = transport.envelope(address, body, headers)
    response = portal.http.post(address, data, http_headers, timeout or portal.timeout)
    return _body(response, address)[0]


def _body(response: Any, address: str) -> etree._Element:
    """The SOAP body of a response, raising ``PortalFault`` for a fault and ``NotSoap`` (an
    ``Unreachable`` caused by an ``HTTPError`` naming its status: something else answers there)
    for an answer that is not SOAP."""
    doc = transport.check_soap(response, address)
    body = doc.find("{%s}Body" % ns.SOAP11_ENV)
    if body is None:
        raise transport.NotSoap(address, response.status_code, "a SOAP envelope without a Body")
    _raise_fault(body)
    return body


def _raise_fault(body: etree._Element) -> None:
    fault = body.find("{%s}Fault" % ns.SOAP11_ENV)
    if fault is not None:
        detail = fault.find("detail")
        el = detail[0] if detail is not None and len(detail) else None
        written = (fault.findtext("faultcode") or "").strip()
        code = written.rpartition(":")[2] or "Fault"
        raise PortalFault(etree.QName(el).localname if el is not None else code,
                          fault.findtext("faultstring") or "fault", el, written or None)


def _get_property(portal: Portal, service: Any, address: str, namespace: str,
                  local: str) -> list[etree._Element]:
    with portal.zeep.settings(raw_response=True):
        response = portal._call(service.GetResourceProperty, etree.QName(namespace, local))
    return list(_body(response, address)[0])


def _resource_id_headers(resource_id: str) -> list[etree._Element]:
    """The ResourceId reference parameter as a header block (none without an id)."""
    if not resource_id:
        return []
    header = etree.Element(A + "ResourceId", nsmap={"api": ns.API, "wsa": ns.WSA})
    header.text = resource_id
    header.set("{%s}IsReferenceParameter" % ns.WSA, "true")
    return [header]


def _epr_reference(el: etree._Element) -> Reference:
    """An EPR element's address and ResourceId (empty strings when missing)."""
    ref = wsa.parse_epr(el)
    if ref is None:
        return Reference("", "")
    return Reference(ref.address, ref.parameter(A + "ResourceId") or "")


class Application:
    def __init__(self, portal: Portal, reference: Reference):
        self.portal = portal
        self.reference = reference
        self._headers = _resource_id_headers(reference.resource_id)
        self.service = portal.zeep.create_service(APP_BINDING, reference.address)

    @property
    def id(self) -> str:
        return self.reference.resource_id

    def _invoke(self, attempt: Callable[[], Any], idempotent: bool = True) -> Any:
        return self.portal._invoke(attempt, recover=self.rebind_here, idempotent=idempotent)

    def _call(self, name: str, idempotent: bool = True, **kwargs) -> Any:
        return self._invoke(lambda: self.portal._call(getattr(self.service, name),
                                                      _soapheaders=self._headers, **kwargs),
                            idempotent)

    def rebind_here(self) -> None:
        """Take a view of this application through the client's (live) portal (spec 4.3:
        the portal maps an EPR of a defunct portal to one of its own)."""
        self._use(self.portal.rebind(self.reference).reference)

    def _use(self, reference: Reference) -> None:
        self.reference = reference
        self._headers = _resource_id_headers(reference.resource_id)
        self.service = self.portal.zeep.create_service(APP_BINDING, reference.address)

    def initialize(self, language: str, body: etree._Element | None = None, text: str | None = None,
                   reference: str | None = None, properties: dict[str, str] | None = None,
                   options: dict[str, Any] | None = None, version: str | None = None) -> None:
        descriptor: dict[str, Any] = {"language": language}
        if version:
            descriptor["version"] = version
        if body is not None:
            # zeep moves the element into its envelope: a copy leaves the caller's tree alone
            # (and lets two threads send one element at once)
            descriptor["body"] = {"_value_1": copy.deepcopy(body)}
        elif text is not None:
            descriptor["text"] = text
        else:
            descriptor["reference"] = reference
        props = {"property": [{"name": k, "value": v} for k, v in properties.items()]} \
            if properties else None
        self._call("initialize", idempotent=False, descriptor=descriptor, properties=props,
                   options=options_arg(options))

    def run(self) -> None:
        self._call("run", idempotent=False)

    def terminate(self, reason: str | None = None) -> None:
        self._call("terminate", reason=reason)

    def destroy(self) -> None:
        self._call("destroy", idempotent=False)

    def destroy_view(self) -> None:
        self._call("DestroyView", idempotent=False)

    def ping(self) -> dict:
        """state, stateInfo (its text), health (one dict per component, with ``waitingFor``,
        ``waited`` and ``timeout`` while it awaits its readiness) and terminationInfo (a dict,
        with ``fault`` the fault element of a failure), read from the raw response:
        stateInfo is mixed content, whose text zeep drops."""
        with self.portal.zeep.settings(raw_response=True):
            response = self._call("ping")
        r = _body(response, self.reference.address)[0]
        health = []
        for c in r.iterfind("%shealth/%scomponent" % (A, A)):
            item = {k: c.get(k) for k in ("path", "type", "host", "state")}
            item.update(healthy=c.get("healthy") == "true", detail=c.text,
                        pid=int(c.get("pid")) if c.get("pid") else None,
                        restarts=int(c.get("restarts") or 0), **_waiting(c))
            health.append(item)
        state_info = r.find(A + "stateInfo")
        return {"state": r.findtext(A + "state"),
                "stateInfo": "".join(state_info.itertext()) if state_info is not None else None,
                "health": health, "terminationInfo": termination_info(r.find(A + "terminationInfo"))}

    def components(self) -> list[dict]:
        """``ext:components``: each component's path, type, state, desired state, host,
        provider, pid, listening ``ports``, restarts, exit code or signal, info, and what it
        waits for while it starts."""
        (holder,) = self.property("components", namespace=ns.EXT)
        return [components_entry(c) for c in holder]

    def logs(self, component: str, stream: str = "stdout", *, lines: int | None = None,
             offset: int | None = None) -> dict:
        """``ext:logs``: the last ``lines`` lines of a component's stdout or stderr, or the
        lines written after byte ``offset``; ``offset`` in the answer is where to read on."""
        req = etree.Element(EXT + "logsRequest", nsmap={"ext": ns.EXT})
        etree.SubElement(req, EXT + "component").text = component
        etree.SubElement(req, EXT + "stream").text = stream
        if offset is not None:
            etree.SubElement(req, EXT + "offset").text = str(offset)
        elif lines is not None:
            etree.SubElement(req, EXT + "lines").text = str(lines)
        r = self._invoke(lambda: _post(self.portal, self.reference.address, req, self._headers))
        return {"component": r.get("component"), "stream": r.get("stream"), "host": r.get("host"),
                "available": r.get("available") == "true", "offset": int(r.get("offset") or 0),
                "lines": [line.text or "" for line in r.iterfind(EXT + "line")]}

    def resolve(self, path: str) -> Any:
        """A value, or for a delegated sub-application its ``Reference`` (an EPR elsewhere)."""
        with self.portal.zeep.settings(raw_response=True):
            response = self._call("resolve", path=path)
        found = _body(response, self.reference.address)[0][0]
        if found.tag == A + "applicationReference":
            return _epr_reference(found)
        return _value(found)

    def property(self, local: str, namespace: str = ns.API) -> list[etree._Element]:
        return self._invoke(lambda: _get_property(self.portal, self.service, self.reference.address,
                                                  namespace, local))

    def property_many(self, *locals_: str, namespace: str = ns.API) -> list[etree._Element]:
        """Several properties in one GetMultipleResourceProperties request: local names in
        ``namespace``, or Clark names (``{urn:cddlm:ext:1}components``) of any namespace."""
        names = [etree.QName(n) if n.startswith("{") else etree.QName(namespace, n) for n in locals_]
        prefixes = {uri: "p%d" % i for i, uri in enumerate(dict.fromkeys(q.namespace for q in names))}
        req = etree.Element("{%s}GetMultipleResourceProperties" % ns.WSRF_RP,
                            nsmap={"wsrf-rp": ns.WSRF_RP, **{p: u for u, p in prefixes.items()}})
        for q in names:
            etree.SubElement(req, "{%s}ResourceProperty" % ns.WSRF_RP).text = \
                "%s:%s" % (prefixes[q.namespace], q.localname)
        return self._invoke(lambda: list(_post(self.portal, self.reference.address, req,
                                               self._headers)))

    def state(self) -> str:
        (el,) = self.property("state")
        return (el.text or "").strip()

    def history(self) -> list[tuple[str, str]]:
        (hist,) = self.property("stateHistory")
        return [(t.findtext(A + "state"), t.findtext(A + "time")) for t in hist]

    def events(self) -> list[dict]:
        """The states the application entered: ``sequence``, ``state``, ``time``, ``info``."""
        (hist,) = self.property("stateHistory")
        return history_entries(hist)

    def subscribe(self, consumer: str, *, termination: str | None = "PT1H",
                  message_filter: str | None = None) -> "Subscription":
        """Subscribe ``consumer`` (a URL) to this application's lifecycle from now on;
        ``message_filter`` is an XPath 1.0 expression over ``api:lifecycleEvent`` (prefix api)."""
        return self._invoke(lambda: _subscribe(self.portal, self.reference.address, self._headers,
                                               consumer, LIFECYCLE, termination, message_filter),
                            idempotent=False)

    def current_message(self) -> etree._Element:
        """The newest api:lifecycleEvent of this application."""
        return self._invoke(lambda: _current_message(self.portal, self.reference.address,
                                                     self._headers, LIFECYCLE))

    def wait_for(self, *states: str, timeout: float = 60.0,
                 progress: Callable[[dict], None] | None = None, interval: float = 0.2) -> str:
        """Poll until the application reaches one of ``states`` (or a final or failed state
        it cannot leave towards them); returns the state reached."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        while True:
            if progress is not None:
                status = self.ping()
                state = status["state"]
                progress(status)
            else:
                state = self.state()
            if state in wanted or state in FINAL or (state == "failed" and "failed" not in wanted
                                                      and "terminated" not in wanted):
                return state
            if time.monotonic() > deadline:
                raise TimeoutError("application %s is still %s after %gs" % (self.id, state, timeout))
            time.sleep(interval)


def _waiting(el: etree._Element) -> dict:
    """``ext:waitingFor``, ``ext:waited`` and ``ext:timeout`` of a component element, if set."""
    what = el.get(EXT + "waitingFor")
    if what is None:
        return {}
    return {"waitingFor": what, "waited": float(el.get(EXT + "waited") or 0),
            "timeout": float(el.get(EXT + "timeout") or 0)}


def termination_info(holder: etree._Element | None) -> dict | None:
    """An ``api:terminationInfo`` element as a dict (``fault``: the fault element of a failure)."""
    if holder is None:
        return None
    info: dict[str, Any] = {k: holder.findtext(A + k) for k in
                            ("reason", "component", "signal", "time", "stderr")}
    info["normal"] = holder.findtext(A + "normal") == "true"
    code = holder.findtext(A + "exitCode")
    info["exitCode"] = int(code) if code is not None else None
    fault = holder.find(A + "fault")
    info["fault"] = fault[0] if fault is not None and len(fault) else None
    return info


def history_entries(hist: etree._Element) -> list[dict]:
    """An ``api:stateHistory`` element as dicts: ``sequence``, ``state``, ``time``, ``info``."""
    return [{"sequence": int(t.get("sequence") or 0), "state": t.findtext(A + "state"),
             "time": t.findtext(A + "time"), "info": t.findtext(A + "info")} for t in hist]


def components_entry(c: etree._Element) -> dict:
    """One ``ext:component`` of ``ext:components`` as a dict."""
    def number(key: str) -> int | None:
        return int(c.get(key)) if c.get(key) is not None else None

    return {"path": c.get("path"), "type": c.get("type"), "state": c.get("state"),
            "desired": c.get("desired"), "optional": c.get("optional") == "true",
            "host": c.get("host"), "provider": c.get("provider"), "pid": number("pid"),
            "ports": [int(p) for p in (c.get("ports") or "").split()],
            "restarts": number("restarts") or 0, "exitCode": number("exitCode"),
            "exitSignal": c.get("exitSignal"), "info": c.findtext(EXT + "info"),
            "subApplication": c.get("subApplication"), "subApplicationId": c.get("subApplicationId"),
            **_waiting(c)}


def _value(el: etree._Element) -> Any:
    items = list(el.iterfind(A + "item"))
    if not items:
        return el.text or ""
    if all(i.get("name") is not None for i in items):
        return {i.get("name"): _value(i) for i in items}
    return [_value(i) for i in items]


# -- notifications ----------------------------------------------------------------------------
def subscribe_request(consumer: str, topic: str, termination: str | None = None,
                      message_filter: str | None = None) -> etree._Element:
    """A ``wsnt:Subscribe`` for ``consumer`` on ``topic`` (Simple dialect); ``termination`` is
    an xsd:dateTime or xsd:duration (None: the portal's default)."""
    req = etree.Element(WSNT + "Subscribe", nsmap={"wsnt": ns.WSNT, "wsa": ns.WSA})
    etree.SubElement(etree.SubElement(req, WSNT + "ConsumerReference"),
                     "{%s}Address" % ns.WSA).text = consumer
    holder = etree.SubElement(req, WSNT + "Filter")
    holder.append(topic_element(WSNT + "TopicExpression", topic))
    if message_filter:
        content = etree.SubElement(holder, WSNT + "MessageContent", nsmap={"api": ns.API})
        content.set("Dialect", ns.XPATH_DIALECT)
        content.text = message_filter
    if termination:
        etree.SubElement(req, WSNT + "InitialTerminationTime").text = termination
    return req


def _subscribe(portal: Portal, address: str, headers: list, consumer: str, topic: str,
               termination: str | None, message_filter: str | None) -> "Subscription":
    response = _post(portal, address, subscribe_request(consumer, topic, termination, message_filter),
                     headers)
    ref = _epr_reference(response.find(WSNT + "SubscriptionReference"))
    return Subscription(portal, ref.address, ref.resource_id, response.findtext(WSNT + "TerminationTime"))


def _current_message(portal: Portal, address: str, headers: list, topic: str) -> etree._Element:
    request = etree.Element(WSNT + "GetCurrentMessage", nsmap={"wsnt": ns.WSNT})
    request.append(topic_element(WSNT + "Topic", topic))
    return _post(portal, address, request, headers)[0]


class Subscription:
    """A subscription, through its manager's EPR."""

    def __init__(self, portal: Portal, address: str, resource_id: str,
                 termination_time: str | None = None):
        self.portal = portal
        self.address = address
        self.resource_id = resource_id
        self.termination_time = termination_time
        self._headers = _resource_id_headers(resource_id)

    def _call(self, body: etree._Element, idempotent: bool = True) -> etree._Element:
        return self.portal._invoke(lambda: _post(self.portal, self.address, body, self._headers),
                                   recover=self._readdress, idempotent=idempotent)

    def _readdress(self) -> None:
        """The manager answers through every portal of the store: the same path on the
        client's (live) portal."""
        base = self.portal.url[:-len(ns.PORTAL_PATH)] if self.portal.url.endswith(ns.PORTAL_PATH) \
            else self.portal.url
        self.address = base + ns.MANAGER_PATH + self.address.rstrip("/").rsplit("/", 1)[-1]

    def renew(self, termination: str) -> str | None:
        """A new termination time (xsd:dateTime or xsd:duration); returns it as set."""
        body = etree.Element(WSNT + "Renew", nsmap={"wsnt": ns.WSNT})
        etree.SubElement(body, WSNT + "TerminationTime").text = termination
        self.termination_time = self._call(body).findtext(WSNT + "TerminationTime")
        return self.termination_time

    def unsubscribe(self) -> None:
        self._call(etree.Element(WSNT + "Unsubscribe", nsmap={"wsnt": ns.WSNT}), idempotent=False)

    def pause(self) -> None:
        self._call(etree.Element(WSNT + "PauseSubscription", nsmap={"wsnt": ns.WSNT}))

    def resume(self) -> None:
        self._call(etree.Element(WSNT + "ResumeSubscription", nsmap={"wsnt": ns.WSNT}))

    def property(self, local: str, namespace: str = ns.API) -> list[etree._Element]:
        body = etree.Element("{%s}GetResourceProperty" % ns.WSRF_RP,
                             nsmap={"wsrf-rp": ns.WSRF_RP, "p": namespace})
        body.text = "p:" + local
        return list(self._call(body))

    def status(self) -> dict:
        """``ext:subscriptionStatus`` as a dict (state, undelivered, delivered, lastError ...)."""
        (el,) = self.property("subscriptionStatus", ns.EXT)
        return {etree.QName(c).localname: (c.text or "").strip() for c in el}
