"""Catalog fixes of the first hour: a SQL UPDATE's updated_by kept, type warehouse, column descriptions.

A plain SQL UPDATE on control_flags that names its author (`SET updated_by = 'alice'`) keeps that name.

0002 attributed every UPDATE that leaves updated_at alone to the database user (PostgreSQL) or to 'sql'
(SQLite), even when the statement set updated_by itself. Now the statement's updated_by is kept; the database
user or 'sql' is recorded only when the statement leaves updated_by as it was (or empties it). Migrations are
frozen history, so the trigger text is restated here rather than imported from 0002.

The target type `redshift` named the warehouse whatever it is (DuckDB, PostgreSQL or Redshift); stored rows
become `warehouse`, which the models now use (`redshift` stays a deprecated alias in YAML).

Targets describe their columns (`column_descriptions`), for the Dagster UI's column schema.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

HISTORY = (
    "INSERT INTO control_flag_history "
    "(entity_type, entity_id, flag_name, old_value, new_value, reason, changed_by) "
    "VALUES (NEW.entity_type, NEW.entity_id, NEW.flag_name, OLD.flag_value, NEW.flag_value, "
    "NEW.reason, {who})"
)
NOW_SQLITE = "strftime('%Y-%m-%d %H:%M:%f', 'now')"


def _sqlite_trigger(who: str) -> str:
    return f"""CREATE TRIGGER control_flags_updated_by_sql AFTER UPDATE ON control_flags
        WHEN NEW.updated_at IS OLD.updated_at BEGIN
          {HISTORY.format(who=who)};
          UPDATE control_flags SET updated_by = {who}, updated_at = {NOW_SQLITE} WHERE rowid = NEW.rowid;
        END"""


def _postgres_stamp(set_by: str) -> str:
    return f"""CREATE OR REPLACE FUNCTION stamp_control_flag_sql_update() RETURNS trigger AS $$
        BEGIN
          IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
            {set_by}
            NEW.updated_at := clock_timestamp();
          END IF;
          RETURN NEW;
        END $$ LANGUAGE plpgsql"""


STATEMENT_AUTHOR_SQLITE = (
    "CASE WHEN NEW.updated_by IS NOT OLD.updated_by AND COALESCE(NEW.updated_by, '') <> '' "
    "THEN NEW.updated_by ELSE 'sql' END"
)
STATEMENT_AUTHOR_POSTGRES = (
    "IF NEW.updated_by IS NOT DISTINCT FROM OLD.updated_by OR COALESCE(NEW.updated_by, '') = '' THEN\n"
    "              NEW.updated_by := session_user;\n"
    "            END IF;"
)


def upgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.add_column(sa.Column("column_descriptions", sa.JSON(), nullable=True))
    op.execute("UPDATE targets SET type = 'warehouse' WHERE type = 'redshift'")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_postgres_stamp(STATEMENT_AUTHOR_POSTGRES))
    else:
        op.execute("DROP TRIGGER control_flags_updated_by_sql")
        op.execute(_sqlite_trigger(STATEMENT_AUTHOR_SQLITE))


def downgrade() -> None:
    with op.batch_alter_table("targets") as batch:
        batch.drop_column("column_descriptions")
    op.execute("UPDATE targets SET type = 'redshift' WHERE type = 'warehouse'")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_postgres_stamp("NEW.updated_by := session_user;"))
    else:
        op.execute("DROP TRIGGER control_flags_updated_by_sql")
        op.execute(_sqlite_trigger("'sql'"))
