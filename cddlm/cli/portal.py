"""``cddlm portal serve``: run a portal until interrupted."""

from __future__ import annotations

import argparse


def cmd_portal_serve(args: argparse.Namespace) -> int:
    import dataclasses
    import logging
    import signal
    import sys
    from cddlm.app import Portal
    from cddlm.config import Quotas, Security, Settings
    from cddlm.errors import ConfigurationError
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "error":     # the audit log's lines: who did what, from where
        logging.getLogger("cddlm.audit").setLevel(logging.INFO)
    settings = Settings(host=args.host, port=args.port, state_dir=args.state_dir, db_url=args.db,
                        datacenter_file=args.datacenter, public_url=args.public_url,
                        import_path=tuple(args.import_path or ()), hosts_dir=args.hosts_dir,
                        engine_workers=args.workers, lease_seconds=args.lease_seconds,
                        heartbeat_seconds=args.heartbeat, liveness_interval=args.liveness_interval,
                        tls_cert=args.tls_cert, tls_key=args.tls_key,
                        tls_client_ca=args.tls_client_ca, server_threads=args.server_threads,
                        max_connections=args.max_connections, header_timeout=args.header_timeout,
                        body_timeout=args.body_timeout,
                        security=Security(users_file=args.users, run_as=args.run_as,
                                          insecure=args.insecure),
                        quotas=Quotas(**quotas(args.quota)))
    if args.consumer_network:
        settings = settings.replace(consumer_networks=tuple(args.consumer_network))
    if args.probe_network:
        settings = settings.replace(probe_networks=tuple(args.probe_network))
    if args.max_log_bytes is not None:
        settings = settings.replace(limits=dataclasses.replace(settings.limits,
                                                               max_log_bytes=args.max_log_bytes))
    settings = settings.replace(allowed_descriptor_dirs=tuple(args.allow_descriptor_dir or ()),
                                allowed_descriptor_urls=tuple(args.allow_descriptor_url or ()),
                                descriptor_networks=tuple(args.descriptor_network or ()),
                                allowed_hosts=tuple(args.allowed_host or ()))
    try:
        portal = Portal(settings)
    except ConfigurationError as e:
        print("cddlm: %s" % e, file=sys.stderr)
        return 1
    for warning in portal.warnings:
        print("\n*** WARNING: %s ***\n" % warning, file=sys.stderr, flush=True)

    def stop(signum, frame):
        portal.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    portal.bind()

    def ready(url: str) -> None:
        print("portal ready at %s" % url, flush=True)

    try:
        portal.serve_forever(ready)
    finally:
        portal.stop()
    if portal.failure:
        print("cddlm: %s" % portal.failure, file=sys.stderr)
        return 1
    return 0


def quotas(pairs: list[str] | None) -> dict[str, int]:
    import dataclasses
    from cddlm.cli.common import usage
    from cddlm.config import Quotas
    known = {f.name for f in dataclasses.fields(Quotas)}
    out = {}
    for pair in pairs or []:
        key, _, value = pair.partition("=")
        if key not in known or not value.isdigit():
            raise SystemExit(usage("--quota expects NAME=N with NAME one of %s, got %r"
                                   % (", ".join(sorted(known)), pair)))
        out[key] = int(value)
    return out


def register(sub) -> None:
    portal = sub.add_parser("portal", help="run a portal").add_subparsers(dest="portal_command",
                                                                          required=True)
    sv = portal.add_parser("serve", help="run a portal until interrupted")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sv.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 picks a free one)")
    sv.add_argument("--db", metavar="URL",
                    help="database URL (default: SQLite under the state dir; postgresql://... to share)")
    sv.add_argument("--state-dir", default="./cddlm-state", metavar="DIR",
                    help="where the portal keeps its database, logs and component directories")
    sv.add_argument("--datacenter", metavar="FILE", help="datacenter file (YAML/JSON) of hosts")
    sv.add_argument("--public-url", metavar="URL", help="base URL to put in EPRs (behind a proxy)")
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
    sv.add_argument("--workers", type=int, default=4, help="enactment worker threads (default 4)")
    sv.add_argument("--lease-seconds", type=float, default=30.0,
                    help="a claimed work item passes to another worker after this (default 30)")
    sv.add_argument("--heartbeat", type=float, default=5.0,
                    help="seconds between heartbeats; a portal silent for 3 is dead (default 5)")
    sv.add_argument("--liveness-interval", type=float, default=2.0,
                    help="seconds between liveness checks of running components (default 2)")
    sv.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate chain")
    sv.add_argument("--tls-key", metavar="PEM", help="the certificate's private key (PKCS#8)")
    sv.add_argument("--tls-client-ca", metavar="PEM",
                    help="require client certificates signed by these CAs (mutual TLS)")
    sv.add_argument("--server-threads", type=int, default=8, metavar="N",
                    help="threads answering requests (default 8)")
    sv.add_argument("--max-connections", type=int, default=4096, metavar="N",
                    help="connections being read or answered at once; more wait (default 4096)")
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
                    help="start even on a non-loopback address without --users and TLS, or as "
                         "root without --run-as (loudly: anyone reaching it may run commands)")
    sv.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    sv.set_defaults(func=cmd_portal_serve)
