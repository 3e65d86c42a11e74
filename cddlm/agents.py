"""Host portals as the remote runner sees them (``application/enactment/remote.py``): the
``HostPortal`` it asks for, made from ``cddlm.client``, with the credentials this portal signs
in with (``--agent-credentials FILE``).

The credentials file is TOML, readable by its owner only when it holds a secret::

    [default]                  # for every host portal
    user = "front"
    password = "..."           # or token = "..." (a bearer token)
    ca_file = "ca.pem"         # the CA that signed the host portals' certificates
    client_cert = "front.pem"  # mutual TLS (the host portal's --tls-client-ca)
    client_key = "front.key"

    [hosts.h2]                 # what differs for one host (by its datacenter name)
    user = "front-h2"
    password = "..."

    [hosts.s1]                 # a host whose agent is ssh://USER@ADDRESS[:PORT]
    ssh_key = "id_ed25519"     # the private key offered (no ssh-agent, no ~/.ssh/config)
    known_hosts = "known"      # its host key must be there (else ~/.ssh/known_hosts)

Faults from a host portal become ``RemoteFault`` (the fault element kept as ``cause``),
silence, refusals and answers that are not SOAP become ``AgentUnreachable``, and a
sub-application the host portal does not know becomes ``Gone``.
"""

from __future__ import annotations

import os
import stat
import tomllib
from typing import Any, Callable

from lxml import etree

from cddlm import client, ns
from cddlm.application import options as opts
from cddlm.application.enactment.remote import AgentUnreachable, Gone, Ref, Status
from cddlm.application.hosts import Host
from cddlm.config import Settings
from cddlm.errors import ClientError, ConfigurationError, RemoteFault

KEYS = {"user", "password", "token", "ca_file", "client_cert", "client_key",
        "ssh_key", "known_hosts"}     # the last two: SSH hosts (application/enactment/ssh.py)
GONE_FAULTS = {"ResourceUnknownFault", "NoSuchApplicationFault"}


def load_credentials(path: str | None) -> dict[str, dict[str, str]]:
    """{"default": {...}, host name: {...}} from the file (empty without one)."""
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
        out[str(name)] = dict(values)
    for name, values in out.items():
        unknown = set(values) - KEYS
        if unknown:
            raise ConfigurationError("--agent-credentials %s: unknown key(s) %s in [%s]" % (
                path, ", ".join(sorted(unknown)), name))
        if (values.get("password") or values.get("token")) and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigurationError("--agent-credentials %s holds a secret and others may read "
                                     "it: chmod 600 %s" % (path, path))
    return out


class ClientHostPortal:
    """A host portal through ``cddlm.client`` (no failover: a host portal stands alone)."""

    def __init__(self, host: Host, settings: Settings, creds: dict[str, str]):
        self.url = host.agent
        self.timeout = settings.agent_timeout
        try:
            self.portal = client.Portal(host.agent, timeout=self.timeout, failover=False,
                                        credentials=client.Credentials(creds.get("user"),
                                                                       creds.get("password"),
                                                                       creds.get("token")),
                                        tls=client.Tls(creds.get("ca_file"), creds.get("client_cert"),
                                                       creds.get("client_key")))
        except client.Unreachable as e:
            raise AgentUnreachable(str(e)) from None
        except ClientError as e:
            raise AgentUnreachable("cannot use the host portal %s: %s" % (host.agent, e)) from None
        except Exception as e:      # a WSDL that is garbage
            raise AgentUnreachable("the host portal %s answered garbage: %s: %s"
                                   % (host.agent, type(e).__name__, e)) from None

    def _do(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except client.PortalFault as e:
            if e.fault in GONE_FAULTS:
                raise Gone(str(e)) from None
            cause = etree.tostring(e.detail, encoding="unicode") if e.detail is not None else None
            raise RemoteFault("%s answered %s" % (self.url, e), cause) from None
        except client.Unreachable as e:
            raise AgentUnreachable(str(e)) from None
        except (RemoteFault, Gone, AgentUnreachable):
            raise
        except Exception as e:      # zeep or lxml on an answer that is not what the WSDL says
            raise AgentUnreachable("%s answered garbage: %s: %s" % (self.url, type(e).__name__, e)) from None

    def _app(self, ref: Ref) -> client.Application:
        return self.portal.application(client.Reference(ref.address, ref.resource_id))

    def create(self, token: str) -> Ref:
        app = self._do(lambda: self.portal.create(options={opts.CLIENT_TOKEN: token}))
        return Ref(app.reference.address, app.reference.resource_id)

    def initialize(self, ref: Ref, descriptor: etree._Element, token: str) -> None:
        self._do(lambda: self._app(ref).initialize(ns.NATIVE, body=descriptor,
                                                   options={opts.CLIENT_TOKEN: token}))

    def initialize_foreign(self, ref: Ref, language: str, text: str, properties: dict[str, str],
                           token: str) -> None:
        self._do(lambda: self._app(ref).initialize(language, text=text, properties=properties or None,
                                                   options={opts.CLIENT_TOKEN: token}))

    def run(self, ref: Ref) -> None:
        self._do(lambda: self._app(ref).run())

    def terminate(self, ref: Ref, reason: str) -> None:
        self._do(lambda: self._app(ref).terminate(reason))

    def destroy(self, ref: Ref) -> None:
        self._do(lambda: self._app(ref).destroy())

    def status(self, ref: Ref) -> Status:
        r = self._do(lambda: self._app(ref).ping())
        info = r.get("terminationInfo") or {}
        fault = info.get("fault")
        return Status(r.get("state") or "", {h["path"]: (h.get("state") or "", h.get("detail") or "")
                                            for h in r.get("health") or [] if h.get("path")},
                      info.get("reason"),
                      etree.tostring(fault, encoding="unicode") if fault is not None else None)

    def subscribe(self, ref: Ref, consumer: str) -> None:
        self._do(lambda: self._app(ref).subscribe(consumer, termination=None))

    def resolve(self, ref: Ref, path: str) -> Any:
        return self._do(lambda: self._app(ref).resolve(path))

    def probe(self) -> None:
        self._do(self.portal.probe)


def factory(settings: Settings) -> Callable[[Host], ClientHostPortal]:
    """The ``PortalFactory`` of a portal with these settings (credentials read once, now)."""
    creds = load_credentials(settings.agent_credentials_file)

    def make(host: Host) -> ClientHostPortal:
        return ClientHostPortal(host, settings, chosen(creds, host.name))
    return make


def chosen(creds: dict[str, dict[str, str]], host: str) -> dict[str, str]:
    """The credentials for ``host``: ``[default]`` with its own ``[hosts.NAME]`` over it."""
    out = dict(creds.get("default") or {})
    out.update(creds.get(host) or {})
    return out
