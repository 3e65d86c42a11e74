"""applications are listed in pages in the order they were created (ext:listApplications,
api:applications, the dashboard), everyone's or one owner's: indexes on (created, id) and
(owner, created, id), so a page is an index range and not a sort of every row; views by
termination time, so the scheduler's check for views due (every second) is not a scan of
every view; components by observed state, so the liveness pass and the re-adoption at start
read the running ones, not every component ever deployed

Revision ID: 0004b
Revises: 0003

(A branch of its own from 0003, beside other work's 0004: ``Store.migrate`` upgrades every
head, and the next migration names both as its down revisions.)
"""

from alembic import op


revision = '0004b'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index('ix_applications_created', 'applications', ['created', 'id'], unique=False)
    op.create_index('ix_applications_owner_created', 'applications', ['owner', 'created', 'id'],
                    unique=False)
    op.create_index('ix_views_termination_time', 'views', ['termination_time'], unique=False)
    op.create_index('ix_components_observed', 'components', ['observed'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_components_observed', table_name='components')
    op.drop_index('ix_views_termination_time', table_name='views')
    op.drop_index('ix_applications_owner_created', table_name='applications')
    op.drop_index('ix_applications_created', table_name='applications')
