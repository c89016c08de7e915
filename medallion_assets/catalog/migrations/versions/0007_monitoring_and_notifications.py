"""Monitoring: SLAs on pipelines and targets, volume bands and data-quality thresholds on pipelines, the
notifications table, the outbox of notification deliveries (one row per dedup key), and an index for a
stage's audit history.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pipelines") as batch:
        batch.add_column(sa.Column("sla", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("volume_band", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("min_dq_rate", sa.Float(), nullable=True))
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("sla", sa.JSON(), nullable=True))
    op.create_table(
        "notifications",
        sa.Column("notification_id", sa.Text(), nullable=False),
        sa.Column("events", sa.JSON(), nullable=True),
        sa.Column("scope", sa.Text(), nullable=True),
        sa.Column("scope_id", sa.Text(), nullable=True),
        sa.Column("channel", sa.Text(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=True),
        sa.Column("max_attempts", sa.Integer(), nullable=True),
        sa.Column("backoff_sec", sa.Float(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("notification_id"),
    )
    op.create_table(
        "notification_deliveries",
        sa.Column("dedup_key", sa.Text(), nullable=False),
        sa.Column("notification_id", sa.Text(), nullable=False),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("message", sa.JSON(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("dedup_key"),
    )
    op.create_index(
        "notification_deliveries_pending", "notification_deliveries", ["status", "next_attempt_at"]
    )
    # A stage's recent history (volume bands, on every stage run) without scanning the whole log.
    op.create_index("audit_log_stage_history", "audit_log", ["pipeline_id", "stage_name", "event", "status"])


def downgrade() -> None:
    op.drop_index("audit_log_stage_history", "audit_log")
    op.drop_index("notification_deliveries_pending", "notification_deliveries")
    op.drop_table("notification_deliveries")
    op.drop_table("notifications")
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("sla")
    with op.batch_alter_table("pipelines") as batch:
        batch.drop_column("min_dq_rate")
        batch.drop_column("volume_band")
        batch.drop_column("sla")
