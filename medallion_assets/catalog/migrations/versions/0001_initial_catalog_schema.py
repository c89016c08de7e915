"""initial catalog schema

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("audit_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("pipeline_id", sa.Text(), nullable=True),
        sa.Column("stage_name", sa.Text(), nullable=True),
        sa.Column("dataset", sa.Text(), nullable=True),
        sa.Column("event", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("rows_read", sa.Integer(), nullable=True),
        sa.Column("rows_written", sa.Integer(), nullable=True),
        sa.Column("rows_quarantined", sa.Integer(), nullable=True),
        sa.Column("duration_sec", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("audit_id"),
    )
    op.create_table(
        "column_lineage",
        sa.Column("downstream", sa.Text(), nullable=False),
        sa.Column("downstream_column", sa.Text(), nullable=False),
        sa.Column("upstream", sa.Text(), nullable=False),
        sa.Column("upstream_column", sa.Text(), nullable=False),
        sa.Column("transformation", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("downstream", "downstream_column", "upstream", "upstream_column"),
    )
    op.create_table(
        "control_flag_history",
        sa.Column("change_id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("entity_type", sa.Text(), nullable=False),
        sa.Column("entity_id", sa.Text(), nullable=False),
        sa.Column("flag_name", sa.Text(), nullable=False),
        sa.Column("old_value", sa.Boolean(), nullable=True),
        sa.Column("new_value", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("changed_by", sa.Text(), nullable=True),
        sa.Column(
            "changed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("change_id"),
    )
    op.create_table(
        "control_flags",
        sa.Column("entity_type", sa.Text(), nullable=False),
        sa.Column("entity_id", sa.Text(), nullable=False),
        sa.Column("flag_name", sa.Text(), nullable=False),
        sa.Column("flag_value", sa.Boolean(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("updated_by", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("entity_type", "entity_id", "flag_name"),
    )
    op.create_table(
        "dataset_lineage",
        sa.Column("upstream", sa.Text(), nullable=False),
        sa.Column("downstream", sa.Text(), nullable=False),
        sa.Column("via", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=True),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column("is_default", sa.Boolean(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("upstream", "downstream", "via"),
    )
    op.create_table(
        "dataset_recovery_paths",
        sa.Column("dataset", sa.Text(), nullable=False),
        sa.Column("path_rank", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.Column(
            "computed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("dataset", "path_rank"),
    )
    op.create_table(
        "healing_actions",
        sa.Column("healing_id", sa.Text(), nullable=False),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("message_pattern", sa.Text(), nullable=True),
        sa.Column("layer", sa.Text(), nullable=True),
        sa.Column("pipeline_id", sa.Text(), nullable=True),
        sa.Column("stage_name", sa.Text(), nullable=True),
        sa.Column("action", sa.Text(), nullable=True),
        sa.Column("params", sa.JSON(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("healing_id"),
    )
    op.create_table(
        "ingestion_bookmarks",
        sa.Column("source_id", sa.Text(), nullable=False),
        sa.Column("object_key", sa.Text(), nullable=False),
        sa.Column("etag", sa.Text(), nullable=True),
        sa.Column("size_bytes", sa.Integer(), nullable=True),
        sa.Column("batch_id", sa.Text(), nullable=False),
        sa.Column(
            "ingested_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("source_id", "object_key"),
    )
    op.create_table(
        "lineage_versions",
        sa.Column("dataset", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("transform_sql", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("dataset", "version"),
    )
    op.create_table(
        "pipeline_profiles",
        sa.Column("pipeline_id", sa.Text(), nullable=False),
        sa.Column("profile_id", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("pipeline_id"),
    )
    op.create_table(
        "pipelines",
        sa.Column("pipeline_id", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=True),
        sa.Column("default_retry_id", sa.Text(), nullable=True),
        sa.Column("criticality", sa.Text(), nullable=True),
        sa.Column("expected_cost", sa.Float(), nullable=True),
        sa.Column("schedule", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("pipeline_id"),
    )
    op.create_table(
        "profile_settings",
        sa.Column("profile_id", sa.Text(), nullable=False),
        sa.Column("setting", sa.Text(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("profile_id", "setting"),
    )
    op.create_table(
        "profiles",
        sa.Column("profile_id", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("is_default", sa.Boolean(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("profile_id"),
    )
    op.create_table(
        "retry_policies",
        sa.Column("retry_id", sa.Text(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=True),
        sa.Column("backoff_sec", sa.Float(), nullable=True),
        sa.Column("backoff", sa.Text(), nullable=True),
        sa.Column("jitter_sec", sa.Float(), nullable=True),
        sa.Column("max_delay_sec", sa.Float(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("retry_id"),
    )
    op.create_table(
        "sources",
        sa.Column("source_id", sa.Text(), nullable=False),
        sa.Column("s3_path", sa.Text(), nullable=True),
        sa.Column("file_format", sa.Text(), nullable=True),
        sa.Column("columns", sa.JSON(), nullable=True),
        sa.Column("options", sa.JSON(), nullable=True),
        sa.Column("system", sa.Text(), nullable=True),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("source_id"),
    )
    op.create_table(
        "stages",
        sa.Column("pipeline_id", sa.Text(), nullable=False),
        sa.Column("stage_order", sa.Integer(), nullable=False),
        sa.Column("stage_name", sa.Text(), nullable=True),
        sa.Column("source_id", sa.Text(), nullable=True),
        sa.Column("inputs", sa.JSON(), nullable=True),
        sa.Column("target_id", sa.Text(), nullable=True),
        sa.Column("transform_sql", sa.Text(), nullable=True),
        sa.Column("sql_dialect", sa.Text(), nullable=True),
        sa.Column("validation_set_id", sa.Text(), nullable=True),
        sa.Column("retry_id", sa.Text(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("pipeline_id", "stage_order"),
    )
    op.create_table(
        "targets",
        sa.Column("target_id", sa.Text(), nullable=False),
        sa.Column("layer", sa.Text(), nullable=True),
        sa.Column("type", sa.Text(), nullable=True),
        sa.Column("location", sa.Text(), nullable=True),
        sa.Column("columns", sa.JSON(), nullable=True),
        sa.Column("keys", sa.JSON(), nullable=True),
        sa.Column("keep_latest_by", sa.Text(), nullable=True),
        sa.Column("load_mode", sa.Text(), nullable=True),
        sa.Column("system", sa.Text(), nullable=True),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("target_id"),
    )
    op.create_table(
        "throttles",
        sa.Column("system_kind", sa.Text(), nullable=False),
        sa.Column("system_id", sa.Text(), nullable=False),
        sa.Column("metric", sa.Text(), nullable=False),
        sa.Column("limit_value", sa.Float(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("system_kind", "system_id", "metric"),
    )
    op.create_table(
        "validation_rules",
        sa.Column("rule_set_id", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("check_def", sa.JSON(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("(CURRENT_TIMESTAMP)"),
            nullable=True,
        ),
        sa.PrimaryKeyConstraint("rule_set_id"),
    )


def downgrade() -> None:
    op.drop_table("validation_rules")
    op.drop_table("throttles")
    op.drop_table("targets")
    op.drop_table("stages")
    op.drop_table("sources")
    op.drop_table("retry_policies")
    op.drop_table("profiles")
    op.drop_table("profile_settings")
    op.drop_table("pipelines")
    op.drop_table("pipeline_profiles")
    op.drop_table("lineage_versions")
    op.drop_table("ingestion_bookmarks")
    op.drop_table("healing_actions")
    op.drop_table("dataset_recovery_paths")
    op.drop_table("dataset_lineage")
    op.drop_table("control_flags")
    op.drop_table("control_flag_history")
    op.drop_table("column_lineage")
    op.drop_table("audit_log")
