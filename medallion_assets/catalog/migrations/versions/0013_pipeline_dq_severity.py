"""Pipelines say how a data-quality rate below min_dq_rate counts: a warning (the default) or an error.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, never a batch table copy, which would drop 0011's change-count trigger on SQLite.
    op.add_column("pipelines", sa.Column("dq_severity", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pipelines") as batch:
        batch.drop_column("dq_severity")
