"""Benchmark: with Spark Connect, a run's steps in one process (in_process) or a process each (multiprocess).

The seed's orders_etl (two bronze stages that may run side by side, then silver and gold) runs as `medallion
run` against a Spark Connect server on loopback, started from the pyspark wheel, on `--rows` sample events
in a local folder; each run gets a fresh catalog, lake and warehouse. `--repeats` runs of each executor,
alternating which goes first; prints the medians and the ratio multiprocess / in_process.

    python bench/connect_executors.py                 # 200,000 events, 3 repeats
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from ingest_memory import peak_rss, seed_installation

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from medallion_assets.sample_data import write_sample_data  # noqa: E402
from tests.spark_servers import connect_server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    medallion = str(Path(sys.executable).parent / "medallion")
    with (
        tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch,
        connect_server(Path(scratch), {}) as remote,
    ):
        raw = Path(scratch) / "raw"
        write_sample_data(str(raw), args.rows, lines_per_file=100_000)
        times: dict[str, list[float]] = {"in_process": [], "multiprocess": []}
        for repeat in range(args.repeats + 1):  # the first round warms the server up, untimed
            for executor in ("in_process", "multiprocess") if repeat % 2 else ("multiprocess", "in_process"):
                env = {
                    **seed_installation(Path(scratch) / f"{executor}-{repeat}", raw),
                    "SPARK_REMOTE": remote,
                    "MEDALLION_EXECUTOR": executor,
                }
                _, seconds = peak_rss(medallion, env, "orders_etl")
                if repeat:
                    times[executor].append(seconds)
    one, many = statistics.median(times["in_process"]), statistics.median(times["multiprocess"])
    print(
        f"orders_etl on Spark Connect, {args.rows:,} events: in_process {one:.1f} s, "
        f"multiprocess {many:.1f} s (medians of {args.repeats}); multiprocess / in_process = {many / one:.2f}"
    )


if __name__ == "__main__":
    main()
