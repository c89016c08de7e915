"""Unit tests of stages as catalog rows (`medallion test`): input rows and what the stage must make of them.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

BUMP = "UPDATE catalog_changes SET counter = counter + 1 WHERE id = 1"


def upgrade() -> None:
    op.create_table(
        "stage_tests",
        sa.Column("pipeline_id", sa.Text, primary_key=True),
        sa.Column("stage_name", sa.Text, primary_key=True),
        sa.Column("test_name", sa.Text, primary_key=True),
        sa.Column("description", sa.Text),
        sa.Column("given", sa.JSON),
        sa.Column("expect_rows", sa.JSON),
        sa.Column("expect_quarantined", sa.JSON),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
    )
    # A loadable table moves the catalog's change counter, as every other does (migration 0011).
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE TRIGGER stage_tests_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "
            "stage_tests FOR EACH STATEMENT EXECUTE FUNCTION catalog_changed()"
        )
    else:
        for event in ("INSERT", "UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER stage_tests_changed_{event.lower()} AFTER {event} "
                f"ON stage_tests BEGIN {BUMP}; END"
            )


def downgrade() -> None:
    op.drop_table("stage_tests")
