"""The warehouse's errors: one per known fault, so that the healing actions can answer each."""

from __future__ import annotations

from collections.abc import Mapping

from medallion_assets.storage.warehouse.sql import staging_table


class WarehouseError(RuntimeError):
    """The warehouse refused a load or a query; a failed load has left the table as it was."""


class WarehouseConnectionLost(WarehouseError):
    """The connection died during a load or a query, which the warehouse rolled back.

    ``Warehouse.reconnect()`` opens a new connection; every load can then simply run again, since loading the
    same batch twice leaves no duplicates. (Were the connection lost during the COMMIT itself, the load may
    have committed after all; loading it again is just as safe.)
    """


class LeftoverStagingTable(WarehouseError):
    """A merge found its staging table already there: an earlier load left it behind."""

    def __init__(self, table: str) -> None:
        self.table, self.staging = table, staging_table(table)
        super().__init__(
            f"loading {table} failed: the staging table {self.staging} was left behind by an earlier load; "
            f"drop it with drop_staging({table!r}) and load again"
        )


class SchemaDrift(WarehouseError):
    """The batch has columns the table lacks; ``columns`` maps each to its SQL type."""

    def __init__(self, table: str, columns: Mapping[str, str]) -> None:
        self.table, self.columns = table, dict(columns)
        listed = ", ".join(f"{name} {sql}" for name, sql in columns.items())
        super().__init__(
            f"loading {table} failed: the batch has columns that {table} lacks: {listed}; "
            "load with evolve=True to add them as nullable columns"
        )


class BreakingSchemaChange(WarehouseError):
    """A batch column's type differs from the table's, or a NOT NULL column of the table is missing
    (``new`` None)."""

    def __init__(self, table: str, column: str, old: str, new: str | None) -> None:
        self.table, self.column, self.old, self.new = table, column, old, new
        change = (
            f"is {old} in the table but {new} in the batch"
            if new is not None
            else f"is {old} NOT NULL in the table but missing from the batch"
        )
        super().__init__(
            f"loading {table} failed: breaking schema change: column {column} {change}; "
            "only new nullable columns are added (evolve=True), so change the table by hand"
        )
