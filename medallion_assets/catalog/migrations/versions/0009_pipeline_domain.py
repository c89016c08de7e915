"""Pipelines name their domain: the Dagster code location their assets load in.

Revision ID: 0009
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipelines") as batch:
        batch.add_column(sa.Column("domain", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pipelines") as batch:
        batch.drop_column("domain")
