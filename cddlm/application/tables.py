"""The database schema: every table the portal keeps. Changes go through Alembic migrations
(``cddlm/application/migrations``); this module is the model those migrations create.

Times are UTC seconds since the epoch (float): portable between SQLite and PostgreSQL and
cheap to compare in claim queries. JSON columns hold plain data written by this package.
"""

from __future__ import annotations

from sqlalchemy import (Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String,
                        Table, Text, UniqueConstraint)

# The owner of what the implicit administrator of local mode makes (tenancy.LOCAL_ADMIN), and
# of every application made before the portal recorded owners.
LOCAL_OWNER = "admin"

metadata = MetaData(naming_convention={
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s",
    "pk": "pk_%(table_name)s",
})

applications = Table(
    "applications", metadata,
    Column("id", String(64), primary_key=True),            # urn:uuid:...
    Column("name", String(256), nullable=True),             # unique among live ones (below)
    Column("hostname", String(256), nullable=True),
    Column("state", String(16), nullable=False),            # observed lifecycle state
    Column("desired", String(16), nullable=False),          # last intent: instantiated..terminated
    Column("generation", Integer, nullable=False, default=0),   # bumped by every new intent
    Column("state_info", Text, nullable=True),
    Column("termination_info", Text, nullable=True),        # JSON
    Column("created", Float, nullable=False),
    Column("started", Float, nullable=True),
    Column("terminated", Float, nullable=True),
    Column("termination_time", Float, nullable=True),       # WS-RL scheduled termination
    Column("language", String(512), nullable=True),
    Column("descriptor_digest", String(80), nullable=True),
    Column("client_token", String(256), nullable=True),       # unique per owner (below)
    Column("request_digest", String(80), nullable=True),
    Column("init_token", String(256), nullable=True),
    Column("event_seq", Integer, nullable=False, default=0),    # last lifecycle event sequence
    Column("owner", String(256), nullable=False, server_default=LOCAL_OWNER),   # a principal
    # the large ones last: SQLite reads a row's columns in order, through the overflow pages of
    # any large value before the one asked for (migration 0006)
    Column("descriptor", Text, nullable=True),
    Column("properties", Text, nullable=True),              # JSON {name: value}
    Column("options", Text, nullable=True),                 # JSON [option, ...] as given
    Column("deployment", Text, nullable=True),              # JSON: the resolved component tree
    Column("placement", Text, nullable=True),               # JSON: {path: {host, provider}}, audit
)
Index("ix_applications_termination_time", applications.c.termination_time)
# A name is held while its application lives, per owner (so a name in use tells nobody about
# another tenant's applications): once terminated, the name may be used again (lookup by name
# finds the live one, else the newest terminated one).
_LIVE = applications.c.state != "terminated"
Index("ix_applications_live_owner_name", applications.c.owner, applications.c.name, unique=True,
      sqlite_where=_LIVE, postgresql_where=_LIVE)
Index("ix_applications_name", applications.c.name)
Index("ix_applications_owner_token", applications.c.owner, applications.c.client_token, unique=True)
# listings page in creation order (everyone's, or one owner's): a page is an index range
Index("ix_applications_created", applications.c.created, applications.c.id)
Index("ix_applications_owner_created", applications.c.owner, applications.c.created, applications.c.id)

views = Table(
    "views", metadata,
    Column("id", String(64), primary_key=True),
    Column("app_id", String(64), ForeignKey("applications.id", ondelete="CASCADE"), nullable=False),
    Column("portal", String(512), nullable=False),           # base URL the view is bound to
    Column("created", Float, nullable=False),
    Column("termination_time", Float, nullable=True),        # WS-RL: the view ends then
)
Index("ix_views_app_id", views.c.app_id)
Index("ix_views_termination_time", views.c.termination_time)   # the scheduler's views due

history = Table(
    "history", metadata,
    Column("app_id", String(64), ForeignKey("applications.id", ondelete="CASCADE"),
           primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("state", String(16), nullable=False),
    Column("at", Float, nullable=False),
    Column("info", Text, nullable=True),
)

components = Table(
    "components", metadata,
    Column("app_id", String(64), ForeignKey("applications.id", ondelete="CASCADE"),
           primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("type", String(32), nullable=False),
    Column("parent", String(1024), nullable=True),
    Column("position", Integer, nullable=False, default=0),  # order among siblings
    Column("optional", Boolean, nullable=False, default=False),
    Column("oneshot", Boolean, nullable=False, default=False),   # run_to_completion
    Column("host", String(256), nullable=True),
    Column("provider", String(256), nullable=True),
    Column("desired", String(16), nullable=False),           # absent | deployed | running | stopped
    Column("observed", String(16), nullable=False),          # see enactment/states.py
    Column("generation", Integer, nullable=False, default=0),
    Column("pid", Integer, nullable=True),
    Column("pid_start", String(32), nullable=True),          # process start time (clock ticks)
    Column("workdir", String(1024), nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("exit_signal", String(16), nullable=True),
    Column("restarts", Integer, nullable=False, default=0),
    Column("runtime", Text, nullable=True),                  # JSON: resolved lazy values, port ...
    Column("info", Text, nullable=True),
    Column("updated", Float, nullable=False),
)
Index("ix_components_host", components.c.host)
Index("ix_components_observed", components.c.observed)   # the running ones: liveness, re-adoption

work = Table(
    "work", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("app_id", String(64), ForeignKey("applications.id", ondelete="CASCADE"), nullable=False),
    Column("path", String(1024), nullable=False),
    Column("action", String(16), nullable=False),            # deploy | start | stop | probe
    Column("generation", Integer, nullable=False),
    Column("owner", String(64), nullable=True),               # engine id holding the lease
    Column("lease_expires", Float, nullable=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("not_before", Float, nullable=False),
    Column("created", Float, nullable=False),
    UniqueConstraint("app_id", "path", "action", "generation", name="uq_work_item"),
)
Index("ix_work_claim", work.c.not_before, work.c.lease_expires)

events = Table(                                              # the outbox
    "events", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("producer", String(64), nullable=False),           # application id, or "portal"
    Column("topic", String(256), nullable=False),              # Clark name
    Column("seq", Integer, nullable=False),                    # per application, from 1; portal: 0
    Column("message", Text, nullable=False),                  # the payload's data (JSON)
    Column("created", Float, nullable=False),
    Column("fanned_out", Boolean, nullable=False, default=False),   # deliveries queued
    Column("owner", String(256), nullable=True),               # ApplicationCreated: the app's owner
)
# (producer, topic, id): the newest event of a producer (GetCurrentMessage, pruning)
Index("ix_events_producer", events.c.producer, events.c.topic, events.c.id)
Index("ix_events_fanned_out", events.c.fanned_out)

# A subscription is a queue of deliveries plus the state of delivering its head: at most one
# portal holds it (owner, lease_expires) at a time, which keeps its deliveries in order.
subscriptions = Table(
    "subscriptions", metadata,
    Column("id", String(64), primary_key=True),               # hex; the manager's path
    Column("producer", String(64), nullable=False),           # application id, or "portal"
    Column("producer_view", String(64), nullable=True),       # the view it was made through
    Column("portal", String(512), nullable=False),            # base URL of the manager EPR
    Column("topic", String(256), nullable=False),              # Clark name
    Column("filter_xml", Text, nullable=False),               # the wsnt:Filter (as given, or implied)
    Column("message_filter", Text, nullable=True),            # JSON [[XPath, {prefix: ns}], ...]
    Column("consumer", Text, nullable=False),                 # the consumer EPR (XML)
    Column("consumer_address", String(2048), nullable=False),
    Column("created", Float, nullable=False),
    Column("termination_time", Float, nullable=True),         # None: never expires
    Column("start_seq", Integer, nullable=False, default=0),  # receives events after this seq
    Column("paused", Boolean, nullable=False, default=False),
    Column("status", String(16), nullable=False),             # active | failed | ended
    Column("failure", Text, nullable=True),                   # why it failed
    # delivery of the head of the queue
    Column("due", Float, nullable=True),                      # None: nothing queued
    Column("attempts", Integer, nullable=False, default=0),   # consecutive failures
    Column("failing_since", Float, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("owner", String(64), nullable=True),               # portal (engine id) delivering it
    Column("lease_expires", Float, nullable=True),
    Column("delivered", Integer, nullable=False, default=0),
    Column("last_delivered", Float, nullable=True),
    # who made it (a principal: only they and administrators reach its manager), and for the
    # portal's ApplicationCreated topic whose applications it hears of (None: everyone's)
    Column("subscriber", String(256), nullable=False, server_default=LOCAL_OWNER),
    Column("scope", String(256), nullable=True),
)
Index("ix_subscriptions_producer", subscriptions.c.producer)
Index("ix_subscriptions_due", subscriptions.c.due)

# The queue: one row per message to deliver. It is the hottest table of fan-out (one row per
# subscriber per event), so it has no foreign keys, whose per-row checks cost PostgreSQL more
# than the inserts themselves: notify/ deletes a subscription's rows with it, and prunes only
# events no row names.
deliveries = Table(
    "deliveries", metadata,
    Column("subscription_id", String(64), primary_key=True),
    Column("event_id", Integer, primary_key=True),
    Column("queued", Float, nullable=False),
)
Index("ix_deliveries_event_id", deliveries.c.event_id)

hosts = Table(
    "hosts", metadata,
    Column("name", String(256), primary_key=True),
    Column("down", Boolean, nullable=False, default=False),
    Column("reason", Text, nullable=True),
    Column("updated", Float, nullable=False),
)

engines = Table(                                             # portals sharing this store
    "engines", metadata,
    Column("id", String(64), primary_key=True),
    Column("url", String(512), nullable=True),
    Column("started", Float, nullable=False),
    Column("heartbeat", Float, nullable=False),
)

audit = Table(                                               # who did what to which application
    "audit", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("principal", String(256), nullable=False),
    Column("address", String(256), nullable=True),            # the client's address
    Column("action", String(64), nullable=False),             # the operation
    Column("app_id", String(64), nullable=True),              # no foreign key: outlives destroy
    Column("app_owner", String(256), nullable=True),          # whose application it was
    Column("detail", Text, nullable=True),
)
Index("ix_audit_app_id", audit.c.app_id)
Index("ix_audit_app_owner", audit.c.app_owner)

nonces = Table(                                              # WS-Security nonces seen lately
    "nonces", metadata,
    Column("digest", String(64), primary_key=True),          # sha256 of user and nonce
    Column("expires", Float, nullable=False),
)
Index("ix_nonces_expires", nonces.c.expires)

delegations = Table(                                         # a host's share on a host portal
    "delegations", metadata,
    Column("token", String(64), primary_key=True),           # the client-token: app+generation+host+group
    Column("app_id", String(64), nullable=False),
    Column("host", String(256), nullable=False),
    Column("grp", String(64), nullable=False),               # the start group ("0", "1.2" ...)
    Column("generation", Integer, nullable=False),           # the front application's, at initialize
    Column("address", String(1024), nullable=True),          # the sub-application's EPR
    Column("resource_id", String(256), nullable=True),
    Column("asked", String(32), nullable=False),             # created|initialized|running|terminated|destroyed
    Column("remote_state", String(32), nullable=True),       # what the host portal last said
    Column("info", Text, nullable=True),                     # the remote reason of a failure
    Column("updated", Float, nullable=False),
)
Index("ix_delegations_app_id", delegations.c.app_id)

agents = Table(                                              # host portals: when they last answered
    "agents", metadata,
    Column("host", String(256), primary_key=True),
    Column("last_ok", Float, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("checked", Float, nullable=False),
)

renewals = Table(                                            # host side: when a front portal last
    "renewals", metadata,                                    # pinged a sub-application it delegated
    Column("app_id", String(64), primary_key=True),
    Column("renewed", Float, nullable=False),
)
