"""SQLite: an application's large columns (descriptor, component tree, placement, properties,
options) move to the end of its row. SQLite reads a row's columns in order, through the
overflow pages of any large value before the one asked for: with the component tree of 10,000
components in the middle of the row, reading an application's state (or its owner, for a
lock) walked megabytes. PostgreSQL keeps large values out of the row (TOAST): nothing to do.

Revision ID: 0006
Revises: 0005
"""

from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

LIVE = sa.text("state <> 'terminated'")
HEAVY_LAST = ('id', 'name', 'hostname', 'state', 'desired', 'generation', 'state_info',
              'termination_info', 'created', 'started', 'terminated', 'termination_time',
              'language', 'descriptor_digest', 'client_token', 'request_digest', 'init_token',
              'event_seq', 'owner', 'descriptor', 'properties', 'options', 'deployment',
              'placement')
AS_BEFORE = ('id', 'name', 'hostname', 'state', 'desired', 'generation', 'state_info',
             'termination_info', 'created', 'started', 'terminated', 'termination_time',
             'language', 'descriptor', 'descriptor_digest', 'properties', 'options', 'deployment',
             'placement', 'client_token', 'request_digest', 'init_token', 'event_seq', 'owner')


def _reorder(order: tuple) -> None:
    if op.get_bind().dialect.name != 'sqlite':
        return
    # a partial index is not carried through a table rebuild: made again afterwards
    op.drop_index('ix_applications_live_owner_name', table_name='applications')
    with op.batch_alter_table('applications', recreate='always',
                              partial_reordering=[order]):
        pass
    op.create_index('ix_applications_live_owner_name', 'applications', ['owner', 'name'],
                    unique=True, sqlite_where=LIVE, postgresql_where=LIVE)


def upgrade() -> None:
    _reorder(HEAVY_LAST)


def downgrade() -> None:
    _reorder(AS_BEFORE)
