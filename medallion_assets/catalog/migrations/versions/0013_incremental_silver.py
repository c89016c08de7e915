"""Incremental silver: a target's change feed (CDC) and slowly changing dimension fields, and the definition
fingerprint each lake commit was made by (a changed definition forces a full refresh).

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
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("cdc", sa.JSON))
        batch.add_column(sa.Column("scd_type", sa.Integer))
        batch.add_column(sa.Column("track_history_columns", sa.JSON))
        batch.add_column(sa.Column("track_history_except", sa.JSON))
        batch.add_column(sa.Column("validity_columns", sa.JSON))
    with op.batch_alter_table("lake_commits") as batch:
        batch.add_column(sa.Column("fingerprint", sa.Text))


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
