"""A warehouse target's contract version: from 2 on, its table is `<location>_v<N>`.

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, never a batch table copy, which would drop 0011's change-count trigger on SQLite.
    op.add_column("targets", sa.Column("version", sa.Integer))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("version")
