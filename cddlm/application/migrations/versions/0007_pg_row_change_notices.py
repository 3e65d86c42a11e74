"""PostgreSQL: a change to an application or a view row sends a notice (``NOTIFY cddlm_rows``)
when its transaction commits. Each portal listens (``Store.start``) and drops the
application rows it holds for the hottest read (``Store.first_cached``): a portal sharing the
store sees another's changes as soon as the notice arrives. SQLite has one writer process per
file and a change counter of its own (``PRAGMA data_version``): nothing to do.

Revision ID: 0007
Revises: 0006
"""

from alembic import op


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

TABLES = ("applications", "views")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # one notice per table and transaction: PostgreSQL folds equal notices of a transaction
    op.execute("CREATE OR REPLACE FUNCTION cddlm_rows_changed() RETURNS trigger AS $$ "
               "BEGIN PERFORM pg_notify('cddlm_rows', TG_TABLE_NAME); RETURN NULL; END $$ "
               "LANGUAGE plpgsql")
    for table in TABLES:
        # a new row changes no row already read: inserts send nothing
        op.execute("CREATE TRIGGER %s_changed AFTER UPDATE OR DELETE OR TRUNCATE ON %s "
                   "FOR EACH STATEMENT EXECUTE FUNCTION cddlm_rows_changed()" % (table, table))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute("DROP TRIGGER IF EXISTS %s_changed ON %s" % (table, table))
    op.execute("DROP FUNCTION IF EXISTS cddlm_rows_changed()")
