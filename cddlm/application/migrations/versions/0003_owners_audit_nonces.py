"""every application records its owner (names and client tokens unique per owner); subscriptions
record their subscriber and scope; ApplicationCreated events their application's owner; the
audit log; WS-Security nonces seen lately

Revision ID: 0003
Revises: 0002
"""

from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

LIVE = sa.text("state <> 'terminated'")
LOCAL_OWNER = 'admin'     # applications made before owners were recorded: local mode's admin


def upgrade() -> None:
    op.drop_index('ix_applications_live_name', table_name='applications')
    with op.batch_alter_table('applications', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner', sa.String(length=256), nullable=False,
                                      server_default=LOCAL_OWNER))
        batch_op.drop_constraint('uq_applications_client_token', type_='unique')
    op.create_index('ix_applications_live_owner_name', 'applications', ['owner', 'name'],
                    unique=True, sqlite_where=LIVE, postgresql_where=LIVE)
    op.create_index('ix_applications_owner_token', 'applications', ['owner', 'client_token'],
                    unique=True)
    with op.batch_alter_table('subscriptions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('subscriber', sa.String(length=256), nullable=False,
                                      server_default=LOCAL_OWNER))
        batch_op.add_column(sa.Column('scope', sa.String(length=256), nullable=True))
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('owner', sa.String(length=256), nullable=True))
    op.create_table(
        'audit',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('at', sa.Float(), nullable=False),
        sa.Column('principal', sa.String(length=256), nullable=False),
        sa.Column('address', sa.String(length=256), nullable=True),
        sa.Column('action', sa.String(length=64), nullable=False),
        sa.Column('app_id', sa.String(length=64), nullable=True),
        sa.Column('app_owner', sa.String(length=256), nullable=True),
        sa.Column('detail', sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_audit')))
    op.create_index('ix_audit_app_id', 'audit', ['app_id'], unique=False)
    op.create_index('ix_audit_app_owner', 'audit', ['app_owner'], unique=False)
    op.create_table(
        'nonces',
        sa.Column('digest', sa.String(length=64), nullable=False),
        sa.Column('expires', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('digest', name=op.f('pk_nonces')))
    op.create_index('ix_nonces_expires', 'nonces', ['expires'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_nonces_expires', table_name='nonces')
    op.drop_table('nonces')
    op.drop_index('ix_audit_app_owner', table_name='audit')
    op.drop_index('ix_audit_app_id', table_name='audit')
    op.drop_table('audit')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_column('owner')
    with op.batch_alter_table('subscriptions', schema=None) as batch_op:
        batch_op.drop_column('scope')
        batch_op.drop_column('subscriber')
    op.drop_index('ix_applications_owner_token', table_name='applications')
    op.drop_index('ix_applications_live_owner_name', table_name='applications')
    with op.batch_alter_table('applications', schema=None) as batch_op:
        batch_op.create_unique_constraint('uq_applications_client_token', ['client_token'])
        batch_op.drop_column('owner')
    op.create_index('ix_applications_live_name', 'applications', ['name'], unique=True,
                    sqlite_where=LIVE, postgresql_where=LIVE)
