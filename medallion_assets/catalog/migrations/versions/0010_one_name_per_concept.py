"""One name per concept: a target's `type` becomes `kind`, a stage's `source_id` becomes `input_id`.

`targets.type` said `lake` or `warehouse` (the warehouse system is named by MEDALLION_WAREHOUSE_URL, not by
the row), so it is the target's kind. `stages.source_id` named the stage's main input, which is a raw source
for a bronze stage and an upstream target for the others, so it is the stage's input. YAML may still spell
them the old way (the loader warns with file and line); the stored columns carry the new names only.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

RENAMES = {"targets": ("type", "kind"), "stages": ("source_id", "input_id")}


def upgrade() -> None:
    for table, (old, new) in RENAMES.items():
        with op.batch_alter_table(table) as batch:
            batch.alter_column(old, new_column_name=new)


def downgrade() -> None:
    for table, (old, new) in RENAMES.items():
        with op.batch_alter_table(table) as batch:
            batch.alter_column(new, new_column_name=old)
