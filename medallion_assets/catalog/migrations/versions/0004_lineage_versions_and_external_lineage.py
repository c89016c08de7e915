"""Lineage versions say which stage made them, their output columns and their full definition (so a diff can
name what changed besides inputs); external_lineage holds the edges other tools report in OpenLineage events.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("lineage_versions") as batch:
        batch.add_column(sa.Column("via", sa.Text(), nullable=True))
        batch.add_column(sa.Column("columns", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("definition", sa.JSON(), nullable=True))
    op.create_table(
        "external_lineage",
        sa.Column("upstream", sa.Text(), nullable=False),
        sa.Column("downstream", sa.Text(), nullable=False),
        sa.Column("job", sa.Text(), nullable=False),
        sa.Column("producer", sa.Text(), nullable=True),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.Column("event_time", sa.Text(), nullable=True),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("upstream", "downstream", "job"),
    )


def downgrade() -> None:
    op.drop_table("external_lineage")
    with op.batch_alter_table("lineage_versions") as batch:
        batch.drop_column("definition")
        batch.drop_column("columns")
        batch.drop_column("via")
