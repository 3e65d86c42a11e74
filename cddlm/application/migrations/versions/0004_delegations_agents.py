"""delegations (each host's share of an application on its host portal) and agents (when each
host portal last answered), for hosts whose agent is another portal; renewals (host side: when a front portal last pinged
a sub-application it delegated, for --fence-seconds)

Revision ID: 0004
Revises: 0003
"""

from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'delegations',
        sa.Column('token', sa.String(length=64), nullable=False),
        sa.Column('app_id', sa.String(length=64), nullable=False),
        sa.Column('host', sa.String(length=256), nullable=False),
        sa.Column('grp', sa.String(length=64), nullable=False),
        sa.Column('generation', sa.Integer(), nullable=False),
        sa.Column('address', sa.String(length=1024), nullable=True),
        sa.Column('resource_id', sa.String(length=256), nullable=True),
        sa.Column('asked', sa.String(length=32), nullable=False),
        sa.Column('remote_state', sa.String(length=32), nullable=True),
        sa.Column('info', sa.Text(), nullable=True),
        sa.Column('updated', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('token', name=op.f('pk_delegations')))
    op.create_index('ix_delegations_app_id', 'delegations', ['app_id'], unique=False)
    op.create_table(
        'agents',
        sa.Column('host', sa.String(length=256), nullable=False),
        sa.Column('last_ok', sa.Float(), nullable=True),
        sa.Column('last_error', sa.Text(), nullable=True),
        sa.Column('checked', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('host', name=op.f('pk_agents')))
    op.create_table(
        'renewals',
        sa.Column('app_id', sa.String(length=64), nullable=False),
        sa.Column('renewed', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('app_id', name=op.f('pk_renewals')))


def downgrade() -> None:
    op.drop_table('renewals')
    op.drop_table('agents')
    op.drop_index('ix_delegations_app_id', table_name='delegations')
    op.drop_table('delegations')
