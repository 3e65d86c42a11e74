"""What a metrics scrape reads from the store: grouped counts, in one read transaction.

A scrape (``GET /metrics``, every 15 s or so) costs one grouped query per family (applications
by state, components by state and host, work items, the outbox, hosts and their leases), never
a query per application; a request costs none. Counts only: no application, owner or
subscription name reaches a label.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

from sqlalchemy import func, select

from cddlm.application import lifecycle
from cddlm.application import repository as repo
from cddlm.application.enactment import states
from cddlm.application.store import Store
from cddlm.application.tables import agents, components, deliveries, events, hosts, work
from cddlm.metrics import Census

NO_HOST = "-"        # components placed on no host (compounds, delegates)
COMPONENT_STATES = (states.PENDING, states.DEPLOYED, states.STARTING, states.RUNNING,
                    states.COMPLETED, states.STOPPING, states.STOPPED, states.FAILED)


def read(store: Store, host_names: Iterable[str], now: float,
         clock: Callable[[], float] = time.perf_counter) -> Census:
    """The counts the store holds now; ``host_names``: the datacenter's hosts (each one is
    up unless marked down). Every state is counted, none left out for being 0 (a series that
    vanished would keep its last value on a graph), on each host that holds components."""
    started = clock()
    c = Census()
    with store.read() as conn:
        c.applications = dict.fromkeys(lifecycle.STATES, 0)
        c.applications.update(repo.count_by_state(conn))
        counted = {(state, host or NO_HOST): n for state, host, n in conn.execute(
            select(components.c.observed, components.c.host, func.count())
            .group_by(components.c.observed, components.c.host))}
        c.components = {(state, host): 0 for host in {h for _, h in counted}
                        for state in COMPONENT_STATES}
        c.components.update(counted)
        held = work.c.owner.is_not(None)
        counts = dict(conn.execute(select(held, func.count()).group_by(held)).all())
        c.queue = {"waiting": counts.get(False, 0), "claimed": counts.get(True, 0)}
        c.outbox = {"unfanned": conn.execute(select(func.count()).select_from(events)
                                             .where(events.c.fanned_out == False)  # noqa: E712
                                             ).scalar() or 0,
                    "queued": conn.execute(select(func.count()).select_from(deliveries)).scalar() or 0}
        down = {name for name, in conn.execute(select(hosts.c.name).where(hosts.c.down))}
        c.hosts_up = {name: name not in down for name in host_names}
        c.lease_ages = {host: max(0.0, now - (last_ok or checked)) for host, last_ok, checked
                        in conn.execute(select(agents.c.host, agents.c.last_ok, agents.c.checked))}
    c.seconds = clock() - started
    return c
