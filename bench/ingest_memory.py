"""Benchmark: peak memory of the `medallion run` process while it ingests raw JSON lines of two sizes.

The seed pipeline user_events_etl runs as `medallion run` in a process of its own, on raw files in a local
folder: once on a small input (`--small-mb` of JSON lines) and once on a big one (`--big-mb`), gzip-compressed
(`--gzip`) or not. The process's resident memory is sampled every 20 ms; the figure is the big run's peak
minus the small run's peak, i.e. what the size of the input costs the Dagster process. With `--remote` the
runs use a Spark Connect server on loopback, started from the pyspark wheel (the run process then holds no
JVM); without, SPARK_MASTER (local[2] by default), whose driver JVM is a child process and not counted.

    python bench/ingest_memory.py --remote --gzip              # 10 MB vs 1,000 MB of JSON lines, gzip
    python bench/ingest_memory.py --medallion OLD/.venv/bin/medallion   # another version, local Spark
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from medallion_assets.catalog.store import CatalogStore  # noqa: E402
from medallion_assets.loading import validate_files  # noqa: E402
from medallion_assets.sample_data import write_sample_data  # noqa: E402
from tests.spark_servers import connect_server  # noqa: E402

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"
BYTES_PER_EVENT = 150  # the sample's JSON lines average about this much


def installation(folder: Path, megabytes: int, gzipped: bool) -> tuple[dict[str, str], int]:
    """The seed catalog with its sources in a local folder holding `megabytes` of events; the run's env."""
    raw = folder / "raw"
    rows = max(megabytes * 1_000_000 // BYTES_PER_EVENT, 1000)
    write_sample_data(str(raw), rows, lines_per_file=200_000, gzipped=gzipped)
    return seed_installation(folder, raw), sum(
        path.stat().st_size for path in (raw / "user_events").iterdir()
    )


def seed_installation(folder: Path, raw: Path) -> dict[str, str]:
    """A fresh seed installation in `folder` whose sources read the sample data under `raw`; the run's env."""
    store = CatalogStore(f"sqlite:///{folder}/catalog.db")
    store.migrate()
    loaded = validate_files(store.snapshot(), [SEED]).rows
    loaded["sources"] = [
        source.model_copy(update={"s3_path": str(raw / source.s3_path.split("/")[-2])})
        for source in loaded["sources"]
    ]
    store.upsert(loaded)
    return {
        "MEDALLION_CATALOG_URL": store.url,
        "MEDALLION_LAKE_URL": str(folder / "lake"),
        "MEDALLION_WAREHOUSE_URL": f"duckdb:///{folder}/warehouse.duckdb",
    }


def peak_rss(medallion: str, env: dict[str, str], pipeline_id: str = "user_events_etl") -> tuple[int, float]:
    """Run the pipeline; return the run process's peak RSS in bytes and its wall time in seconds."""
    started = time.perf_counter()
    process = psutil.Popen(
        [medallion, "run", pipeline_id, "--json"], env={**os.environ, **env}, stdout=-1, stderr=-1, text=True
    )
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, process.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    stdout, stderr = process.communicate()
    if process.returncode != 0 or json.loads(stdout)["status"] != "success":
        raise SystemExit(f"the run failed:\n{stderr[-3000:]}")
    return peak, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-mb", type=int, default=10)
    parser.add_argument("--big-mb", type=int, default=1000)
    parser.add_argument("--gzip", action="store_true", help="gzip-compress the raw files")
    parser.add_argument("--remote", action="store_true", help="through a Spark Connect server on loopback")
    parser.add_argument(
        "--medallion",
        default=str(Path(sys.executable).parent / "medallion"),
        help="the medallion command to measure (another checkout's, to compare versions)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        server = connect_server(Path(scratch), {}) if args.remote else nullcontext(None)
        with server as remote:
            if remote:
                os.environ["SPARK_REMOTE"] = remote
            figures = {}
            for label, megabytes in (("small", args.small_mb), ("big", args.big_mb)):
                folder = Path(scratch) / label
                env, size = installation(folder, megabytes, args.gzip)
                rss, seconds = peak_rss(args.medallion, env)
                figures[label] = rss
                print(
                    f"{label}: {megabytes} MB of JSON lines ({size / 1e6:.1f} MB on disk), peak RSS "
                    f"{rss / 2**20:.0f} MiB, {seconds:.0f} s",
                    flush=True,
                )
    engine = f"Spark Connect ({remote})" if args.remote else os.environ.get("SPARK_MASTER", "local[2]")
    print(f"engine {engine}; peak RSS big - small: {(figures['big'] - figures['small']) / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
