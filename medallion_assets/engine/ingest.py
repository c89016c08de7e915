"""Bronze ingestion: new raw objects → typed bronze parquet plus ingestion columns; bad records → quarantine.

Raw text is split into lines by pyarrow (C++, no Python object per line), so every record keeps its file
and line number, then Spark parses the lines against the source's declared schema in PERMISSIVE mode:
a record that does not parse lands in quarantine with its file, line and reason instead of vanishing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from medallion_assets.catalog.models import Source
from medallion_assets.naming import spark_identifier
from medallion_assets.storage.objects import ObjectInfo, read_bytes

CORRUPT = "_corrupt_record"
BATCH_PARTITION = "medallion_batch"
INGESTION_COLUMNS = ("_source_file", "_source_line", "_ingested_at")
REJECTION_REASON = {
    "jsonl": "malformed JSON, not a JSON object, or a value that does not fit the declared schema",
    "csv": "wrong number of fields or a value that does not fit the declared schema",
    "parquet": "a value that does not fit the declared schema",
}


# Schema drift is looked for in the first lines of every new object: a producer that adds a field adds it to
# every record it writes from then on, so the head of a file shows it without a scan of the whole file.
DRIFT_SAMPLE_LINES = 50
_JSON_TYPES = ((bool, "boolean"), (int, "bigint"), (float, "double"))


class CorruptSourceObject(Exception):
    """A raw object that cannot be read at all (not UTF-8 text, not a parquet file): no record of it is usable."""

    def __init__(self, source_id: str, url: str, reason: str):
        super().__init__(f"source {source_id}: object {url} is unreadable: {reason}")
        self.source_id, self.url, self.reason = source_id, url, reason


class SourceSchemaDrift(Exception):
    """The raw files carry fields the catalog does not declare; additive, so the catalog can follow."""

    def __init__(self, source_id: str, url: str, new_columns: dict[str, str]):
        listed = ", ".join(f"{name} ({type_name})" for name, type_name in new_columns.items())
        super().__init__(f"source {source_id}: {url} has fields not in the catalog: {listed}")
        self.source_id, self.url, self.new_columns = source_id, url, new_columns


class BreakingSourceSchemaChange(Exception):
    """Declared fields are gone from, or changed in, the raw files: the catalog cannot follow by itself."""


@dataclass(frozen=True)
class IngestResult:
    batch_id: str
    objects: list[ObjectInfo]
    rows_read: int
    rows_written: int
    rows_quarantined: int


def spark_schema(columns: dict[str, str]) -> str:
    return ", ".join(f"{spark_identifier(name)} {type_name}" for name, type_name in columns.items())


def bronze_schema(source: Source) -> str:
    """The schema of a bronze dataset, in the order its files hold it: where each record came from, the
    source's declared columns, and when it was ingested (the batch partition column is added by Spark)."""
    return f"_source_file string, _source_line bigint, {spark_schema(source.columns)}, _ingested_at timestamp"


def _decoded(source: Source, info: ObjectInfo, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorruptSourceObject(source.source_id, info.url, f"not UTF-8 text (byte {error.start})") from None


def _json_type(value: object) -> str:
    return next((name for kind, name in _JSON_TYPES if type(value) is kind), "string")


def _text_drift(source: Source, info: ObjectInfo, text: str) -> dict[str, str]:
    """Fields of the object's first records that the catalog does not declare, with their inferred types."""
    head = [line for line in text[:1 << 16].split("\n")[:DRIFT_SAMPLE_LINES] if line.strip()]
    if source.file_format == "csv":
        if not (head and source.options.get("header", True)):
            return {}
        delimiter = str(source.options.get("sep", source.options.get("delimiter", ",")))
        header = [name.strip().strip('"') for name in head[0].split(delimiter)]
        missing = [name for name in source.columns if name not in header]
        if missing:
            raise BreakingSourceSchemaChange(
                f"source {source.source_id}: {info.url}:1 header lacks declared column(s) {', '.join(missing)}; "
                f"header is {', '.join(header)}")
        return {name: "string" for name in header if name not in source.columns}
    new: dict[str, str] = {}
    for line in head:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a malformed line is a record problem, quarantined with its reason later
        if isinstance(record, dict):
            for name, value in record.items():
                if name not in source.columns and name not in new:
                    new[name] = _json_type(value)
    return new


def _parquet_drift(source: Source, info: ObjectInfo, staged: Path) -> dict[str, str]:
    try:
        schema = pq.read_schema(staged)
    except (pa.ArrowInvalid, OSError) as error:
        raise CorruptSourceObject(source.source_id, info.url, f"not a parquet file ({error})") from None
    missing = [name for name in source.columns if name not in schema.names]
    if missing:
        raise BreakingSourceSchemaChange(
            f"source {source.source_id}: {info.url} lacks declared column(s) {', '.join(missing)}")
    return {field.name: _column_type(field.type) for field in schema if field.name not in source.columns}


def _column_type(arrow_type: pa.DataType) -> str:
    """The catalog's name for an Arrow type (catalog/models.COLUMN_TYPE); anything unusual is read as string."""
    if pa.types.is_decimal(arrow_type):
        return f"decimal({arrow_type.precision},{arrow_type.scale})"
    for test, name in ((pa.types.is_boolean, "boolean"), (pa.types.is_int32, "int"), (pa.types.is_integer, "bigint"),
                       (pa.types.is_float32, "float"), (pa.types.is_floating, "double"), (pa.types.is_date, "date"),
                       (pa.types.is_timestamp, "timestamp")):
        if test(arrow_type):
            return name
    return "string"


def _lines_table(info: ObjectInfo, text: str, skip_header: bool) -> pa.Table:
    lines = pc.split_pattern(pa.array([text], pa.large_string()), "\n").flatten()
    numbers = pa.array(range(1, len(lines) + 1), pa.int64())
    table = pa.table({"_source_file": pa.array([info.url] * len(lines)), "_source_line": numbers, "value": lines})
    keep = pc.not_equal(pc.utf8_trim_whitespace(table["value"]), "")
    if skip_header:
        keep = pc.and_(keep, pc.greater(numbers, 1))
    return table.filter(keep)


def _parse_text(spark: SparkSession, source: Source, landing: Path) -> DataFrame:
    """Parse landed lines; rows that fail carry the raw line in _corrupt_record."""
    schema = spark_schema(source.columns) + f", {CORRUPT} string"
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT,
               **{k: str(v) for k, v in source.options.items() if k != "header"}}
    parse = F.from_json if source.file_format == "jsonl" else F.from_csv
    lines = spark.read.parquet(str(landing))
    parsed = lines.select("_source_file", "_source_line", "value", parse("value", schema, options).alias("r"))
    # A line that is valid JSON but not an object (123, [1]) parses to a null struct: also corrupt.
    return parsed.select(
        "_source_file", "_source_line", *[F.col("r")[name].alias(name) for name in source.columns],
        F.when(F.col("r").isNull() | F.col(f"r.{CORRUPT}").isNotNull(), F.col("value")).alias(CORRUPT),
    )


def _read_parquet(spark: SparkSession, source: Source, staged: Path, urls: list[str]) -> DataFrame:
    """Staged files are named by their index in `urls`, which maps each row back to its object."""
    file_index = F.regexp_extract(F.col("_metadata.file_name"), r"^(\d+)\.parquet$", 1).cast("int")
    return spark.read.parquet(str(staged)).select(
        F.element_at(F.array(*map(F.lit, urls)), file_index + 1).alias("_source_file"),
        (F.col("_metadata.row_index") + 1).alias("_source_line"),
        *[F.col(name).cast(type_name).alias(name) for name, type_name in source.columns.items()],
        F.lit(None).cast("string").alias(CORRUPT),
    )


def ingest(spark: SparkSession, source: Source, objects: list[ObjectInfo], bronze_path: str,
           quarantine_path: str, batch_id: str) -> IngestResult:
    """Ingest `objects` (the ones not yet bookmarked) as one batch, a partition `medallion_batch=<batch_id>`.

    The partition name has no leading underscore: pyarrow, DuckDB and Spark treat such folders as hidden.
    Before anything is written, every object is checked: an unreadable one raises CorruptSourceObject, and
    undeclared fields raise SourceSchemaDrift (the healing rules decide what happens next).
    """
    if not objects:
        return IngestResult(batch_id, [], 0, 0, 0)
    staging = Path(tempfile.mkdtemp(prefix=f"medallion-{source.source_id}-"))
    try:
        for index, info in enumerate(objects):
            staged = staging / f"{index:06d}.parquet"
            if source.file_format == "parquet":
                staged.write_bytes(read_bytes(info.url))
                drift = _parquet_drift(source, info, staged)
            else:
                text = _decoded(source, info, read_bytes(info.url))
                drift = _text_drift(source, info, text)
                skip_header = source.file_format == "csv" and source.options.get("header", True)
                pq.write_table(_lines_table(info, text, skip_header), staged)
            if drift:
                raise SourceSchemaDrift(source.source_id, info.url, drift)
        if source.file_format == "parquet":
            records = _read_parquet(spark, source, staging, [info.url for info in objects])
        else:
            records = _parse_text(spark, source, staging)
        ingested_at = datetime.now(timezone.utc).replace(tzinfo=None)
        # Cached: the quarantine's write, if there is anything to quarantine, reads the parsed records again.
        records = records.withColumn("_ingested_at", F.lit(ingested_at)).cache()
        try:
            is_corrupt = F.col(CORRUPT).isNotNull()
            # The bronze write counts every record and the corrupt ones as it goes: no pass only to count.
            counts = Observation()
            counted = records.observe(counts, F.count(F.lit(1)).alias("rows"),
                                      F.count(F.when(is_corrupt, 1)).alias("corrupt"))
            good = counted.where(~is_corrupt).drop(CORRUPT)
            good.write.mode("overwrite").parquet(f"{bronze_path}/{BATCH_PARTITION}={batch_id}")
            rows_read, quarantined = counts.get["rows"], counts.get["corrupt"]
            if quarantined:
                records.where(is_corrupt).select(
                    "_source_file", "_source_line", F.lit(REJECTION_REASON[source.file_format]).alias("reason"),
                    F.col(CORRUPT).alias("raw"), "_ingested_at",
                ).write.mode("overwrite").parquet(f"{quarantine_path}/{BATCH_PARTITION}={batch_id}")
        finally:
            records.unpersist()
        return IngestResult(batch_id, objects, rows_read, rows_read - quarantined, quarantined)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
