"""Benchmark: where bronze ingestion's time goes, piece by piece, against Spark's own JSON source.

`--rows` sample events are written once to a local folder (untimed). Each piece below is a query that Spark
runs to its `noop` sink (every column computed, nothing written); `--repeats` rounds after an untimed warm-up,
each round running every piece in turn. The figure is CPU seconds of this process and its children (the driver
JVM and the Python workers), not wall time: it compares the pieces' work on a machine shared with other jobs.

- `text source`: Spark's text source reading the lines (the floor for getting lines into the JVM);
- `executor reader, lines`: Medallion's reader (`raw_reader` in `mapInArrow` tasks: fetch, split, number)
  moving every line into the JVM unparsed, as it does for CSV;
- `executor reader, Arrow parse`: the same reader parsing JSON lines with Arrow's reader in the task, moving
  typed columns (and only the lines Arrow refuses) into the JVM;
- `text source + from_json`: Spark parsing a string column of the lines against the declared schema;
- `bronze parse`: bronze's parse as `ingest` runs it (the reader checking each object's head, then parsing
  with Arrow, lines it refuses parsed by `from_json` in PERMISSIVE mode, each record's object looked up by
  its url, corrupt records, reasons);
- `second read for rejects`: the read the quarantine is written from, over every object (each holds
  rejects): the executors hand over only the lines not shaped like a JSON object, unparsed;
- `JSON source`: Spark's JSON source reading the same files (PERMISSIVE, corrupt records): the hand-written
  script's bronze, which keeps no line numbers;
- `head probe (after a failed write)`: the drift and readability probe over every object, which ingest runs
  only when a reading task found an object's head not ingestible, to say why for every object at once.

    python bench/bronze_pieces.py                 # 1,000,000 events, 3 repeats
    python bench/bronze_pieces.py --quick         # 100,000 events, 2 repeats
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import psutil
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from medallion_assets.catalog.models import Source  # noqa: E402
from medallion_assets.engine import ingest, raw_reader  # noqa: E402
from medallion_assets.engine.spark import spark_session  # noqa: E402
from medallion_assets.sample_data import write_sample_data  # noqa: E402
from medallion_assets.storage.objects import list_objects  # noqa: E402

COLUMNS = {
    "event_id": "string",
    "user_id": "string",
    "event_type": "string",
    "event_ts": "string",
    "value": "double",
}
PERMISSIVE = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": ingest.CORRUPT}


def cpu_seconds() -> float:
    """CPU time of this process and every process under it, ended children included."""
    processes = [psutil.Process()]
    processes += processes[0].children(recursive=True)
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue  # a Python worker that ended meanwhile is counted in its parent's children times
        total += times.user + times.system + times.children_user + times.children_system
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows, repeats = (100_000, 2) if args.quick else (args.rows, args.repeats)
    spark = spark_session({"spark.driver.memory": "2g"}, app_name="medallion-bench")
    with tempfile.TemporaryDirectory() as scratch:
        write_sample_data(f"file://{scratch}", rows)
        folder = f"{scratch}/user_events"
        source = Source(
            source_id="user_events_raw", s3_path=f"file://{folder}/", file_format="jsonl", columns=COLUMNS
        )
        objects = list_objects(source.s3_path)
        spread = ingest._spread(spark, ingest._listing(objects), len(objects))
        schema = ingest.spark_schema(COLUMNS)
        record_schema = f"`{raw_reader.OBJECT_INDEX}` int, _source_line bigint, {schema}, "
        record_schema += f"`{raw_reader.RAW_LINE}` string, `{raw_reader.UNREADABLE}` string"
        declared = to_arrow_schema(spark.createDataFrame([], schema).schema)

        def executor_reader(parse_json: bool) -> DataFrame:
            reading = raw_reader.RecordReading(
                "auto", False, declared, parse_json, raw_reader.KEEP_ALL, None, head_check=None
            )
            task = raw_reader.records_task(reading)
            return spread.mapInArrow(task, record_schema)

        def parsed(lines: DataFrame) -> DataFrame:
            return lines.select(
                F.from_json("value", f"{schema}, {ingest.CORRUPT} string", PERMISSIVE).alias("r")
            ).select("r.*")

        pieces: dict[str, Callable[[], object]] = {
            "text source": lambda: _drain(spark.read.text(folder)),
            "executor reader, lines": lambda: _drain(executor_reader(parse_json=False)),
            "executor reader, Arrow parse": lambda: _drain(executor_reader(parse_json=True)),
            "text source + from_json": lambda: _drain(parsed(spark.read.text(folder))),
            "bronze parse": lambda: _drain(
                ingest._parse(source, ingest._read_records(spark, source, objects))
            ),
            "second read for rejects": lambda: _drain(
                ingest._parse(
                    source, ingest._read_records(spark, source, objects, raw_reader.KEEP_UNSHAPED)
                ).where(F.col(ingest.CORRUPT).isNotNull())
            ),
            "JSON source": lambda: _drain(
                spark.read.schema(f"{schema}, {ingest.CORRUPT} string").options(**PERMISSIVE).json(folder)
            ),
            "head probe (after a failed write)": lambda: ingest._check_heads(spark, source, objects),
        }
        spent: dict[str, list[float]] = {name: [] for name in pieces}
        for round_number in range(repeats + 1):
            for name, piece in pieces.items():
                before = cpu_seconds()
                piece()
                if round_number:  # round 0 warms the JVM and the Python workers up
                    spent[name].append(cpu_seconds() - before)
    baseline = statistics.median(spent["JSON source"])
    print(f"{rows:,} events, {repeats} repeats; CPU seconds (median) and ratio to Spark's JSON source")
    for name, values in spent.items():
        median = statistics.median(values)
        print(f"  {name:30s} {median:6.2f} s  {median / baseline:5.2f}x   {[round(v, 2) for v in values]}")


def _drain(frame: DataFrame) -> None:
    frame.write.format("noop").mode("overwrite").save()


if __name__ == "__main__":
    main()
