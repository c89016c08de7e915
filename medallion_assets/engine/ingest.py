"""Bronze ingestion: new raw objects → typed bronze parquet plus ingestion columns; bad records → quarantine.

Raw text is split into lines by pyarrow (C++, no Python object per line), so every record keeps its file
and line number, then Spark parses the lines against the source's declared schema in PERMISSIVE mode:
a record that does not parse lands in quarantine with its file, line and reason instead of vanishing.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
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


@dataclass(frozen=True)
class IngestResult:
    batch_id: str
    objects: list[ObjectInfo]
    rows_read: int
    rows_written: int
    rows_quarantined: int


def spark_schema(columns: dict[str, str]) -> str:
    return ", ".join(f"{spark_identifier(name)} {type_name}" for name, type_name in columns.items())


def _lines_table(info: ObjectInfo, data: bytes, skip_header: bool) -> pa.Table:
    text = data.decode("utf-8", errors="replace")
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
    """
    if not objects:
        return IngestResult(batch_id, [], 0, 0, 0)
    staging = Path(tempfile.mkdtemp(prefix=f"medallion-{source.source_id}-"))
    try:
        if source.file_format == "parquet":
            for index, info in enumerate(objects):
                (staging / f"{index:06d}.parquet").write_bytes(read_bytes(info.url))
            records = _read_parquet(spark, source, staging, [info.url for info in objects])
        else:
            skip_header = source.file_format == "csv" and source.options.get("header", True)
            for index, info in enumerate(objects):
                pq.write_table(_lines_table(info, read_bytes(info.url), skip_header), staging / f"{index:06d}.parquet")
            records = _parse_text(spark, source, staging)
        ingested_at = datetime.now(timezone.utc).replace(tzinfo=None)
        records = records.withColumn("_ingested_at", F.lit(ingested_at)).cache()
        try:
            good = records.where(F.col(CORRUPT).isNull()).drop(CORRUPT)
            bad = records.where(F.col(CORRUPT).isNotNull()).select(
                "_source_file", "_source_line",
                F.lit(REJECTION_REASON[source.file_format]).alias("reason"),
                F.col(CORRUPT).alias("raw"), "_ingested_at")
            good.write.mode("overwrite").parquet(f"{bronze_path}/{BATCH_PARTITION}={batch_id}")
            quarantined = bad.count()
            if quarantined:
                bad.write.mode("overwrite").parquet(f"{quarantine_path}/{BATCH_PARTITION}={batch_id}")
            rows_read = records.count()
        finally:
            records.unpersist()
        return IngestResult(batch_id, objects, rows_read, rows_read - quarantined, quarantined)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
