"""Bronze ingestion: new raw objects → one snapshot of the bronze table, typed records plus ingestion columns;
bad records → the bronze quarantine table.

The driver only lists objects. Spark executors fetch, decompress and split them (`raw_reader`, run through
`mapInArrow`), so raw bytes never pass through the Dagster process and nothing is staged on its disk. Every
record keeps its file and line number. JSON lines are parsed in the same task by Arrow's JSON reader where it
parses them as Spark would; Spark parses the rest (CSV, other types, lines Arrow refuses) against the source's
declared schema in PERMISSIVE mode: a record that does not parse lands in quarantine with its file, line and
reason.
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import reduce

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from medallion_assets.catalog.models import LakeTable, Source
from medallion_assets.engine import raw_reader
from medallion_assets.engine.observed import Observed
from medallion_assets.errors import BreakingSourceSchemaChange, CorruptSourceObject, SourceSchemaDrift
from medallion_assets.naming import spark_identifier
from medallion_assets.storage.lake.layout import TableRef
from medallion_assets.storage.lake.tables import LakeTables
from medallion_assets.storage.objects import ObjectInfo, configured_endpoint

CORRUPT = "_corrupt_record"
REJECTION_REASON = {
    "jsonl": "malformed JSON, not a JSON object, or a value that does not fit the declared schema",
    "csv": "wrong number of fields or a value that does not fit the declared schema",
    "parquet": "a value that does not fit the declared schema",
}
# The declared types whose values Arrow's JSON reader converts exactly as Spark's from_json does, for every
# line it accepts (tests/test_json_parsing.py compares the two line by line on hostile lines). Parsing in the
# reading task spares moving each line into the JVM and parsing it there: bronze's largest cost. A source
# with any other type, or with options for Spark's parser, is parsed by Spark alone.
ARROW_PARSED_TYPES = frozenset({"string", "int", "bigint", "long", "double", "boolean"})
PARSED_BY_SPARK = "parsed by spark"


@dataclass(frozen=True)
class IngestResult:
    batch_id: str
    objects: list[ObjectInfo]
    rows_read: int
    rows_written: int
    rows_quarantined: int


def spark_schema(columns: dict[str, str]) -> str:
    return ", ".join(f"{spark_identifier(name)} {type_name}" for name, type_name in columns.items())


def struct_of(schema: str) -> StructType:
    """A DDL schema (`spark_schema`'s form) parsed by the session's own parser, in classic Spark and Spark
    Connect alike: 3 ms, where an empty frame of it took 0.56 s in a fresh process."""
    parsed = StructType.fromDDL(schema)
    assert isinstance(parsed, StructType), "a list of columns parses to a struct"
    return parsed


def bronze_schema(source: Source) -> str:
    """The schema of a bronze dataset, in the order its files hold it: where each record came from, the
    source's declared columns, and when it was ingested (the batch partition column is added by Spark)."""
    return f"_source_file string, _source_line bigint, {spark_schema(source.columns)}, _ingested_at timestamp"


def _listing(objects: list[ObjectInfo]) -> Column:
    """The objects' urls and ETags in reading order (_reading_order), an array literal that Spark folds once
    per query. A literal, not a frame joined to the records: the join broadcasts the frame, a Spark job of its
    own on every read (0.1 s on a cluster). Written as one JSON text: an array of literals costs Spark's
    analyzer time that grows faster than the listing (28 s for 100,000 objects, against 1.1 s as JSON;
    measured)."""
    entries = json.dumps([{"url": info.url, "etag": info.etag} for info in _reading_order(objects)])
    return F.from_json(F.lit(entries), "array<struct<url: string, etag: string>>")


def _reading_order(objects: list[ObjectInfo]) -> list[ObjectInfo]:
    """Largest, smallest, second largest, second smallest, and so on: each run of consecutive objects in this
    order, which is how a range hands its indexes to tasks, holds about as many bytes as any other."""
    by_size = sorted(objects, key=lambda info: info.size, reverse=True)
    return [by_size[i // 2] if i % 2 == 0 else by_size[-1 - i // 2] for i in range(len(by_size))]


def _spread(spark: SparkSession, listing: Column, count: int) -> DataFrame:
    """The `count` objects of `listing` as rows (index, url, etag): a range of indexes, each looking its
    object up, spread over as many tasks as Spark's default parallelism for a source (the executors' cores),
    as its own file sources are at the least. Not a task per object: a Python task's start cost 50-100 ms on a
    cluster (measured), more than reading 3 MB. No row moves through a shuffle, which a repartition costs on
    every read (0.2 s a read on two cores)."""
    entry = F.element_at(listing, F.col("id").cast("int") + 1)
    return spark.range(0, count).select(
        F.col("id").cast("int").alias("index"), entry["url"].alias("url"), entry["etag"].alias("etag")
    )


def _head_check(source: Source) -> raw_reader.HeadCheck:
    return raw_reader.HeadCheck(source.file_format, source.columns, source.options)


def _check_heads(spark: SparkSession, source: Source, objects: list[ObjectInfo]) -> None:
    """Read the head of every object on the executors; raise for the first not ingestible as it is (by url),
    or for every object's undeclared fields at once, so that one healing covers them all."""
    probe = raw_reader.findings_task(_head_check(source), source.compression, configured_endpoint())
    found = sorted(
        _spread(spark, _listing(objects), len(objects))
        .mapInArrow(probe, raw_reader.FINDINGS_SCHEMA)
        .collect(),
        key=lambda row: row.url,
    )
    for finding in found:
        if finding.kind == "corrupt":
            raise CorruptSourceObject(source.source_id, finding.url, finding.detail)
        if finding.kind == "breaking":
            raise BreakingSourceSchemaChange(f"source {source.source_id}: {finding.detail}")
    if found:
        new_columns = {
            name: kind
            for finding in reversed(found)
            for name, kind in json.loads(finding.new_columns).items()
        }
        raise SourceSchemaDrift(source.source_id, found[0].url, new_columns)


def _parsed_by_arrow(source: Source) -> bool:
    """Whether the executors parse the source's lines with Arrow where they can (see ARROW_PARSED_TYPES)."""
    return (
        source.file_format == "jsonl"
        and not source.options
        and set(source.columns.values()) <= ARROW_PARSED_TYPES
    )


def _object_shaped(line: Column) -> Column:
    """Spark's reading of raw_reader._object_shaped: could Arrow have parsed this line?"""
    ends = [line.endswith(end) for end in raw_reader.OBJECT_ENDS]
    return line.startswith(raw_reader.OBJECT_START) & reduce(operator.or_, ends)


def _read_records(
    spark: SparkSession, source: Source, objects: list[ObjectInfo], keep: str = raw_reader.KEEP_ALL
) -> DataFrame:
    """The objects' records as the executors read them (raw_reader.numbered_records), naming their file;
    `keep` says which (raw_reader.KEEP_*). The read of every record checks each object's head before its
    records; a read of some records is a second read, of objects already checked."""
    record_schema = (
        f"`{raw_reader.OBJECT_INDEX}` int, _source_line bigint, {spark_schema(source.columns)}, "
        f"`{raw_reader.RAW_LINE}` string, `{raw_reader.UNREADABLE}` string"
    )
    arrow_schema = to_arrow_schema(struct_of(record_schema))
    declared = pa.schema([arrow_schema.field(name) for name in source.columns])
    endpoint = configured_endpoint()
    check = _head_check(source) if keep == raw_reader.KEEP_ALL else None
    if source.file_format == "parquet":
        task = raw_reader.parquet_task(declared, endpoint, check)
    else:
        skip_header = source.file_format == "csv" and bool(source.options.get("header", True))
        task = raw_reader.records_task(
            raw_reader.RecordReading(
                source.compression, skip_header, declared, _parsed_by_arrow(source), keep, endpoint, check
            )
        )
    listing = _listing(objects)
    records = _spread(spark, listing, len(objects)).mapInArrow(task, record_schema)
    # Records name their object by index (raw_reader.OBJECT_INDEX), looked up here in the same listing.
    url = F.element_at(listing, F.col(raw_reader.OBJECT_INDEX) + 1)["url"]
    return records.withColumn("_source_file", url).drop(raw_reader.OBJECT_INDEX)


def _parse(source: Source, records: DataFrame) -> DataFrame:
    """Every record with its declared columns, parsed by Spark where the executors left the raw line; rows
    that fail carry the raw line in _corrupt_record, and why in _reason."""
    raw, unreadable = F.col(raw_reader.RAW_LINE), F.col(raw_reader.UNREADABLE)
    schema = spark_schema(source.columns) + f", {CORRUPT} string"
    if source.file_format == "parquet":  # rows arrive typed: Spark has nothing to parse
        by_spark = F.lit(None).cast(f"struct<{schema}>")
    else:
        options = {
            "mode": "PERMISSIVE",
            "columnNameOfCorruptRecord": CORRUPT,
            **{k: str(v) for k, v in source.options.items() if k != "header"},
        }
        parse = F.from_json if source.file_format == "jsonl" else F.from_csv
        # Spark would run its parser on a null line too: on every line parsed in the task, at a cost.
        by_spark = F.when(raw.isNotNull(), parse(raw, schema, options))
    parsed = records.withColumn(PARSED_BY_SPARK, by_spark)
    spark_parsed = F.col(PARSED_BY_SPARK)
    # A line that is valid JSON but not an object (123, [1]) parses to a null struct: also corrupt.
    failed = raw.isNotNull() & (spark_parsed.isNull() | spark_parsed[CORRUPT].isNotNull())
    corrupt = unreadable.isNotNull() | failed
    return parsed.select(
        "_source_file",
        "_source_line",
        # Exactly one side holds a record's values: the executor's parse, or Spark's of its raw line.
        *[F.coalesce(F.col(name), spark_parsed[name]).alias(name) for name in source.columns],
        F.when(corrupt, raw).alias(CORRUPT),
        F.coalesce(unreadable, F.lit(REJECTION_REASON[source.file_format])).alias("_reason"),
    )


def _write_rejected(
    lake: LakeTables,
    source: Source,
    objects: list[ObjectInfo],
    expected: int | None,
    shaped: int,
    ingested_at: Column,
    quarantine: tuple[TableRef, str],
) -> int:
    """Append the batch's rejected records to the quarantine table, read a second time from the objects
    that hold them, the executors handing over only the records they left to Spark, and return their count.
    Keeping every record of the batch for its few rejects (a cache) would cost more than the whole parse.
    When none of the `expected` rejects was `shaped` like an object, the executors hand over only the lines
    that are not, which needs no parse. The rejects are counted as they are written: a count other than the
    first read's (an object changed meanwhile) fails the stage, naming both counts; with no first read
    (`expected` None) the count is what it is."""
    keep = raw_reader.KEEP_UNPARSED if shaped or not _parsed_by_arrow(source) else raw_reader.KEEP_UNSHAPED
    records = _parse(source, _read_records(lake.spark, source, objects, keep))
    written = Observed(records.where(F.col(CORRUPT).isNotNull()), F.count(F.lit(1)).alias("rows"))
    rows = written.frame.select(
        "_source_file",
        "_source_line",
        F.col("_reason").alias("reason"),
        F.col(CORRUPT).alias("raw"),
        ingested_at.alias("_ingested_at"),
    )
    table, batch_id = quarantine
    lake.ensure(table, rows.schema, None)
    lake.append(table, rows, batch_id)
    count: int = written.result["rows"]
    if expected is not None and count != expected:
        raise RuntimeError(
            f"source {source.source_id} changed while it was ingested: {expected} records were rejected on "
            f"the first read of its objects and {count} on the second; the quarantine holds the second read's"
        )
    return count


def complete_quarantine(
    lake: LakeTables, source: Source, objects: list[ObjectInfo], quarantine: tuple[TableRef, str]
) -> int:
    """The quarantine of a batch whose bronze snapshot was committed and whose rejects were not (the run
    stopped, or the quarantine's write failed, in between): its objects are read again for their rejects,
    which are appended under the batch's id; returns how many. Nothing is appended when they hold none."""
    table, batch_id = quarantine
    if not objects or lake.batch_snapshots(table, [batch_id]):
        return 0
    ingested_at = F.lit(datetime.now(UTC).replace(tzinfo=None))
    return _write_rejected(lake, source, objects, None, 1, ingested_at, quarantine)


def _unreadable_object(source: Source, error: Exception) -> CorruptSourceObject | None:
    """The CorruptSourceObject a task reported through its error message, if that is why the job failed."""
    found = re.search(re.escape(raw_reader.UNREADABLE_MARKER) + r" (\{.*\})", str(error))
    if not found:
        return None
    reported = json.loads(found.group(1))
    return CorruptSourceObject(source.source_id, reported["url"], reported["reason"])


def ingest(
    lake: LakeTables,
    source: Source,
    objects: list[ObjectInfo],
    bronze: tuple[TableRef, LakeTable | None],
    batch_id: str,
) -> IngestResult:
    """Ingest `objects` (the ones not yet bookmarked) as one batch: one snapshot appended to the bronze table
    (`bronze`: the table and its layout), tagged with `batch_id`, and one to its quarantine table when records
    were rejected. A failed write commits nothing.

    The task that reads an object checks its head before any of its records: an object not ingestible as it
    is fails the write, which then commits nothing, and a probe of every object's head says why: an unreadable
    one raises CorruptSourceObject, undeclared fields raise SourceSchemaDrift (the healing rules decide what
    happens next). Checking in the reading task spares a Spark job of its own on every batch. An object that
    turns out unreadable further on fails the write too.
    """
    if not objects:
        return IngestResult(batch_id, [], 0, 0, 0)
    spark, (table, layout) = lake.spark, bronze
    ingested_at = F.lit(datetime.now(UTC).replace(tzinfo=None))
    records = _parse(source, _read_records(spark, source, objects)).withColumn("_ingested_at", ingested_at)
    is_corrupt = F.col(CORRUPT).isNotNull()
    try:
        # The bronze write counts every record and the rejected ones as it goes, and names the objects that
        # hold rejects: no pass only to count.
        counts = Observed(
            records,
            F.count(F.lit(1)).alias("rows"),
            F.count(F.when(is_corrupt, 1)).alias("corrupt"),
            F.count(F.when(is_corrupt & _object_shaped(F.col(CORRUPT)), 1)).alias("shaped"),
            F.collect_set(F.when(is_corrupt, F.col("_source_file"))).alias("objects"),
        )
        good = counts.frame.where(~is_corrupt).drop(CORRUPT, "_reason")
        lake.ensure(table, good.schema, layout)
        lake.append(table, good, batch_id)
        rows_read, quarantined = counts.result["rows"], counts.result["corrupt"]
        if quarantined:
            holding = set(counts.result["objects"])
            _write_rejected(
                lake,
                source,
                [info for info in objects if info.url in holding],
                quarantined,
                counts.result["shaped"],
                ingested_at,
                (table.quarantine(), batch_id),
            )
    except Exception as error:
        if raw_reader.HEAD_FINDING_MARKER in str(error) or raw_reader.UNREADABLE_MARKER in str(error):
            _check_heads(spark, source, objects)
        corrupt = _unreadable_object(source, error)
        if corrupt:
            raise corrupt from None
        raise
    return IngestResult(batch_id, objects, rows_read, rows_read - quarantined, quarantined)
