"""Warehouse loaders, one transaction per load: gold tables into DuckDB (the default), PostgreSQL or Redshift.

Every loader offers the same two modes. ``replace`` makes the table's content exactly the batch; ``merge``
replaces the rows whose keys match a batch row and inserts the others, and with a ``delete_flag`` column
deletes the rows of the keys it flags (gold's changed groups: upserts and deletes in one load). Either way,
loading the same batch twice leaves no duplicates, and a load that fails leaves the table as it was.

A batch is a ``pyarrow.Table`` or a stream of ``pyarrow.RecordBatch`` (a ``RecordBatchReader``, or any
iterable of batches sharing one schema), which is copied batch by batch into the same single transaction, so a
caller never has to assemble one big table.

Known faults have errors of their own, so that the healing actions can answer them:

- ``WarehouseConnectionLost``: the connection died during a load or query, which was rolled back;
  ``Warehouse.reconnect()`` opens a new one, after which the same load can simply run again.
- ``LeftoverStagingTable``: a merge stages its batch in ``<table>__medallion_stage``, next to the target,
  created and dropped inside the load's transaction. One that exists before a merge starts was left behind
  (by a crashed load outside a transaction, or an older loader); ``Warehouse.drop_staging(table)`` drops it.
- ``SchemaDrift``: the batch has columns the table lacks; ``load(..., evolve=True)`` adds them, nullable.
- ``BreakingSchemaChange``: a column's type changed, or a NOT NULL column is missing; never evolved.

Where each part lives:

- ``base``: ``Warehouse``, the load every adapter runs (checks, statements, one transaction, error reporting);
- ``duckdb_file``, ``postgres``, ``redshift``: the adapters, which say how to connect and how a batch reaches
  the table;
- ``urls``: ``warehouse_from_url``, which picks the adapter and imports it (and its driver) only then;
- ``sql``: the statements, as pure functions; ``column_types``: Arrow types as SQL types, and schema drift;
- ``batches``: what a load takes, and its checks before any SQL; ``csv_stream``: batches as CSV for COPY;
  ``s3_staging``: batches staged as parquet on S3 for Redshift;
- ``errors``: the errors above.

Callers import from this package; its modules are how it is arranged inside.
"""

from medallion_assets.storage.warehouse.base import LoadResult, Warehouse
from medallion_assets.storage.warehouse.batches import Batch, StagedParquet
from medallion_assets.storage.warehouse.column_types import column_definitions, columns_to_add, sql_type
from medallion_assets.storage.warehouse.errors import (
    BreakingSchemaChange,
    LeftoverStagingTable,
    SchemaDrift,
    WarehouseConnectionLost,
    WarehouseError,
)
from medallion_assets.storage.warehouse.s3_staging import staged_parquet
from medallion_assets.storage.warehouse.sql import (
    DELETE_FLAG,
    Dialect,
    LoadPlan,
    Mode,
    load_statements,
    redshift_load_statements,
    staging_table,
)
from medallion_assets.storage.warehouse.urls import SCHEMES, warehouse_from_url

__all__ = [
    "DELETE_FLAG",
    "SCHEMES",
    "Batch",
    "BreakingSchemaChange",
    "Dialect",
    "LeftoverStagingTable",
    "LoadPlan",
    "LoadResult",
    "Mode",
    "SchemaDrift",
    "StagedParquet",
    "Warehouse",
    "WarehouseConnectionLost",
    "WarehouseError",
    "column_definitions",
    "columns_to_add",
    "load_statements",
    "redshift_load_statements",
    "sql_type",
    "staged_parquet",
    "staging_table",
    "warehouse_from_url",
]
