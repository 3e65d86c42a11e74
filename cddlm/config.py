"""Settings: one frozen object built by the composition root and passed in, never global."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

MiB = 1024 * 1024
DEFAULT_PORTAL = "http://127.0.0.1:8080/cddlm/portal"     # where clients look without being told


@dataclass(frozen=True)
class Limits:
    """Bounds on untrusted input; each one refuses early with a clear fault."""

    max_body_bytes: int = 10 * MiB          # a SOAP request body, a referenced or imported document
    unauthenticated_body_bytes: int = 1 * MiB   # a body whose request has no HTTP credentials
    max_soap_header_bytes: int = 64 * 1024  # ... and its SOAP header (parsed, its token checked, first)
    max_xml_depth: int = 256                # element nesting in any XML the portal parses
    max_xml_nodes: int = 300_000            # elements and attributes in one XML document
    max_xml_attributes: int = 256           # attributes (namespace declarations too) of one element
    large_body_bytes: int = 1 * MiB         # a document at least this large is a large parse ...
    max_large_parses: int = 2               # ... and at most this many run at once (others wait)
    max_template_bytes: int = 512 * 1024    # a HOT template (Heat's own default): YAML costs far more than XML
    max_components: int = 20_000            # components in one resolved descriptor
    max_resolved_nodes: int = 500_000       # nodes a CDL document (or values a HOT template) may expand to
    max_descriptor_depth: int = 64          # component tree depth
    max_properties: int = 10_000            # deploy-time properties on one initialize
    max_value_chars: int = 1 * MiB          # characters of one resolved value (an env value, file content)
    max_resolved_chars: int = 16 * MiB      # characters of every value of one resolved descriptor
    max_pattern_chars: int = 4096           # a user's regular expression (readiness log, allowed_pattern)
    max_expression_chars: int = 4096        # a user's XPath (query, message filter, CDL expression)
    query_seconds: float = 2.0              # CPU budget of one QueryResourceProperties evaluation
    query_workers: int = 2                  # XPath queries evaluated at once (each in a helper process)
    query_wait_seconds: float = 0.1         # how long a query waits for a free helper (holding a server thread), then is refused
    max_query_result_bytes: int = 4 * MiB   # the serialized result of one query
    filter_seconds: float = 0.5             # budget of one message-content filter over one round's messages
    max_log_bytes: int = 8 * MiB            # a component's stdout.log/stderr.log; then rotated to .1
    list_page_size: int = 1000              # applications in one ext:listApplications page by default
    max_list_page: int = 10_000             # the most one page may hold (limit), then page on with next
    max_listed_references: int = 1000       # api:applications holds the newest this many (ext:listApplications pages through all)


@dataclass(frozen=True)
class DashboardLimits:
    """Bounds on what the web dashboard (cddlm/web) reads and sends per request."""

    poll_seconds: float = 0.5               # how often a page asks whether anything changed
    page_size: int = 50                     # applications per page by default
    max_page_size: int = 500                # the most a caller may ask for (?limit=)
    log_lines: int = 40                     # last lines of a component's stdout/stderr shown
    log_bytes: int = 16 * 1024              # read at most this much of a log's end
    max_log_lines: int = 1000               # the most a caller may ask for (?lines=)
    descriptor_chars: int = 200_000         # a descriptor longer than this is shown cut
    max_placed: int = 5_000                 # components drawn on the datacenter picture
    max_name_filter: int = 256              # characters of a ?name= filter


@dataclass(frozen=True)
class Quotas:
    """Per-owner limits on what a user (not an administrator) may hold; exceeding one is an
    ``ext:QuotaExceededFault`` and changes nothing."""

    applications: int = 100                 # applications not destroyed (terminated ones count)
    components: int = 1_000                 # components in one application
    descriptor_bytes: int = 1 * MiB         # a descriptor's text (inline or fetched)
    subscriptions: int = 100                # subscriptions that still deliver (not ended/expired)


@dataclass(frozen=True)
class Security:
    """Who may use the portal (README: "Running on a network")."""

    users_file: str | None = None           # principals; None: local mode (loopback only)
    run_as: str | None = None               # OS account components run as ({user}: the owner)
    insecure: bool = False                  # allow a non-loopback address without users and TLS
    token_window: float = 300.0             # seconds a UsernameToken's Created stays acceptable
    clock_skew: float = 60.0                # seconds a Created may lie in the future
    failures_per_minute: int = 10           # failed password sign-ins as one user from one place
    user_failures_per_minute: int = 30      # ... as one user from places anywhere
    ipv4_prefix: int = 24                   # a place: the client's IPv4 /24 ...
    ipv6_prefix: int = 64                   # ... or IPv6 /64
    password_checks: int = 0                # scrypt checks at once (0: half the cores, at least 1)
    password_wait: float = 2.0              # seconds a check may wait for its turn, then busy
    credential_cache: float = 60.0          # seconds a verified password or token is remembered


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    state_dir: str = "./cddlm-state"
    db_url: str | None = None               # default: sqlite file under state_dir
    datacenter_file: str | None = None
    public_url: str | None = None           # base URL in EPRs when behind a proxy
    server_threads: int = 8                 # HTTP worker threads (run the SOAP handlers)
    max_connections: int = 4096             # HTTP connections being read or answered at once
    max_connections_per_address: int = 256  # ... of one client address (more are closed)
    header_timeout: float = 10.0            # seconds a client has to send its request headers
    body_timeout: float = 30.0              # seconds a client has to send its request body
    tls_cert: str | None = None             # PEM certificate chain: serve HTTPS
    tls_key: str | None = None              # PEM (PKCS#8) private key of that certificate
    tls_client_ca: str | None = None        # PEM CA bundle: require client certificates (mTLS)
    limits: Limits = field(default_factory=Limits)
    dashboard: DashboardLimits = field(default_factory=DashboardLimits)
    security: Security = field(default_factory=Security)
    quotas: Quotas = field(default_factory=Quotas)
    # enactment
    engine_workers: int = 4
    lease_seconds: float = 30.0              # a claimed work item is another's after this
    heartbeat_seconds: float = 5.0           # a portal silent for 3 heartbeats is dead
    liveness_interval: float = 2.0           # scheduled check of what the exit watcher does not cover
    hosts_dir: str | None = None             # local hosts' directories (default STATE/hosts);
                                             # portals sharing a store must share this too
    # hosts whose agent is another portal (application/enactment/remote.py, docs/multihost.md)
    agent_credentials_file: str | None = None   # TOML: how this portal signs in to host portals
    agent_lease: float = 10.0                # a host portal silent this long is unreachable
    agent_timeout: float = 5.0               # seconds one call to another portal may take, in all
    agent_max_response_bytes: int = 8 * MiB  # one answer of another portal (a 10,000-component ping: 1.2 MB)
    agent_request_slots: int = 2             # request threads that may wait on other portals at once
    agent_callback_url: str | None = None    # base URL host portals notify (default: ours)
    agent_mode: bool = False                 # --agent: a host portal (lean: no datacenter)
    # hosts whose agent is ssh://USER@ADDRESS[:PORT] (application/enactment/ssh.py, docs/engines.md)
    ssh_timeout: float = 10.0                # seconds one command (or connection) on an SSH host may take
    ssh_keepalive: float = 2.0               # seconds between keepalives; 3 unanswered drop the connection
    ssh_channels: int = 10                   # commands at once over one host's connection (sshd's MaxSessions)
    parallel_hosts: int = 16                 # other machines (SSH hosts, host portals) one batch enacts at once
    ssh_liveness: float = 0.5                # seconds between liveness passes over SSH hosts (one command each)
    fence_seconds: float | None = None       # host side: terminate delegated parts not renewed
    # hosts whose agent is a Slurm node (application/enactment/slurm.py, docs/engines.md)
    slurm_timeout: float = 10.0              # seconds one Slurm command (sbatch, squeue ...) may take
    slurm_pending_timeout: float = 300.0     # seconds a component's job may wait in the queue
    slurm_submits: int = 4                   # sbatch commands a batch of starts runs at once
    # descriptors: where references and imports may be read from (application/loader.py)
    import_path: tuple[str, ...] = ()        # folders searched for classpath:/ imports (also readable)
    allowed_descriptor_dirs: tuple[str, ...] = ()   # file: references and imports only below these
    allowed_descriptor_urls: tuple[str, ...] = ()   # http(s): references and imports only under these
    descriptor_networks: tuple[str, ...] = ()       # besides public addresses, networks they may be on
    descriptor_fetch_timeout: float = 10.0   # seconds to fetch one referenced or imported document
    # delegate components: the portals they may name (cddlm/agents.py)
    allowed_delegate_urls: tuple[str, ...] = ()     # a delegate's portal only under these (none: no delegates)
    delegate_networks: tuple[str, ...] = ()         # besides public addresses, networks those portals may be on
    # probes and readiness checks: the networks their tcp/http targets may be in
    probe_networks: tuple[str, ...] = ("127.0.0.0/8", "::1/128", "10.0.0.0/8",
                                       "172.16.0.0/12", "192.168.0.0/16")
    # requests: names the portal answers to besides IP literals, localhost and its own names
    allowed_hosts: tuple[str, ...] = ()      # "*": any Host (turns the DNS-rebinding check off)
    # notification delivery (notify/delivery.py)
    # sender threads: one consumer host may hold half, one subscriber half while another wants
    # some, and a quarter is kept for subscribers holding none (notify/senders.py): one alone
    # still has 8, as when there were 8 and nothing was kept
    delivery_workers: int = 10
    delivery_timeout: float = 5.0            # seconds to wait for a consumer's response
    delivery_connect_timeout: float = 2.0    # seconds to connect to a consumer
    delivery_retry_horizon: float = 3600.0   # seconds of retrying before a subscription fails
    delivery_backoff_initial: float = 0.5    # first retry delay; doubles on each failure
    delivery_backoff_max: float = 30.0
    delivery_max_response_bytes: int = 64 * 1024
    delivery_batch: int = 500                # notification messages per Notify request (at most)
    delivery_poll_interval: float = 0.5      # seconds between looks for other portals' events
    event_retention_seconds: float = 3600.0  # delivered events kept this long (the newest always)
    consumer_networks: tuple[str, ...] = ("127.0.0.0/8", "::1/128", "10.0.0.0/8",
                                          "172.16.0.0/12", "192.168.0.0/16")
    default_subscription_seconds: float = 24 * 3600.0
    # operating it (web/operations.py, docs/operating.md)
    metrics_consumer_hosts: int = 100        # consumer hosts with a label of their own; the rest: other
    ready_store_seconds: float = 2.0         # /readyz: the store must answer within this
    ready_front_seconds: float = 60.0        # /readyz of a host portal holding delegated parts:
                                             # a front pinged one within this (--fence-seconds if set)

    @property
    def hosts_root(self) -> str:
        return os.path.abspath(self.hosts_dir or os.path.join(self.state_dir, "hosts"))

    @property
    def database_url(self) -> str:
        if self.db_url:
            return self.db_url
        return "sqlite:///" + os.path.abspath(os.path.join(self.state_dir, "portal.db"))

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)
