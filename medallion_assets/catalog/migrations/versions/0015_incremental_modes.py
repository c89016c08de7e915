"""A target's incremental mode: `full`, or the day column its merges search by (`{by: COLUMN}`).

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, never a batch table copy, which would drop 0011's change-count trigger on SQLite.
    op.add_column("targets", sa.Column("incremental", sa.JSON))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("incremental")
