"""Benchmark: bronze ingestion of gzip-compressed raw JSON lines against the same lines uncompressed.

`--rows` sample events are written twice to local folders, as `.jsonl` and as `.jsonl.gz` (untimed). Then,
`--repeats` times, alternating which goes first, the engine's `ingest` reads each into a fresh bronze folder
on one Spark session (SPARK_MASTER, local[2] by default; executors fetch, decompress and split the objects).
Prints the median of each and the ratio gzip / plain (goal <= 1.2).

    python bench/gzip_ingest.py               # 1,000,000 events, 5 repeats
    python bench/gzip_ingest.py --quick       # 100,000 events, 2 repeats
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from medallion_assets.catalog.snapshot import CatalogSnapshot  # noqa: E402
from medallion_assets.engine.ingest import ingest  # noqa: E402
from medallion_assets.engine.spark import spark_session  # noqa: E402
from medallion_assets.loading import validate_files  # noqa: E402
from medallion_assets.sample_data import write_sample_data  # noqa: E402
from medallion_assets.storage.objects import list_objects  # noqa: E402

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows, repeats = (100_000, 2) if args.quick else (args.rows, args.repeats)
    spark = spark_session(app_name="medallion-bench")
    seed = validate_files(CatalogSnapshot(), [SEED]).rows
    events = next(source for source in seed["sources"] if source.source_id == "user_events_raw")
    with tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        folders = {}
        for kind, gzipped in (("plain", False), ("gzip", True)):
            write_sample_data(f"{scratch}/{kind}", rows, lines_per_file=100_000, gzipped=gzipped)
            folders[kind] = f"{scratch}/{kind}/user_events"
        sizes = {kind: sum(info.size for info in list_objects(folder)) for kind, folder in folders.items()}
        times: dict[str, list[float]] = {"plain": [], "gzip": []}
        for repeat in range(repeats + 1):  # the first round warms the JVM and the Python workers up, untimed
            for kind in ("plain", "gzip") if repeat % 2 else ("gzip", "plain"):
                source = events.model_copy(update={"s3_path": folders[kind]})
                started = time.perf_counter()
                result = ingest(
                    spark,
                    source,
                    list_objects(folders[kind]),
                    f"{scratch}/bronze-{kind}-{repeat}",
                    f"{scratch}/quarantine-{kind}-{repeat}",
                    "b1",
                )
                if repeat:
                    times[kind].append(time.perf_counter() - started)
                assert result.rows_read == rows, (kind, result)
    plain, gzip = statistics.median(times["plain"]), statistics.median(times["gzip"])
    print(
        f"{rows:,} events: plain {sizes['plain'] / 1e6:.0f} MB in {plain:.2f} s, gzip "
        f"{sizes['gzip'] / 1e6:.0f} MB in {gzip:.2f} s (medians of {repeats}); gzip / plain = "
        f"{gzip / plain:.2f} (goal <= 1.2)"
    )


if __name__ == "__main__":
    main()
