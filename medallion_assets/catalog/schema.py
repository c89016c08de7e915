"""The catalog's tables (SQLAlchemy Core).

Tables that YAML fills are derived from their pydantic models in `models/`, so a field is declared once.
The runtime tables, which only the framework writes, are declared here. Migrations under `migrations/`
are the versioned history of this schema; `medallion catalog init` applies them.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    DateTime,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.types import TypeEngine

from medallion_assets.catalog.models import LOADABLE, Row

metadata = MetaData()


def conflict_insert(bind: Engine | Connection, table: Table) -> postgresql.Insert | sqlite.Insert:
    """An INSERT into `table` that can say what to do ON CONFLICT, in the catalog's dialect: PostgreSQL's in
    production, SQLite's by default (SQLAlchemy's portable INSERT has no ON CONFLICT)."""
    return (postgresql.insert if bind.dialect.name == "postgresql" else sqlite.insert)(table)


def _column_type(annotation: Any) -> TypeEngine[Any]:
    """Scalars map to their SQL type; lists, dicts and nested models are stored as JSON."""
    options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(options) == 1:
        annotation = options[0]
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is typing.Literal or annotation is str:
        return Text()
    scalars: dict[type, TypeEngine[Any]] = {bool: Boolean(), int: Integer(), float: Float()}
    return scalars.get(annotation, JSON())


def _table_for(name: str, model: type[Row]) -> Table:
    columns = [
        Column(
            field,
            _column_type(info.annotation),
            primary_key=field in model.key_fields,
            nullable=field not in model.key_fields,
        )
        for field, info in model.model_fields.items()
    ]
    return Table(
        name, metadata, *columns, Column("updated_at", DateTime(timezone=True), server_default=func.now())
    )


LOADABLE_TABLES: dict[str, Table] = {name: _table_for(name, model) for name, model in LOADABLE.items()}

audit_log = Table(
    "audit_log",
    metadata,
    Column("audit_id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64)),
    Column("pipeline_id", Text),
    Column("stage_name", Text),
    Column("dataset", Text),
    Column("event", Text, nullable=False, doc="stage, flag_change, healing, retry, reroute, halt"),
    Column("status", Text, nullable=False),
    Column("rows_read", Integer),
    Column("rows_written", Integer),
    Column("rows_quarantined", Integer),
    Column("duration_sec", Float),
    Column("error", Text),
    Column("details", JSON),
    Column("created_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
    Index("audit_log_stage_history", "pipeline_id", "stage_name", "event", "status"),
)

ingestion_bookmarks = Table(
    "ingestion_bookmarks",
    metadata,
    Column("source_id", Text, primary_key=True),
    Column("object_key", Text, primary_key=True),
    Column("etag", Text),
    Column("size_bytes", Integer),
    Column("batch_id", Text, nullable=False),
    Column("ingested_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
    # `pending` from just before a batch's commit to the lake until the ledger records its snapshot: a run
    # that finds a pending batch asks the lake whether it was committed (catalog/store.py, settle_batch).
    Column("state", Text, nullable=False, server_default="committed"),
    Column("snapshot_id", BigInteger),
)

# Every version of a lake table Medallion committed: which run made it, and the snapshot of each input it
# read. Rollback finds a run's version here, and the downstream versions built on a later one.
lake_commits = Table(
    "lake_commits",
    metadata,
    Column("commit_id", Integer, primary_key=True, autoincrement=True),
    Column("dataset", Text, nullable=False),
    Column("snapshot_id", BigInteger, nullable=False),
    Column("run_id", String(64)),
    Column("pipeline_id", Text),
    Column("stage_name", Text),
    Column("operation", Text, nullable=False, doc="append, publish, rollback"),
    Column("inputs", JSON, doc="input dataset → the snapshot this version was built from"),
    Column("fingerprint", Text, doc="the definition (catalog/versions.py) this version was made by"),
    Column("committed_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
    Index("lake_commits_dataset", "dataset", "commit_id"),
)

control_flag_history = Table(
    "control_flag_history",
    metadata,
    Column("change_id", Integer, primary_key=True, autoincrement=True),
    Column("entity_type", Text, nullable=False),
    Column("entity_id", Text, nullable=False),
    Column("flag_name", Text, nullable=False),
    Column("old_value", Boolean),
    Column("new_value", Boolean),
    Column("reason", Text),
    Column("changed_by", Text),
    Column("changed_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
)

dataset_recovery_paths = Table(
    "dataset_recovery_paths",
    metadata,
    Column("dataset", Text, primary_key=True),
    Column("path_rank", Integer, primary_key=True),
    Column("nodes", JSON, nullable=False),
    Column("cost", Float, nullable=False),
    Column("computed_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
)

lineage_versions = Table(
    "lineage_versions",
    metadata,
    Column("dataset", Text, primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("fingerprint", Text, nullable=False),
    Column("inputs", JSON, nullable=False),
    Column("transform_sql", Text),
    Column("created_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
    Column("via", Text, doc="the stage that makes the dataset: pipeline_id.stage_name"),
    Column("columns", JSON, doc="output columns: name → type, null when only the name is known"),
    Column(
        "definition",
        JSON,
        doc="inputs, transform, rules, output (and raw schema): what the fingerprint hashes",
    ),
)

throttle_buckets = Table(
    "throttle_buckets",
    metadata,
    Column("system_kind", Text, primary_key=True),
    Column("system_id", Text, primary_key=True),
    Column("metric", Text, primary_key=True, doc="rows_per_minute or bytes_per_hour"),
    Column("tokens", Float, nullable=False, doc="may go below zero after a batch bigger than the bucket"),
    Column("refilled_at", Float, nullable=False, doc="epoch seconds of the last refill"),
)

notification_deliveries = Table(
    "notification_deliveries",
    metadata,
    Column(
        "dedup_key", Text, primary_key=True, doc="notification id and event key: the same event never twice"
    ),
    Column("notification_id", Text, nullable=False),
    Column("event", Text, nullable=False),
    Column("message", JSON, nullable=False),
    Column("status", Text, nullable=False, doc="pending, delivered or gave_up"),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", Float, nullable=False, doc="epoch seconds: not retried before"),
    Column("last_error", Text),
    Column("created_at", DateTime(timezone=True), server_default=func.now(), nullable=False),
    Index("notification_deliveries_pending", "status", "next_attempt_at"),
)

catalog_changes = Table(
    "catalog_changes",
    metadata,
    Column("id", Integer, primary_key=True, doc="one row, id 1"),
    Column(
        "counter",
        BigInteger,
        nullable=False,
        doc="moved by triggers on every loadable table (migration 0011), whoever writes: store.change_count",
    ),
)
