"""views end at their own termination time; names are unique among live applications

Revision ID: 0002
Revises: 0001
"""

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

LIVE = sa.text("state <> 'terminated'")


def upgrade() -> None:
    with op.batch_alter_table('views', schema=None) as batch_op:
        batch_op.add_column(sa.Column('termination_time', sa.Float(), nullable=True))
    with op.batch_alter_table('applications', schema=None) as batch_op:
        batch_op.drop_constraint('uq_applications_name', type_='unique')
        batch_op.create_index('ix_applications_name', ['name'], unique=False)
    op.create_index('ix_applications_live_name', 'applications', ['name'], unique=True,
                    sqlite_where=LIVE, postgresql_where=LIVE)


def downgrade() -> None:
    op.drop_index('ix_applications_live_name', table_name='applications')
    with op.batch_alter_table('applications', schema=None) as batch_op:
        batch_op.drop_index('ix_applications_name')
        batch_op.create_unique_constraint('uq_applications_name', ['name'])
    with op.batch_alter_table('views', schema=None) as batch_op:
        batch_op.drop_column('termination_time')
