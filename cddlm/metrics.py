"""The portal's metrics: the one module that holds the Prometheus registry (DESIGN.md section 9).

The layers below count through the small functions here (``request``, ``claimed``,
``delivered``, ``auth_failed``, ``store_round_trip``, ``log_rotated``) and never touch
``prometheus_client`` themselves. What only the store knows (applications by state,
components by state and host, the queues, the hosts) is read when a scrape comes, in one read
of grouped counts (``application/census.py``), and handed to ``exposition`` as a ``Census``;
nothing is read per request.

Tenancy: labels hold counts' categories only (operations, outcomes, states, hosts of the
datacenter, consumer hosts), never an application, user or subscription name or id. Consumer
hosts are users' addresses, so at most ``max_consumer_hosts`` of them get their own label;
the rest are counted as ``other``.

The registry is the process's (one portal per process; tests that run several in one process
share its counters). The text format is ``prometheus_client``'s, never written here by hand.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from prometheus_client import (CollectorRegistry, Counter, GCCollector, Histogram,
                               PlatformCollector, ProcessCollector, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client import exposition as _exposition

# the classic text format (Prometheus 2 reads it; newer clients call their default 1.0.0)
CONTENT_TYPE = getattr(_exposition, "CONTENT_TYPE_PLAIN_0_0_4", _exposition.CONTENT_TYPE_LATEST)
OTHER = "other"         # the label of consumer hosts past the cap

disable_created_metrics()      # the *_created series: noise beside the counters themselves
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

_REQUESTS = Counter("cddlm_requests", "SOAP requests answered, by endpoint, operation and "
                    "outcome (ok, or the fault's name)", ["endpoint", "operation", "outcome"],
                    registry=REGISTRY)
_REQUEST_SECONDS = Histogram("cddlm_request_duration_seconds", "Time from a SOAP request's "
                             "parse to its answer", ["endpoint", "operation"], registry=REGISTRY,
                             buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
_CLAIMED = Counter("cddlm_engine_claimed_items", "Work items the engine's workers claimed, by "
                   "action", ["action"], registry=REGISTRY)
_BATCH = Histogram("cddlm_engine_batch_items", "Work items per claimed batch (its count is the "
                   "number of claims that found work)", registry=REGISTRY,
                   buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
_DELIVERY_SECONDS = Histogram("cddlm_notification_delivery_seconds", "Time from handing a "
                              "Notify request to a sender to the consumer's answer, by consumer "
                              "host", ["consumer_host"], registry=REGISTRY,
                              buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
_DELIVERY_FAILURES = Counter("cddlm_notification_delivery_failures", "Notify requests that "
                             "failed (to be retried), by consumer host", ["consumer_host"],
                             registry=REGISTRY)
_AUTH_FAILURES = Counter("cddlm_authentication_failures", "Requests whose credentials were "
                         "refused", registry=REGISTRY)
_STORE_SECONDS = Histogram("cddlm_store_round_trip_seconds", "Time of one statement's round "
                           "trip to the store", registry=REGISTRY,
                           buckets=(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1,
                                    .25, .5, 1, 2.5))
_ROTATIONS = Counter("cddlm_log_rotations", "Component logs the log capper rotated past their "
                     "cap", registry=REGISTRY)

_lock = threading.Lock()
_consumer_hosts: set[str] = set()
_max_consumer_hosts = 100


def configure(max_consumer_hosts: int) -> None:
    """The composition root's settings (``Settings.metrics_consumer_hosts``); the consumer
    hosts counted from now on are the first that many seen from now on."""
    global _max_consumer_hosts
    with _lock:
        _max_consumer_hosts = max_consumer_hosts
        _consumer_hosts.clear()


# -- what the layers below count ------------------------------------------------------------------
_children: dict[tuple[str, str, str], tuple] = {}     # (endpoint, operation, outcome) -> its series


def request(endpoint: str, operation: str, outcome: str, seconds: float) -> None:
    key = (endpoint, operation, outcome)
    series = _children.get(key)
    if series is None:      # labels() costs a lock and a lookup each: once per kind of request
        series = _children[key] = (_REQUESTS.labels(*key), _REQUEST_SECONDS.labels(endpoint, operation))
    series[0].inc()
    series[1].observe(seconds)


def claimed(action: str, items: int) -> None:
    _CLAIMED.labels(action).inc(items)
    _BATCH.observe(items)


def delivered(consumer_host: str, seconds: float, failed: bool) -> None:
    host = _consumer_label(consumer_host)
    _DELIVERY_SECONDS.labels(host).observe(seconds)
    if failed:
        _DELIVERY_FAILURES.labels(host).inc()


def auth_failed() -> None:
    _AUTH_FAILURES.inc()


def store_round_trip(seconds: float) -> None:
    _STORE_SECONDS.observe(seconds)


def log_rotated() -> None:
    _ROTATIONS.inc()


def _consumer_label(host: str) -> str:
    host = host.rpartition("@")[2]      # a consumer URL's user and password are no label
    with _lock:
        if host in _consumer_hosts:
            return host
        if len(_consumer_hosts) < _max_consumer_hosts:
            _consumer_hosts.add(host)
            return host
    return OTHER


# -- what a scrape reads from the store ----------------------------------------------------------------
@dataclass
class Census:
    """Counts read from the store when a scrape comes (``application/census.py``)."""

    applications: dict[str, int] = field(default_factory=dict)           # state -> count
    components: dict[tuple[str, str], int] = field(default_factory=dict)  # (state, host) -> count
    queue: dict[str, int] = field(default_factory=dict)                  # waiting|claimed -> items
    outbox: dict[str, int] = field(default_factory=dict)                 # unfanned|queued -> count
    hosts_up: dict[str, bool] = field(default_factory=dict)              # host -> up
    lease_ages: dict[str, float] = field(default_factory=dict)           # host -> seconds
    seconds: float = 0.0                                                  # the census's own read


def _families(c: Census) -> list:
    def gauge(name: str, doc: str, labels: list[str], values: dict) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=labels)
        for key, value in sorted(values.items()):
            g.add_metric(list(key) if isinstance(key, tuple) else [key], float(value))
        return g
    return [
        gauge("cddlm_applications", "Applications in the store, by lifecycle state", ["state"],
              c.applications),
        gauge("cddlm_components", "Components in the store, by observed state and host",
              ["state", "host"], c.components),
        gauge("cddlm_engine_queue_depth", "Work items queued, waiting or claimed", ["state"],
              c.queue),
        gauge("cddlm_notification_outbox_depth", "Events not yet fanned out (unfanned) and "
              "notifications waiting to be delivered (queued)", ["stage"], c.outbox),
        gauge("cddlm_host_up", "Whether a host of the datacenter is up (1) or marked down (0)",
              ["host"], {h: 1 if up else 0 for h, up in c.hosts_up.items()}),
        gauge("cddlm_host_lease_age_seconds", "Seconds since a remote host last answered the "
              "host monitor", ["host"], c.lease_ages),
        gauge("cddlm_census_read_seconds", "Time the store took to give this scrape's counts",
              [], {(): c.seconds}),
    ]


class _Scrape:
    def __init__(self, census: Census | None):
        self.census = census

    def collect(self):
        yield from REGISTRY.collect()
        if self.census is not None:
            yield from _families(self.census)


def exposition(census: Census | None) -> bytes:
    """The text format of every metric, with ``census``'s gauges."""
    return generate_latest(_Scrape(census))
