"""Keyed tables kept up to date from their new rows: the newer row per key wins (a merge), and change feeds
applied as slowly changing dimensions of type 1 (the latest state per key) or type 2 (every version, with its
validity interval).

Each function computes a key's rows from that key's rows alone, so the engine may apply it to the keys a
batch touched and replace only their rows: the result equals the one computed from every row at once.

Events are ordered by the target's `sequence_by`; ties are broken by ingestion order (file, line) and then by
the row's content, so the order, and every result, is the same whatever order the events arrived in.

Whole snapshots of a table (`cdc.from_snapshot`) are turned into such events, and applied as a change feed.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import date, timedelta
from functools import reduce
from operator import and_, or_

from pyspark.sql import Column, DataFrame, Window, WindowSpec
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DateType, TimestampNTZType, TimestampType

from medallion_assets.catalog.models import Target, ValidityColumns
from medallion_assets.naming import INGESTION_COLUMNS
from medallion_assets.sql_safety import checked_condition

# Helper columns; their names hold a space, which no catalog column's name (an identifier) can.
_DELETE, _TRUNCATE, _TIE, _SEGMENT = "cdc delete", "cdc truncate", "cdc tie", "cdc segment"
_NEW, _BOUNDARY, _FROM = "cdc new version", "cdc boundary", "cdc from"
_SNAPSHOT, _NEXT_SNAPSHOT, _KEYS_NEXT = "cdc snapshot", "cdc next snapshot", "cdc key's next snapshot"
# `newer_wins`' column saying whether a winning row's key had a row in the table, which it replaces.
REPLACES = "cdc replaces"


def same_keys(left: DataFrame, right: DataFrame, keys: list[str]) -> Column:
    """Join condition: the keys equal column by column, nulls equal to nulls."""
    return reduce(and_, [left[f"`{k}`"].eqNullSafe(right[f"`{k}`"]) for k in keys])


def rows_of_keys(frame: DataFrame, keys_frame: DataFrame, keys: list[str]) -> DataFrame:
    """The rows of `frame` whose keys are in `keys_frame`."""
    wanted = keys_frame.select(*[F.col(f"`{k}`") for k in keys]).distinct()
    return frame.join(wanted, same_keys(frame, wanted, keys), "left_semi")


def keys_without_rows(keys_frame: DataFrame, frame: DataFrame, keys: list[str]) -> DataFrame:
    """The keys of `keys_frame` (distinct) that no row of `frame` has."""
    wanted = keys_frame.select(*[F.col(f"`{k}`") for k in keys]).distinct()
    return wanted.join(frame, same_keys(wanted, frame, keys), "left_anti")


# Past this many ranges of days, one range from the first day to the last is searched instead: a condition
# stays short, and a scan still skips the files and partitions outside it.
_MOST_RANGES = 64
_DAY_LITERALS: dict[type[DataType], str] = {
    DateType: "DATE",
    TimestampType: "TIMESTAMP",
    TimestampNTZType: "TIMESTAMP_NTZ",
}


def on_days(column: str, column_type: DataType, days: Collection[date | None]) -> str | None:
    """A SQL condition on a date or timestamp `column`: its value falls on one of `days` (the session time
    zone's days, as `CAST(column AS DATE)` computes them), or is null when `days` holds None. None when the
    column is of another type.

    Written as ranges of the column itself, not as its day: Spark hands a range on a column to the table's
    scan, which skips the partitions (`days(column)`) and files outside it; a function of the column it
    cannot."""
    literal = _DAY_LITERALS.get(type(column_type))
    present = sorted({day for day in days if day is not None})
    if literal is None:
        return None
    ranges: list[list[date]] = []
    for day in present:
        if ranges and ranges[-1][1] == day:
            ranges[-1][1] = day + timedelta(days=1)
        else:
            ranges.append([day, day + timedelta(days=1)])
    if len(ranges) > _MOST_RANGES:
        ranges = [[ranges[0][0], ranges[-1][1]]]
    quoted = f"`{column.replace('`', '``')}`"
    terms = [f"({quoted} >= {literal} '{start}' AND {quoted} < {literal} '{end}')" for start, end in ranges]
    if None in days:
        terms.append(f"{quoted} IS NULL")
    return " OR ".join(terms) if terms else "FALSE"


def window_of(values: DataFrame, of: str, column: str, column_type: DataType) -> str | None:
    """`on_days` of the days `values`' column `of` falls on (computed only when `column_type` is a date or
    timestamp: None otherwise)."""
    if not is_day_type(column_type):
        return None
    return on_days(column, column_type, days_of(values, of))


def is_day_type(column_type: DataType) -> bool:
    """Whether a column of this type falls on days (`on_days` can bound it): a date or timestamp."""
    return type(column_type) in _DAY_LITERALS


def days_of(values: DataFrame, column: str) -> list[date | None]:
    """The days (the session time zone's) `values`' date or timestamp `column` falls on; None for a null."""
    return [row[0] for row in values.select(F.to_date(F.col(f"`{column}`"))).distinct().collect()]


def spread(days: Collection[date | None], before: int, after: int) -> set[date | None]:
    """The `days`, and those up to `before` days before and `after` days after each (a null day stays
    itself)."""
    return {
        None if day is None else day + timedelta(days=shift)
        for day in days
        for shift in range(-before, after + 1)
    }


def newer_wins(
    existing: DataFrame, incoming: DataFrame, keys: list[str], keep_latest_by: str | None
) -> DataFrame:
    """The incoming rows (one per key, deduplicated) that replace the existing row of their key: those newer
    by `keep_latest_by` (a null is older than any value), or whose key has no row yet. On a tie, or without
    `keep_latest_by`, the existing row stays: it was ingested first, as a full deduplication would keep it.
    Each row's `REPLACES` column says whether its key had a row (which it replaces) or is new."""
    columns = [c for c in incoming.columns if c not in INGESTION_COLUMNS]
    candidates = (
        existing.select(*[F.col(f"`{c}`") for c in columns])
        .withColumn(_NEW, F.lit(1))
        .unionByName(incoming.select(*[F.col(f"`{c}`") for c in columns]).withColumn(_NEW, F.lit(2)))
    )
    order = [F.col(f"`{keep_latest_by}`").desc_nulls_last()] if keep_latest_by else []
    by_key = Window.partitionBy(*keys)
    ranked = candidates.withColumn(
        "cdc rank", F.row_number().over(by_key.orderBy(*order, F.col(_NEW)))
    ).withColumn(REPLACES, F.min(_NEW).over(by_key) == 1)
    winners = ranked.where((F.col("cdc rank") == 1) & (F.col(_NEW) == 2))
    return winners.select(*[f"`{c}`" for c in [*columns, REPLACES]])


def validity_columns(target: Target) -> ValidityColumns:
    return target.validity_columns or ValidityColumns()


def output_columns(target: Target, events: DataFrame) -> list[str]:
    """The target's columns made from the events: theirs, less ingestion and excepted columns."""
    assert target.cdc is not None
    left_out = {*INGESTION_COLUMNS, *target.cdc.except_columns}
    return [c for c in events.columns if c not in left_out]


def tracked_columns(target: Target, columns: list[str]) -> list[str]:
    """Type 2: the columns whose change starts a new version (never the keys or the sequence)."""
    assert target.cdc is not None
    if target.track_history_columns is not None:
        return list(target.track_history_columns)
    untracked = {*target.keys, target.cdc.sequence_by, *(target.track_history_except or ())}
    return [c for c in columns if c not in untracked]


def flag_events(events: DataFrame, target: Target) -> DataFrame:
    """The events with their kind (delete, truncate) and a deterministic tie-breaker; events without a
    sequence cannot be placed and are left out."""
    cdc = target.cdc
    assert cdc is not None

    def condition(sql: str | None) -> Column:
        return F.coalesce(F.expr(checked_condition(sql)), F.lit(False)) if sql else F.lit(False)

    return (
        events.where(F.col(f"`{cdc.sequence_by}`").isNotNull())
        .withColumn(_TIE, F.to_json(F.struct(*[F.col(f"`{c}`") for c in events.columns])))
        .withColumn(_DELETE, condition(cdc.apply_as_deletes))
        .withColumn(_TRUNCATE, condition(cdc.apply_as_truncates))
    )


def snapshot_sequences(frame: DataFrame, target: Target) -> DataFrame:
    """The snapshots `frame`'s rows belong to: one row per sequence value (a row without one is in none)."""
    assert target.cdc is not None
    sequence = F.col(f"`{target.cdc.sequence_by}`")
    return frame.where(sequence.isNotNull()).select(sequence.alias(_SNAPSHOT)).distinct()


def snapshot_events(rows: DataFrame, target: Target, snapshots: DataFrame) -> DataFrame:
    """Consecutive snapshots compared, as flagged events (as `flag_events` flags a change feed's): each row
    upserts its key at its snapshot's sequence, and a key missing from the snapshot after one that held it is
    deleted at that snapshot's sequence. `rows` are some keys' rows of the snapshots; `snapshots`, every
    snapshot's sequence (`snapshot_sequences` of every row): a key's deletes depend on which snapshots there
    are, not only on its own rows."""
    assert target.cdc is not None
    sequence_by = target.cdc.sequence_by
    upserts = flag_events(rows, target)
    keys = [F.col(f"`{k}`") for k in target.keys]
    snapshot = F.col(f"`{_SNAPSHOT}`")
    following = snapshots.select(
        snapshot, F.lead(snapshot).over(Window.orderBy(snapshot)).alias(_NEXT_SNAPSHOT)
    )
    held = (
        upserts.select(*keys, F.col(f"`{sequence_by}`").alias(_SNAPSHOT))
        .distinct()
        .join(following, _SNAPSHOT)
        .withColumn(_KEYS_NEXT, F.lead(snapshot).over(Window.partitionBy(*keys).orderBy(snapshot)))
    )
    # The key's next snapshot is never before the next one: when it is not that one, the key skipped it.
    next_snapshot = F.col(f"`{_NEXT_SNAPSHOT}`")
    missing = held.where(next_snapshot.isNotNull() & ~next_snapshot.eqNullSafe(F.col(f"`{_KEYS_NEXT}`")))
    made = {
        **{k: F.col(f"`{k}`") for k in target.keys},
        sequence_by: next_snapshot,
        _DELETE: F.lit(True),
        _TRUNCATE: F.lit(False),
    }
    # Nothing for a delete to tie with: its key has no row in its snapshot, and it has one delete there.
    deletes = missing.select(
        *[made.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in upserts.schema.fields]
    )
    return upserts.unionByName(deletes)


def events_of(rows: DataFrame, target: Target, every_row: DataFrame) -> DataFrame:
    """The flagged events of `rows`, some keys' rows of the stage's input `every_row`: a change feed's rows
    are its events; snapshots' are derived by comparing them (`snapshot_events`)."""
    assert target.cdc is not None
    if target.cdc.from_snapshot:
        return snapshot_events(rows, target, snapshot_sequences(every_row, target))
    return flag_events(rows, target)


def truncates(flagged: DataFrame) -> DataFrame:
    return flagged.where(F.col(f"`{_TRUNCATE}`"))


def apply_changes(flagged: DataFrame, target: Target) -> DataFrame:
    """The target's rows made by the flagged events (`flag_events`) of some keys, with every truncate event:
    type 1, the state after each key's last event (none when it deletes the key); type 2, one row per version
    with its validity interval [valid_from, valid_to) in the sequence's terms (valid_to null: current)."""
    cdc = target.cdc
    assert cdc is not None
    keys, sequence = target.keys, F.col(f"`{cdc.sequence_by}`")
    columns = output_columns(target, flagged.drop(_TIE, _DELETE, _TRUNCATE))
    ingestion = [F.col(c) for c in ("_ingested_at", "_source_file", "_source_line") if c in flagged.columns]
    order = [sequence, *ingestion, F.col(f"`{_TIE}`")]
    events = flagged.where(~F.col(f"`{_TRUNCATE}`"))
    if cdc.apply_as_truncates:
        # An event at or before the last truncate is wiped by it.
        last = truncates(flagged).agg(F.max(sequence).alias("cdc last truncate"))
        events = events.crossJoin(last).where(
            F.col("`cdc last truncate`").isNull() | (sequence > F.col("`cdc last truncate`"))
        )
    by_key = Window.partitionBy(*[F.col(f"`{k}`") for k in keys]).orderBy(*order)
    deleted = F.col(f"`{_DELETE}`")
    values = [c for c in columns if c not in keys and c != cdc.sequence_by]
    if cdc.ignore_null_updates:
        # A null keeps the key's last value since it was (re)inserted: a delete starts a new segment.
        events = events.withColumn(
            _SEGMENT, F.sum(deleted.cast("int")).over(by_key.rowsBetween(Window.unboundedPreceding, 0))
        )
        segment = Window.partitionBy(*[F.col(f"`{k}`") for k in keys], F.col(f"`{_SEGMENT}`")).orderBy(*order)
        events = events.withColumns(
            {
                c: F.last(F.when(~deleted, F.col(f"`{c}`")), ignorenulls=True).over(
                    segment.rowsBetween(Window.unboundedPreceding, 0)
                )
                for c in values
            }
        )
    if target.scd_type == 2:
        return _versions(events, target, columns, by_key)
    latest = events.withColumn(
        "cdc last", F.row_number().over(Window.partitionBy(*keys).orderBy(*[o.desc() for o in order]))
    )
    return latest.where((F.col("`cdc last`") == 1) & ~deleted).select(*[F.col(f"`{c}`") for c in columns])


def _versions(events: DataFrame, target: Target, columns: list[str], by_key: WindowSpec) -> DataFrame:
    """Type 2: runs of events whose tracked columns do not change are one version, holding its last event's
    values; a delete closes the current version. A version superseded at the instant it began (two events of
    one sequence value) is left out: its interval is empty."""
    assert target.cdc is not None
    names = validity_columns(target)
    sequence, deleted = F.col(f"`{target.cdc.sequence_by}`"), F.col(f"`{_DELETE}`")
    previous_deleted = F.lag(deleted).over(by_key)
    changed = [
        ~F.lag(F.col(f"`{c}`")).over(by_key).eqNullSafe(F.col(f"`{c}`"))
        for c in tracked_columns(target, columns)
    ]
    starts = previous_deleted.isNull() | previous_deleted | reduce(or_, changed, F.lit(False))
    marked = events.withColumn(_NEW, ~deleted & starts)
    marked = marked.withColumn(_BOUNDARY, deleted | F.col(f"`{_NEW}`"))
    marked = marked.withColumns(
        {
            _FROM: F.max(F.when(F.col(f"`{_NEW}`"), sequence)).over(
                by_key.rowsBetween(Window.unboundedPreceding, 0)
            ),
            "cdc next boundary": F.lead(F.col(f"`{_BOUNDARY}`")).over(by_key),
            "cdc next sequence": F.lead(sequence).over(by_key),
        }
    )
    closes = F.coalesce(F.col("`cdc next boundary`"), F.lit(False))
    last_of_version = ~deleted & (F.col("`cdc next boundary`").isNull() | closes)
    valid_to = F.when(closes, F.col("`cdc next sequence`"))
    versions = marked.where(last_of_version).select(
        *[F.col(f"`{c}`") for c in columns],
        F.col(f"`{_FROM}`").alias(names.valid_from),
        valid_to.alias(names.valid_to),
        valid_to.isNull().alias(names.is_current),
    )
    empty = F.col(f"`{names.valid_to}`").eqNullSafe(F.col(f"`{names.valid_from}`"))
    return versions.where(~empty)
