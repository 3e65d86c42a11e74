"""One head again: the multi-host tables (0004) and the listing indexes (0004b) were written side
by side; both apply, in either order, before this.

Revision ID: 0005
Revises: 0004, 0004b
"""

revision = '0005'
down_revision = ('0004', '0004b')
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
