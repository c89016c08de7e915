"""The lake becomes Iceberg tables: a target's table layout, table maintenance rows, a pending state and the
snapshot of each ingested batch, and the record of every lake commit.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BUMP = "UPDATE catalog_changes SET counter = counter + 1 WHERE id = 1"


def upgrade() -> None:
    # Plain ADD COLUMNs, never a batch table copy, which would drop 0011's change-count trigger on SQLite.
    op.add_column("targets", sa.Column("lake_table", sa.JSON))
    op.add_column(
        "ingestion_bookmarks", sa.Column("state", sa.Text, nullable=False, server_default="committed")
    )
    op.add_column("ingestion_bookmarks", sa.Column("snapshot_id", sa.BigInteger))
    op.create_table(
        "table_maintenance",
        sa.Column("dataset", sa.Text, primary_key=True),
        sa.Column("compaction", sa.Text),
        sa.Column("target_file_size_bytes", sa.Integer),
        sa.Column("expire_after_days", sa.Float),
        sa.Column("keep_snapshots", sa.Integer),
        sa.Column("remove_orphans_after_days", sa.Float),
        sa.Column("schedule", sa.Text),
        sa.Column("enabled", sa.Boolean),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
    )
    # A loadable table moves the catalog's change counter, as every other does (migration 0011).
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE TRIGGER table_maintenance_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "
            "table_maintenance FOR EACH STATEMENT EXECUTE FUNCTION catalog_changed()"
        )
    else:
        for event in ("INSERT", "UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER table_maintenance_changed_{event.lower()} AFTER {event} "
                f"ON table_maintenance BEGIN {BUMP}; END"
            )
    op.create_table(
        "lake_commits",
        sa.Column("commit_id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("dataset", sa.Text, nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("pipeline_id", sa.Text),
        sa.Column("stage_name", sa.Text),
        sa.Column("operation", sa.Text, nullable=False),
        sa.Column("inputs", sa.JSON),
        sa.Column("committed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )
    op.create_index("lake_commits_dataset", "lake_commits", ["dataset", "commit_id"])


def downgrade() -> None:
    op.drop_index("lake_commits_dataset", "lake_commits")
    op.drop_table("lake_commits")
    op.drop_table("table_maintenance")
    with op.batch_alter_table("ingestion_bookmarks") as batch:
        batch.drop_column("snapshot_id")
        batch.drop_column("state")
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("lake_table")
