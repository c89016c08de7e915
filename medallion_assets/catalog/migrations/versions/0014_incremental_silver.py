"""Incremental silver: a target's change feed (CDC) and slowly changing dimension fields, and the definition
fingerprint each lake commit was made by (a changed definition forces a full refresh).

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs, never a batch table copy, which would drop 0011's change-count trigger on SQLite.
    for column in (
        sa.Column("cdc", sa.JSON),
        sa.Column("scd_type", sa.Integer),
        sa.Column("track_history_columns", sa.JSON),
        sa.Column("track_history_except", sa.JSON),
        sa.Column("validity_columns", sa.JSON),
    ):
        op.add_column("targets", column)
    op.add_column("lake_commits", sa.Column("fingerprint", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("lake_commits") as batch:
        batch.drop_column("fingerprint")
    with op.batch_alter_table("targets") as batch:
        for column in (
            "validity_columns",
            "track_history_except",
            "track_history_columns",
            "scd_type",
            "cdc",
        ):
            batch.drop_column(column)
