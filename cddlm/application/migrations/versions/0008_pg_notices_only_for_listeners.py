"""PostgreSQL: a transaction of a portal that no other process listens to sends no notice of
its changed rows. The notices of migration 0007 cost more than their delivery: PostgreSQL
commits the transactions that notify one at a time, each holding one lock of the whole
server through its commit and the sync of its log (eight clients creating, terminating and
destroying had three sessions waiting for that lock on average, the largest wait of all). A
portal that has heard no other listener for a while (``ChangeWatcher.alone``) marks its write
transactions (``SET LOCAL cddlm.alone = on``); every other writer (another portal, the command
line, an older portal) notifies as before. SQLite: nothing to do.

Revision ID: 0008
Revises: 0007
"""

from alembic import op


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE OR REPLACE FUNCTION cddlm_rows_changed() RETURNS trigger AS $$ "
               "BEGIN IF current_setting('cddlm.alone', true) IS DISTINCT FROM 'on' THEN "
               "PERFORM pg_notify('cddlm_rows', TG_TABLE_NAME); END IF; RETURN NULL; END $$ "
               "LANGUAGE plpgsql")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE OR REPLACE FUNCTION cddlm_rows_changed() RETURNS trigger AS $$ "
               "BEGIN PERFORM pg_notify('cddlm_rows', TG_TABLE_NAME); RETURN NULL; END $$ "
               "LANGUAGE plpgsql")
