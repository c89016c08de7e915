"""Token buckets for rate throttles, shared by every process that touches a system.

One row per (system_kind, system_id, metric): the tokens left and when they were last refilled (epoch
seconds, so the refill arithmetic runs inside one atomic UPDATE on SQLite and PostgreSQL alike).

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "throttle_buckets",
        sa.Column("system_kind", sa.Text(), nullable=False),
        sa.Column("system_id", sa.Text(), nullable=False),
        sa.Column("metric", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Float(), nullable=False),
        sa.Column("refilled_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("system_kind", "system_id", "metric"),
    )


def downgrade() -> None:
    op.drop_table("throttle_buckets")
