"""Record every control flag change, however it is made.

Operators may flip a kill switch with the CLI or with a plain SQL UPDATE/INSERT on control_flags; triggers
in the database record both the same way, so the history cannot be bypassed. The CLI and the loader stamp
updated_by together with a fresh updated_at (microseconds); an UPDATE that leaves updated_at alone is a
plain SQL change, attributed to the database user (PostgreSQL) or to 'sql' (SQLite) and stamped, so the
row never keeps naming whoever flipped the flag before.

Revision ID: 0002
Revises: 0001
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

HISTORY = (
    "INSERT INTO control_flag_history "
    "(entity_type, entity_id, flag_name, old_value, new_value, reason, changed_by) "
    "VALUES (NEW.entity_type, NEW.entity_id, NEW.flag_name, {old}, NEW.flag_value, NEW.reason, {who})"
)
CHANGED = "(NEW.flag_value IS NOT OLD.flag_value OR NEW.reason IS NOT OLD.reason)"
CHANGED_POSTGRES = "NEW.flag_value IS DISTINCT FROM OLD.flag_value OR NEW.reason IS DISTINCT FROM OLD.reason"
NOW_SQLITE = "strftime('%Y-%m-%d %H:%M:%f', 'now')"

SQLITE = [
    f"""CREATE TRIGGER control_flags_inserted AFTER INSERT ON control_flags BEGIN
          {HISTORY.format(old="NULL", who="COALESCE(NULLIF(NEW.updated_by, ''), 'sql')")};
        END""",
    f"""CREATE TRIGGER control_flags_updated AFTER UPDATE ON control_flags
        WHEN NEW.updated_at IS NOT OLD.updated_at AND {CHANGED} BEGIN
          {HISTORY.format(old="OLD.flag_value", who="NEW.updated_by")};
        END""",
    f"""CREATE TRIGGER control_flags_updated_by_sql AFTER UPDATE ON control_flags
        WHEN NEW.updated_at IS OLD.updated_at BEGIN
          {HISTORY.format(old="OLD.flag_value", who="'sql'")};
          UPDATE control_flags SET updated_by = 'sql', updated_at = {NOW_SQLITE} WHERE rowid = NEW.rowid;
        END""",
]

POSTGRES = [
    """CREATE FUNCTION stamp_control_flag_sql_update() RETURNS trigger AS $$
        BEGIN
          IF NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN
            NEW.updated_by := session_user;
            NEW.updated_at := clock_timestamp();
          END IF;
          RETURN NEW;
        END $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER control_flags_stamp BEFORE UPDATE ON control_flags
        FOR EACH ROW EXECUTE FUNCTION stamp_control_flag_sql_update()""",
    f"""CREATE FUNCTION record_control_flag_change() RETURNS trigger AS $$
        BEGIN
          IF TG_OP = 'INSERT' THEN
            {HISTORY.format(old="NULL", who="COALESCE(NULLIF(NEW.updated_by, ''), session_user)")};
          ELSIF ({CHANGED_POSTGRES}) THEN
            {HISTORY.format(old="OLD.flag_value", who="NEW.updated_by")};
          END IF;
          RETURN NEW;
        END $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER control_flags_history AFTER INSERT OR UPDATE ON control_flags
        FOR EACH ROW EXECUTE FUNCTION record_control_flag_change()""",
]


def upgrade() -> None:
    for statement in POSTGRES if op.get_bind().dialect.name == "postgresql" else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER control_flags_history ON control_flags")
        op.execute("DROP TRIGGER control_flags_stamp ON control_flags")
        op.execute("DROP FUNCTION record_control_flag_change()")
        op.execute("DROP FUNCTION stamp_control_flag_sql_update()")
    else:
        for name in ("control_flags_inserted", "control_flags_updated", "control_flags_updated_by_sql"):
            op.execute(f"DROP TRIGGER {name}")
