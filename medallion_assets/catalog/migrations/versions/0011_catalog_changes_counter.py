"""A counter of changes to the loadable tables, moved by database triggers, however the change is made.

Whoever keeps something derived from the catalog's structure between reads (`lineage serve` keeps the lineage
graph and the recovery paths) compares the counter with the one it saw last, instead of reading the catalog
again: a write through Medallion, another process's load and an operator's plain SQL all move it. The runtime
tables written on every run (audit_log, ingestion_bookmarks, throttle_buckets, lineage_versions, flag history)
have no trigger, so a busy catalog does not look changed. A migration that adds a loadable table gives it the
same triggers (tests/test_catalog.py checks every loadable table has them).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# The loadable tables at this revision (catalog/models.LOADABLE), named here: the migration stays as written.
TABLES = (
    "retry_policies",
    "pipelines",
    "sources",
    "targets",
    "validation_rules",
    "stages",
    "healing_actions",
    "control_flags",
    "profiles",
    "pipeline_profiles",
    "profile_settings",
    "throttles",
    "dataset_lineage",
    "column_lineage",
    "external_lineage",
    "notifications",
)
BUMP = "UPDATE catalog_changes SET counter = counter + 1 WHERE id = 1"


def upgrade() -> None:
    op.create_table(
        "catalog_changes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("counter", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO catalog_changes (id, counter) VALUES (1, 0)")
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"CREATE FUNCTION catalog_changed() RETURNS trigger AS $$ BEGIN {BUMP}; RETURN NULL; END $$ "
            "LANGUAGE plpgsql"
        )
        for table in TABLES:
            # Once per statement: a load of 10,000 rows moves the counter once, not 10,000 times.
            op.execute(
                f"CREATE TRIGGER {table}_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION catalog_changed()"
            )
        return
    for table in TABLES:
        for event in ("INSERT", "UPDATE", "DELETE"):  # SQLite's triggers are per row only
            op.execute(
                f"CREATE TRIGGER {table}_changed_{event.lower()} AFTER {event} ON {table} BEGIN {BUMP}; END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"DROP TRIGGER {table}_changed ON {table}")
        op.execute("DROP FUNCTION catalog_changed()")
    else:
        for table in TABLES:
            for event in ("insert", "update", "delete"):
                op.execute(f"DROP TRIGGER {table}_changed_{event}")
    op.drop_table("catalog_changes")
