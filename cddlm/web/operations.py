"""The operating surfaces, in front of the dashboard (docs/operating.md):

    GET /healthz    200 while the process serves requests (a liveness probe)
    GET /readyz     200 when the portal can do its work, else 503; a short JSON reason
    GET /metrics    the Prometheus text format (``cddlm.metrics``); with users, an
                    administrator's credentials (an operator's token: cddlm token create)

Every other path goes to the dashboard. ``/healthz`` and ``/readyz`` need no credentials and
say nothing secret (check names and reasons); ``/readyz`` answers from ``Readiness``, which
reads the store at most twice a second however often it is polled. ``/metrics`` reads the
store's counts (``census``) once per scrape.
"""

from __future__ import annotations

import json
import logging
from typing import Callable

from cddlm import metrics
from cddlm.application.health import Readiness
from cddlm.application.tenancy import Principal
from cddlm.errors import AuthenticationFailed, StoreUnavailable

log = logging.getLogger(__name__)
PATHS = ("/healthz", "/readyz", "/metrics")


class Operations:
    """``authenticate(environ) -> Principal`` is the dashboard's (None: local mode, where every
    caller is the local administrator); ``census()`` the store's counts for a scrape."""

    def __init__(self, dashboard: Callable | None, readiness: Readiness,
                 census: Callable[[], metrics.Census],
                 authenticate: Callable[[dict], Principal] | None = None):
        self.dashboard = dashboard
        self.readiness = readiness
        self.census = census
        self.authenticate = authenticate

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "") or "/"
        if path not in PATHS:
            if self.dashboard is None:
                return _send(environ, start_response, "404 Not Found", "text/plain; charset=utf-8",
                             b"not found\n")
            return self.dashboard(environ, start_response)
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _send(environ, start_response, "405 Method Not Allowed",
                         "text/plain; charset=utf-8", b"GET or HEAD\n", [("Allow", "GET, HEAD")])
        if path == "/healthz":
            return _json(environ, start_response, "200 OK", {"status": "ok"})
        if path == "/readyz":
            problems = self.readiness.problems()
            if problems:
                return _json(environ, start_response, "503 Service Unavailable",
                             {"status": "not ready", "problems": problems})
            return _json(environ, start_response, "200 OK", {"status": "ready"})
        return self._metrics(environ, start_response)

    def _metrics(self, environ, start_response):
        if self.authenticate is not None:
            try:
                principal = self.authenticate(environ)
            except AuthenticationFailed as e:
                extra = [("WWW-Authenticate", e.challenge)] if e.challenge else []
                if e.retry_after:
                    extra.append(("Retry-After", str(e.retry_after)))
                status = {403: "403 Forbidden", 429: "429 Too Many Requests"}.get(
                    e.status, "401 Unauthorized")
                return _send(environ, start_response, status, "text/plain; charset=utf-8",
                             ("%s\n" % e).encode(), extra)
            if not principal.admin:
                return _send(environ, start_response, "403 Forbidden", "text/plain; charset=utf-8",
                             b"the metrics are an administrator's: sign in as a user whose role "
                             b"is admin (an operator's token: cddlm token create)\n")
        try:
            census = self.census()
        except StoreUnavailable as e:    # the process's own counters still tell something
            log.warning("metrics without the store's counts: %s", e)
            census = None
        return _send(environ, start_response, "200 OK", metrics.CONTENT_TYPE,
                     metrics.exposition(census), [("Cache-Control", "no-store")])


def _json(environ, start_response, status: str, data: dict):
    body = (json.dumps(data, sort_keys=True) + "\n").encode()
    return _send(environ, start_response, status, "application/json", body,
                 [("Cache-Control", "no-store")])


def _send(environ, start_response, status: str, ctype: str, body: bytes, extra=()):
    start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body))),
                            ("X-Content-Type-Options", "nosniff")] + list(extra))
    return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]
