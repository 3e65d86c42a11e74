"""``cddlm portal serve``: run a portal until interrupted."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys

from cddlm.cli import backup
from cddlm.cli.common import CliError, UsageError

LOG_FILE = "portal.log"
LOG_BYTES = 10 * 1024 * 1024        # portal.log is rotated at this size, 3 old files kept
LOG_KEEP = 3
log = logging.getLogger("cddlm.portal")


def private_log(path: str, max_bytes: int = LOG_BYTES, keep: int = LOG_KEEP) -> logging.Handler:
    """A rotating log file only its owner may read (0600, however old its files, and after every
    rotation): it names every tenant's applications and actions, and components running as
    other accounts may pass through the state directory (``--run-as``: 0711)."""
    from logging.handlers import RotatingFileHandler

    class PrivateLog(RotatingFileHandler):
        def _open(self):
            fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            os.fchmod(fd, 0o600)          # a file of an older portal, made with the umask's mode
            return open(fd, self.mode, encoding=self.encoding, errors=self.errors)

    for n in range(1, keep + 1):           # the old files, rotated by an older portal
        try:
            os.chmod("%s.%d" % (path, n), 0o600, follow_symlinks=False)
        except (OSError, NotImplementedError):    # none there (or a link: left alone)
            pass
    return PrivateLog(path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8")


def setup_logging(state_dir: str, level: str, kind: str = "text") -> str:
    """The portal's log: ``STATE/portal.log`` (at info, or debug when asked: the audit's
    lines, who did what from where, are there) and stderr at ``level`` (by default warnings:
    a terminal shows the banner and what goes wrong, not a line per request), as text or as
    one JSON object a line (``kind``, ``cddlm.logfields``). Returns the file's path."""
    from cddlm import logfields
    wanted = getattr(logging, level.upper())
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    path = os.path.abspath(os.path.join(state_dir, LOG_FILE))
    to_file = private_log(path)
    to_file.setLevel(min(wanted, logging.INFO))
    to_stderr = logging.StreamHandler(sys.stderr)
    to_stderr.setLevel(wanted)
    root = logging.getLogger()
    root.setLevel(min(wanted, logging.INFO))
    from cddlm.application.secrets import LogFilter
    hide = LogFilter()           # no line says a value a descriptor marks secret
    for handler in (to_file, to_stderr):
        handler.setFormatter(logfields.formatter(kind, masking(hide)))
        handler.addFilter(hide)
        root.addHandler(handler)
    if wanted > logging.DEBUG:      # the scheduler logs every run of every job at info
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    return path


def masking(hide: logging.Filter):
    """Text masked as ``hide`` masks a record's message: a JSON line's other fields (an
    audit's detail, a request's fields) are masked like its message."""
    def mask(text: str) -> str:
        probe = logging.makeLogRecord({"msg": text})
        hide.filter(probe)
        return probe.getMessage()
    return mask


def say(line: str, kind: str) -> None:
    """A line for the person at the terminal (stderr) that portal.log keeps too: as it is,
    or as a JSON log object with ``--log-format json``."""
    from cddlm import logfields
    log.info(line.strip())
    if kind == "json":
        line = logfields.formatter(kind).format(logging.makeLogRecord(
            {"name": log.name, "levelno": logging.INFO, "levelname": "INFO", "msg": line.strip()}))
    print(line, file=sys.stderr, flush=True)


def stopped_summary(portal, signame: str) -> str:
    """The one line a portal stopped by a signal says: what keeps running."""
    try:
        s = portal.summary()
    except Exception as e:          # the store gone: say that much
        return "portal stopped (%s); what keeps running is unknown: %s" % (signame, e)
    if not s["running"]:
        return "portal stopped (%s); no component was running" % signame
    return ("portal stopped (%s); %d component%s of %d application%s keep%s running, "
            "re-adopted at the next start" % (
                signame, s["running"], "" if s["running"] == 1 else "s", s["applications"],
                "" if s["applications"] == 1 else "s", "s" if s["running"] == 1 else ""))


def banner(portal, log_path: str) -> list[str]:
    """What a starting portal says about itself: the store, the hosts, what it re-adopted."""
    from cddlm import __version__
    s = portal.summary()
    adopted = "%d running component%s of %d application%s" % (
        s["running"], "" if s["running"] == 1 else "s", s["applications"],
        "" if s["applications"] == 1 else "s") if s["running"] else "nothing (no component was running)"
    return ["cddlm %s portal" % __version__,
            "  store:       %s" % s["store"],
            "  state:       %s (log: %s)" % (os.path.abspath(portal.settings.state_dir), log_path),
            "  hosts:       %s" % ", ".join("%s (%s%s)" % (h["name"], h["agent"],
                                                          ", down" if h["down"] else "")
                                            for h in s["hosts"]),
            "  re-adopted:  %s" % adopted,
            *(["  role:        host portal (--agent%s): front portals delegate to it" % (
                ", fencing after %g s" % portal.settings.fence_seconds
                if portal.settings.fence_seconds else "")] if portal.settings.agent_mode else []),
            "  dashboard:   %s/" % portal.url.rstrip("/")]


def cmd_portal_serve(args: argparse.Namespace) -> int:
    import dataclasses
    import signal
    from cddlm.app import Portal
    from cddlm.config import Quotas, Security, Settings
    from cddlm import sdnotify
    from cddlm.errors import ConfigurationError, StoreUnavailable
    log_path = setup_logging(args.state_dir, args.log_level, args.log_format)
    settings = Settings(host=args.host, port=args.port, state_dir=args.state_dir, db_url=args.db,
                        datacenter_file=args.datacenter, public_url=args.public_url,
                        import_path=tuple(args.import_path or ()), hosts_dir=args.hosts_dir,
                        engine_workers=args.workers, lease_seconds=args.lease_seconds,
                        heartbeat_seconds=args.heartbeat, liveness_interval=args.liveness_interval,
                        tls_cert=args.tls_cert, tls_key=args.tls_key,
                        tls_client_ca=args.tls_client_ca, server_threads=args.server_threads,
                        max_connections=args.max_connections, header_timeout=args.header_timeout,
                        body_timeout=args.body_timeout,
                        max_connections_per_address=args.max_connections_per_address,
                        security=Security(users_file=args.users, run_as=args.run_as,
                                          insecure=args.insecure,
                                          failures_per_minute=args.failures_per_minute,
                                          user_failures_per_minute=args.user_failures_per_minute,
                                          password_checks=args.password_checks),
                        quotas=Quotas(**quotas(args.quota)))
    if args.agent and args.datacenter:
        raise UsageError("--agent serves one host (this machine): it takes no --datacenter")
    if args.fence_seconds is not None and (not args.agent or args.fence_seconds <= 0):
        raise UsageError("--fence-seconds is for a host portal (--agent), and positive")
    settings = settings.replace(agent_mode=args.agent, agent_credentials_file=args.agent_credentials,
                                agent_lease=args.agent_lease, agent_timeout=args.agent_timeout,
                                agent_max_response_bytes=args.agent_max_response_bytes,
                                agent_request_slots=args.agent_request_slots,
                                ssh_timeout=args.ssh_timeout, ssh_keepalive=args.ssh_keepalive,
                                ssh_channels=args.ssh_channels, parallel_hosts=args.parallel_hosts,
                                ssh_liveness=args.ssh_liveness,
                                agent_callback_url=args.agent_callback,
                                fence_seconds=args.fence_seconds,
                                slurm_timeout=args.slurm_timeout,
                                slurm_pending_timeout=args.slurm_pending_timeout,
                                slurm_submits=args.slurm_submits,
                                ready_front_seconds=args.ready_front_seconds,
                                metrics_consumer_hosts=args.metrics_consumer_hosts)
    if args.consumer_network:
        settings = settings.replace(consumer_networks=tuple(args.consumer_network))
    if args.probe_network:
        settings = settings.replace(probe_networks=tuple(args.probe_network))
    if args.max_log_bytes is not None:
        settings = settings.replace(limits=dataclasses.replace(settings.limits,
                                                               max_log_bytes=args.max_log_bytes))
    if args.unauthenticated_body_bytes is not None:
        settings = settings.replace(limits=dataclasses.replace(
            settings.limits, unauthenticated_body_bytes=args.unauthenticated_body_bytes))
    settings = settings.replace(allowed_descriptor_dirs=tuple(args.allow_descriptor_dir or ()),
                                allowed_descriptor_urls=tuple(args.allow_descriptor_url or ()),
                                descriptor_networks=tuple(args.descriptor_network or ()),
                                allowed_delegate_urls=tuple(args.allow_delegate_url or ()),
                                delegate_networks=tuple(args.delegate_network or ()),
                                allowed_hosts=tuple(args.allowed_host or ()))
    if args.cpu:
        from cddlm import affinity
        try:   # before the portal starts its threads: they inherit the mask
            affinity.pin(affinity.parse(args.cpu))
        except ValueError as e:
            raise UsageError("--cpu: %s" % e) from None
        except OSError as e:
            raise CliError("--cpu: cannot set the CPU affinity: %s" % e.strerror) from None
        log.info("the portal's threads run on CPU %s (its components on every CPU)", args.cpu)
    try:
        portal = Portal(settings)
    except (ConfigurationError, StoreUnavailable) as e:
        raise CliError(str(e)) from None
    if args.log_format == "text":       # (logged as warnings too: JSON has them so)
        for warning in portal.warnings:
            print("\n*** WARNING: %s ***\n" % warning, file=sys.stderr, flush=True)
    try:
        portal.bind()
    except OSError as e:
        portal.stop()
        raise bind_error(e, args.host, args.port) from None

    signals: list[str] = []

    def stop(signum, frame):
        # only asks: the main thread stops the portal, once, and says what keeps running
        signals.append("Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name)
        portal.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def ready(url: str) -> None:
        # the banner is for people (stderr); stdout says only the one line tools wait for
        for line in banner(portal, log_path):
            say(line, args.log_format)
        log.info("portal ready at %s", url)
        print("portal ready at %s" % url, flush=True)
        sdnotify.notify("READY=1", "STATUS=serving at %s" % url)

    try:
        portal.serve_forever(ready)
        sdnotify.notify("STOPPING=1")
        if signals and not portal.failure:
            say(stopped_summary(portal, signals[0]), args.log_format)
    finally:
        portal.stop()
    if portal.failure:
        log.error("stopped: %s", portal.failure)
        raise CliError(portal.failure)
    log.info("stopped; the components it started keep running")
    return 0


def bind_error(e: OSError, host: str, port: int) -> CliError:
    if e.errno == errno.EADDRINUSE:
        return CliError("port %d on %s is already in use, by another portal or another program"
                        % (port, host), "stop it, choose another --port, or --port 0 for a free one")
    if e.errno == errno.EACCES:
        return CliError("not allowed to listen on port %d on %s" % (port, host),
                        "ports below 1024 need privileges: choose one above 1024")
    if e.errno == errno.EADDRNOTAVAIL:
        return CliError("%s is not an address of this machine" % host,
                        "--host 127.0.0.1, or 0.0.0.0 for every address")
    return CliError("cannot listen on %s port %d: %s" % (host, port, e.strerror or e))


def port_number(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("not a port number: %r" % value) from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("%d is not a port (0 to 65535; 0 picks a free one)" % port)
    return port


def quotas(pairs: list[str] | None) -> dict[str, int]:
    import dataclasses
    from cddlm.config import Quotas
    known = {f.name for f in dataclasses.fields(Quotas)}
    out = {}
    for pair in pairs or []:
        key, _, value = pair.partition("=")
        if key not in known or not value.isdigit():
            raise UsageError("--quota expects NAME=N with NAME one of %s, got %r"
                             % (", ".join(sorted(known)), pair))
        out[key] = int(value)
    return out


def register(sub) -> None:
    portal = sub.add_parser("portal", help="run a portal").add_subparsers(
        dest="portal_command", required=True, metavar="COMMAND")
    sv = portal.add_parser("serve", help="run a portal until interrupted (Ctrl-C; its "
                           "components keep running and are re-adopted at the next start)")
    sv.add_argument("--host", default="127.0.0.1", metavar="H", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=port_number, default=8080, metavar="P",
                    help="port (default 8080; 0 picks a free one)")
    sv.add_argument("--db", metavar="URL",
                    help="database URL (default: SQLite under the state dir; postgresql://... to share)")
    sv.add_argument("--state-dir", default="./cddlm-state", metavar="DIR",
                    help="where the portal keeps its database, logs and component directories")
    sv.add_argument("--datacenter", metavar="FILE",
                    help="datacenter file (YAML/JSON) of hosts, or slurm: for the Slurm cluster "
                         "this machine submits to (docs/engines.md)")
    sv.add_argument("--public-url", metavar="URL", help="base URL to put in EPRs (behind a proxy)")
    sv.add_argument("--agent", action="store_true",
                    help="serve as a host portal that front portals delegate to (lean: one local "
                         "host, no --datacenter; docs/multihost.md)")
    sv.add_argument("--fence-seconds", type=float, metavar="S",
                    help="with --agent: terminate a delegated part whose front portal has not "
                         "pinged it for S seconds (default: keep running; docs/multihost.md)")
    sv.add_argument("--agent-credentials", metavar="FILE",
                    help="TOML: the user/password/token and TLS files this portal uses to call the "
                         "host portals its datacenter names as agents (docs/multihost.md)")
    sv.add_argument("--agent-callback", metavar="URL",
                    help="base URL at which host portals reach this portal to notify it (default: "
                         "its own URL)")
    sv.add_argument("--agent-lease", type=float, default=10.0, metavar="S",
                    help="a host portal silent this long is marked unreachable (default 10)")
    sv.add_argument("--agent-timeout", type=float, default=5.0, metavar="S",
                    help="seconds one call to another portal (a host portal, a delegate's) may "
                         "take in all (default 5)")
    sv.add_argument("--agent-max-response-bytes", type=int, default=8 * 1024 * 1024, metavar="N",
                    help="the most one answer of another portal may hold (default 8 MiB; a "
                         "10,000-component application's ping answer is about 1.2 MB)")
    sv.add_argument("--agent-request-slots", type=int, default=2, metavar="N",
                    help="request threads that may wait on other portals at once (a delegate's "
                         "initialize); more are answered busy (default 2)")
    sv.add_argument("--allow-delegate-url", action="append", metavar="PREFIX",
                    help="delegate components may name portals under PREFIX (repeatable; default: "
                         "none, no delegate component may be deployed)")
    sv.add_argument("--delegate-network", action="append", metavar="CIDR",
                    help="besides public addresses, a network those portals may be on (repeatable; "
                         "an allowed prefix naming an address allows that address)")
    sv.add_argument("--ssh-timeout", type=float, default=10.0, metavar="S",
                    help="seconds one command on an SSH host (ssh://... agent) may take (default 10)")
    sv.add_argument("--ssh-keepalive", type=float, default=2.0, metavar="S",
                    help="seconds between keepalives to an SSH host; three unanswered drop its "
                         "connection (default 2)")
    sv.add_argument("--ssh-channels", type=int, default=10, metavar="N",
                    help="commands at once over one SSH host's connection (default 10: sshd's "
                         "MaxSessions)")
    sv.add_argument("--ssh-liveness", type=float, default=0.5, metavar="S",
                    help="seconds between liveness passes over SSH hosts, one command per host "
                         "(default 0.5; at most --liveness-interval)")
    sv.add_argument("--parallel-hosts", type=int, default=16, metavar="N",
                    help="other machines (SSH hosts, host portals) one batch of work enacts at once "
                         "(default 16)")
    sv.add_argument("--slurm-timeout", type=float, default=10.0, metavar="S",
                    help="seconds one Slurm command (sbatch, squeue, scancel ...) may take "
                         "(default 10)")
    sv.add_argument("--slurm-pending-timeout", type=float, default=300.0, metavar="S",
                    help="a component's Slurm job still queued after S seconds fails its start "
                         "(default 300)")
    sv.add_argument("--slurm-submits", type=int, default=4, metavar="N",
                    help="sbatch commands one batch of starts runs at once (default 4)")
    sv.add_argument("--import-path", action="append", metavar="DIR",
                    help="folder searched for classpath:/ descriptor imports (repeatable)")
    sv.add_argument("--consumer-network", action="append", metavar="CIDR",
                    help="a network notification consumers may be in (repeatable; default: "
                         "loopback and the private ranges)")
    sv.add_argument("--allow-descriptor-dir", action="append", metavar="DIR",
                    help="file: descriptor references and imports may be read below DIR "
                         "(repeatable; default: none, and the import path)")
    sv.add_argument("--allow-descriptor-url", action="append", metavar="PREFIX",
                    help="http(s) descriptor references and imports may be fetched under PREFIX "
                         "(repeatable; default: none)")
    sv.add_argument("--descriptor-network", action="append", metavar="CIDR",
                    help="besides public addresses, a network those fetches may reach (repeatable; "
                         "an allowed prefix naming an address allows that address)")
    sv.add_argument("--probe-network", action="append", metavar="CIDR",
                    help="a network probes and readiness checks may connect to (repeatable; "
                         "default: loopback and the private ranges)")
    sv.add_argument("--allowed-host", action="append", metavar="NAME",
                    help="a Host name the portal answers to besides IP addresses, localhost and "
                         "its own names (repeatable; * for any)")
    sv.add_argument("--max-log-bytes", type=int, metavar="N",
                    help="a component's stdout.log or stderr.log is rotated (to .1) past N bytes "
                         "(default 8 MiB)")
    sv.add_argument("--hosts-dir", metavar="DIR",
                    help="directory of the local hosts (default STATE/hosts; portals that share a "
                         "database must share it)")
    sv.add_argument("--workers", type=int, default=4, metavar="N", help="enactment worker threads (default 4)")
    sv.add_argument("--lease-seconds", type=float, default=30.0, metavar="S",
                    help="a claimed work item passes to another worker after this (default 30)")
    sv.add_argument("--heartbeat", type=float, default=5.0, metavar="S",
                    help="seconds between heartbeats; a portal silent for 3 is dead (default 5)")
    sv.add_argument("--liveness-interval", type=float, default=2.0, metavar="S",
                    help="seconds between liveness checks of running components (default 2)")
    sv.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain")
    sv.add_argument("--tls-key", metavar="PEM", help="the certificate's private key (PKCS#8)")
    sv.add_argument("--tls-client-ca", metavar="PEM",
                    help="require client certificates signed by these CAs (mutual TLS)")
    sv.add_argument("--server-threads", type=int, default=8, metavar="N",
                    help="threads answering requests (default 8; two answer quick requests, "
                         "the others join in while some are slow)")
    sv.add_argument("--cpu", metavar="LIST",
                    help="run the portal's own threads on these CPUs only, e.g. 0 or 0-1 (fewer "
                         "cross-core hand-overs per request; the components it starts still run "
                         "on every CPU)")
    sv.add_argument("--max-connections", type=int, default=4096, metavar="N",
                    help="connections being read or answered at once; more wait (default 4096)")
    sv.add_argument("--max-connections-per-address", type=int, default=256, metavar="N",
                    help="connections one client address may hold; its excess is closed (default "
                         "256; 0: no cap)")
    sv.add_argument("--failures-per-minute", type=int, default=10, metavar="N",
                    help="failed password sign-ins as one user from one place (IPv4 /24, IPv6 "
                         "/64) before that user is refused from there for a while (default 10)")
    sv.add_argument("--user-failures-per-minute", type=int, default=30, metavar="N",
                    help="... as one user from anywhere (default 30); a client that signed in "
                         "before, tokens and digest secrets are never refused")
    sv.add_argument("--password-checks", type=int, default=0, metavar="N",
                    help="scrypt password checks at once (default 0: half the cores)")
    sv.add_argument("--unauthenticated-body-bytes", type=int, default=None, metavar="N",
                    help="the largest body of a request without HTTP credentials (default 1 MiB)")
    sv.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                    help="seconds a client has to send its request headers (default 10, at most 60)")
    sv.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                    help="seconds a client has to send its request body (default 30)")
    sv.add_argument("--users", metavar="FILE",
                    help="authenticate every request against this users file (cddlm user add); "
                         "without it, only a loopback address is allowed (local mode: everyone "
                         "is the administrator)")
    sv.add_argument("--run-as", metavar="ACCOUNT",
                    help="run components as this unprivileged OS account ('{user}' stands for "
                         "the application's owner, e.g. cddlm-{user}); needs root")
    sv.add_argument("--quota", action="append", metavar="NAME=N",
                    help="a per-user quota: applications, components, descriptor_bytes, "
                         "subscriptions (repeatable; administrators have none)")
    sv.add_argument("--insecure", action="store_true",
                    help="start even on a non-loopback address without --users and TLS, or "
                         "with --users but without --run-as (components then run as the portal's "
                         "own account and may rewrite the users file), loudly")
    sv.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                    help="what the portal logs on stderr (default warning); STATE/portal.log "
                         "gets info and above (debug with debug), the audit's lines too")
    sv.add_argument("--log-format", default="text", choices=("text", "json"),
                    help="portal.log and stderr as text lines (default) or one JSON object a "
                         "line: time, level, logger, message, and a request's operation, "
                         "application, principal and address (docs/operating.md)")
    sv.add_argument("--ready-front-seconds", type=float, default=60.0, metavar="S",
                    help="with --agent: /readyz says not ready while no front portal has pinged "
                         "the parts delegated to it for S seconds (default 60, or "
                         "--fence-seconds)")
    sv.add_argument("--metrics-consumer-hosts", type=int, default=100, metavar="N",
                    help="notification consumer hosts that get a metrics label of their own; "
                         "the rest are counted as 'other' (default 100)")
    sv.set_defaults(func=cmd_portal_serve)
    backup.register(portal)
