"""Lake tables' names and layouts: which table a target is, and the partitioning, order and properties the
catalog gives it, checked before anything runs and written as SQL only after the check.

Pure Python (no Spark, no pyiceberg): `medallion catalog validate` checks layouts through `check_layouts`
without loading either. Iceberg's own vocabulary (transforms, property names) lives here and in the other
modules of storage/lake/, never above.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from medallion_assets.catalog.models import LakeTable, Row, Target
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.naming import IDENTIFIER, INGESTION_COLUMNS, check_identifier, dataset_name

# The lake's table format: what Dagster shows as a lake dataset's kind.
TABLE_FORMAT = "iceberg"
QUARANTINE_SUFFIX = "_quarantine"
# Iceberg's partition transforms: name → how many leading integer arguments it takes before the column.
_TRANSFORMS = {"identity": 0, "years": 0, "months": 0, "days": 0, "hours": 0, "bucket": 1, "truncate": 1}
_TRANSFORM = re.compile(r"\s*(\w+)\s*\(\s*(?:(\d{1,9})\s*,\s*)?(\w+)\s*\)\s*")
_SORT = re.compile(r"\s*(\w+)(?:\s+(ASC|DESC))?(?:\s+NULLS\s+(FIRST|LAST))?\s*", re.IGNORECASE)


def _positive_int(value: str) -> bool:
    return value.isdigit() and int(value) > 0


def _one_of(*allowed: str) -> Callable[[str], bool]:
    return lambda value: value in allowed


# The table properties a catalog row may set, each with the values Iceberg accepts. Properties Medallion
# relies on (its write modes, branches) are not among them: a row cannot switch them off.
PROPERTIES: dict[str, tuple[Callable[[str], bool], str]] = {
    "format-version": (_one_of("1", "2", "3"), "1, 2 or 3"),
    "write.target-file-size-bytes": (_positive_int, "a positive number of bytes"),
    "write.format.default": (_one_of("parquet", "orc", "avro"), "parquet, orc or avro"),
    "write.parquet.compression-codec": (
        _one_of("zstd", "snappy", "gzip", "lz4", "brotli", "uncompressed"),
        "zstd, snappy, gzip, lz4, brotli or uncompressed",
    ),
    "write.distribution-mode": (_one_of("none", "hash", "range"), "none, hash or range"),
    "write.delete.mode": (_one_of("copy-on-write", "merge-on-read"), "copy-on-write or merge-on-read"),
    "write.update.mode": (_one_of("copy-on-write", "merge-on-read"), "copy-on-write or merge-on-read"),
    "write.merge.mode": (_one_of("copy-on-write", "merge-on-read"), "copy-on-write or merge-on-read"),
    "write.metadata.previous-versions-max": (_positive_int, "a positive number"),
    "write.metadata.delete-after-commit.enabled": (_one_of("true", "false"), "true or false"),
    "history.expire.max-snapshot-age-ms": (_positive_int, "a positive number of milliseconds"),
    "history.expire.min-snapshots-to-keep": (_positive_int, "a positive number"),
    "commit.retry.num-retries": (_positive_int, "a positive number"),
    "read.split.target-size": (_positive_int, "a positive number of bytes"),
}


@dataclass(frozen=True)
class TableRef:
    """A lake table, `<catalog>.<namespace>.<name>`, every part a plain identifier."""

    catalog: str
    namespace: str
    name: str

    def __post_init__(self) -> None:
        for part, what in ((self.catalog, "catalog"), (self.namespace, "namespace"), (self.name, "table")):
            check_identifier(part, f"lake {what}")

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.name}"

    @property
    def sql(self) -> str:
        """The name quoted for Spark SQL (each part checked, so no backquote can be inside)."""
        return f"`{self.catalog}`.`{self.namespace}`.`{self.name}`"

    @property
    def in_catalog(self) -> str:
        """`namespace.name`, as Iceberg's procedures take it."""
        return f"{self.namespace}.{self.name}"

    def branch(self, branch: str) -> str:
        """The name that reads or writes branch `branch` of the table (Iceberg's `branch_<name>` suffix)."""
        return f"{self.sql}.`branch_{check_identifier(branch, 'branch')}`"

    def quarantine(self) -> TableRef:
        """Where the target's rejected rows are kept: next to it, suffixed."""
        return TableRef(self.catalog, self.namespace, self.name + QUARANTINE_SUFFIX)


def table_of(target: Target) -> TableRef:
    layout = target.lake_table or LakeTable()
    return TableRef(layout.catalog, layout.namespace or target.layer, layout.name or dataset_name(target))


def partition_fields(layout: LakeTable) -> list[str]:
    """Each partition entry of a checked layout as Iceberg's Spark SQL writes it, e.g. days(`event_ts`)."""
    fields = []
    for entry in layout.partition_by:
        transform, argument, column = _transform(entry)
        inner = f"{argument}, `{column}`" if argument else f"`{column}`"
        fields.append(f"`{column}`" if transform == "identity" else f"{transform}({inner})")
    return fields


def day_partition(target: Target) -> str | None:
    """The column whose days partition the target's table: the first entry `days(column)`, or an identity
    entry on a column declared `date`; None when the table is not kept by day. Replacing a range of days
    then replaces whole partitions, without reading a file of another day."""
    declared = {name: kind.strip().lower() for name, kind in (target.columns or {}).items()}
    for entry in (target.lake_table or LakeTable()).partition_by:
        transform, _, column = _transform(entry)
        if transform == "days" or (transform == "identity" and declared.get(column) == "date"):
            return column
    return None


def partition_clause(layout: LakeTable) -> str:
    """`PARTITIONED BY (…)` for a checked layout, or nothing."""
    fields = partition_fields(layout)
    return f" PARTITIONED BY ({', '.join(fields)})" if fields else ""


def sort_clause(layout: LakeTable) -> str | None:
    """`WRITE ORDERED BY …` for a checked layout, or None."""
    if not layout.sort_by:
        return None
    parts = []
    for entry in layout.sort_by:
        column, direction, nulls = _sort(entry)
        parts.append(" ".join([f"`{column}`", direction, *([f"NULLS {nulls}"] if nulls else [])]))
    return "WRITE ORDERED BY " + ", ".join(parts)


def properties_clause(properties: dict[str, str]) -> str:
    """`'key'='value', …` for checked properties (neither keys nor values may hold a quote)."""
    return ", ".join(f"'{key}'='{value}'" for key, value in properties.items())


def _transform(entry: str) -> tuple[str, str | None, str]:
    found = _TRANSFORM.fullmatch(entry)
    if found:
        name, argument, column = found.group(1).lower(), found.group(2), found.group(3)
        if name not in _TRANSFORMS:
            raise ValueError(f"partition transform {name!r} is unknown; use {', '.join(_TRANSFORMS)}")
        if bool(argument) != bool(_TRANSFORMS[name]):
            form = f"{name}(N, column)" if _TRANSFORMS[name] else f"{name}(column)"
            raise ValueError(f"partition entry {entry!r}: write it {form}")
        return name, argument, check_identifier(column, "partition column")
    if IDENTIFIER.fullmatch(entry.strip()):
        return "identity", None, entry.strip()
    raise ValueError(f"partition entry {entry!r} is neither a column nor a transform such as days(column)")


def _sort(entry: str) -> tuple[str, str, str | None]:
    found = _SORT.fullmatch(entry)
    if not found or not IDENTIFIER.fullmatch(found.group(1)):
        raise ValueError(f"sort entry {entry!r} is not 'column [ASC|DESC] [NULLS FIRST|LAST]'")
    nulls = found.group(3)
    return found.group(1), (found.group(2) or "ASC").upper(), nulls.upper() if nulls else None


def layout_problems(layout: LakeTable, columns: set[str] | None) -> Iterator[tuple[str, str]]:
    """(field, message) for every entry of `layout` the table format would refuse; `columns` are the table's
    columns when the catalog declares them."""
    for entry in layout.partition_by:
        try:
            column = _transform(entry)[2]
        except ValueError as error:
            yield "lake_table.partition_by", str(error)
            continue
        if columns is not None and column not in columns:
            yield "lake_table.partition_by", f"partition column {column!r} is not a column of the table"
    for entry in layout.sort_by:
        try:
            column = _sort(entry)[0]
        except ValueError as error:
            yield "lake_table.sort_by", str(error)
            continue
        if columns is not None and column not in columns:
            yield "lake_table.sort_by", f"sort column {column!r} is not a column of the table"
    for key, value in layout.properties.items():
        if key not in PROPERTIES:
            yield (
                "lake_table.properties",
                f"table property {key!r} is not one Medallion sets; use one of " + (", ".join(PROPERTIES)),
            )
        elif not PROPERTIES[key][0](value):
            yield (
                "lake_table.properties",
                f"table property {key!r} is {value!r}; it must be {PROPERTIES[key][1]}",
            )


def check_layouts(snapshot: CatalogSnapshot) -> Iterator[tuple[str, Row, str, str]]:
    """Catalog check (loading.CHECKS): lake tables whose layout the table format would refuse, and two
    targets kept in the same table."""
    kept_in: dict[str, str] = {}
    for target in snapshot.targets.values():
        table = str(table_of(target))
        for name in (table, table + QUARANTINE_SUFFIX):
            if name in kept_in:
                yield "targets", target, "lake_table", f"lake table {name} is also {kept_in[name]}'s"
        kept_in[table], kept_in[table + QUARANTINE_SUFFIX] = target.target_id, target.target_id
        if target.lake_table is None:
            continue
        for field, message in layout_problems(target.lake_table, _declared_columns(snapshot, target)):
            yield "targets", target, field, message


def _declared_columns(snapshot: CatalogSnapshot, target: Target) -> set[str] | None:
    """The target's columns as far as the catalog says: declared ones, or a bronze target's source columns
    with the ingestion columns."""
    if target.columns:
        return set(target.columns)
    producer = snapshot.stage_producing(target.target_id)
    if target.layer == "bronze" and producer is not None and producer.input_id in snapshot.sources:
        return {*snapshot.sources[producer.input_id].columns, *INGESTION_COLUMNS}
    return None
