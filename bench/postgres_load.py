"""Benchmark: PostgresWarehouse.load(mode="replace") against psql's \\copy of the same rows.

A gold-like table (date, country, bigint, double) of `--rows` rows is loaded `--repeats` times each way,
alternating the two so that drift in the machine's load affects both alike:
(a) ours: `PostgresWarehouse.load(table, data, "replace")`, timed whole: CSV encoding in memory, TRUNCATE,
    COPY and the row count, in one transaction;
(b) psql: `psql -c "\\copy table FROM 'file.csv' CSV"` of the same rows, into the table emptied beforehand
    (untimed), from a CSV file written beforehand (untimed).
Prints medians and the speed ratio (b)/(a) in time, i.e. our speed over psql's (goal ≥ 0.8).

    python bench/postgres_load.py --rows 1000000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from medallion_assets.storage.warehouse import warehouse_from_url

COUNTRIES = np.array(["US", "FR", "DE", "JP", "BR", "IN", "GB", "ES", "IT", "CA"])


def gold_rows(rows: int) -> pa.Table:
    rng = np.random.default_rng(42)
    days = np.datetime64("2024-01-01") + rng.integers(0, 366, rows).astype("timedelta64[D]")
    return pa.table(
        {
            "event_date": pa.array(days).cast(pa.date32()),
            "country": pa.array(COUNTRIES[rng.integers(0, len(COUNTRIES), rows)]),
            "total_events": pa.array(rng.integers(0, 10**9, rows)),
            "revenue": pa.array(rng.random(rows) * 10_000),
        }
    )


def psql_command(url: str, sql: str) -> list[str]:
    parts = urlsplit(url)
    return [
        "psql",
        "-h",
        parts.hostname or "127.0.0.1",
        "-p",
        str(parts.port or 5432),
        "-U",
        parts.username or "postgres",
        "-d",
        parts.path.lstrip("/") or "postgres",
        "-q",
        "-v",
        "ON_ERROR_STOP=1",
        "-c",
        sql,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--url",
        default=os.environ.get("MEDALLION_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = parser.parse_args()

    data = gold_rows(args.rows)
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    table = f"{schema}.gold_daily"
    columns = ", ".join(data.column_names)
    ours, psql = [], []
    with warehouse_from_url(args.url) as warehouse, tempfile.TemporaryDirectory() as folder:
        csv_path = Path(folder) / "gold_daily.csv"
        pa_csv.write_csv(data, csv_path, pa_csv.WriteOptions(include_header=False))
        copy = f"\\copy {table} ({columns}) FROM '{csv_path}' CSV"
        try:
            warehouse.load(table, data.slice(0, 0), "replace")
            for _ in range(args.repeats):
                start = time.perf_counter()
                result = warehouse.load(table, data, "replace")
                ours.append(time.perf_counter() - start)
                assert result.rows_in_table == args.rows, result

                warehouse.query(f"TRUNCATE {table}")
                start = time.perf_counter()
                subprocess.run(psql_command(args.url, copy), check=True)
                psql.append(time.perf_counter() - start)
                assert warehouse.query(f"SELECT COUNT(*) AS n FROM {table}") == [{"n": args.rows}]
        finally:
            warehouse.query(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    ours_median, psql_median = statistics.median(ours), statistics.median(psql)
    print(f"rows: {args.rows:,}   repeats: {args.repeats}")
    print(f"PostgresWarehouse.load replace: median {ours_median:.3f} s  runs {[round(t, 3) for t in ours]}")
    print(f"psql \\copy:                     median {psql_median:.3f} s  runs {[round(t, 3) for t in psql]}")
    print(f"speed ratio ours / psql: {psql_median / ours_median:.2f}x  (goal >= 0.8x)")


if __name__ == "__main__":
    main()
