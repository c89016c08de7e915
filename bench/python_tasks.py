"""A Python task's cost in a local driver: Medallion's worker daemon against PySpark's own.

Each repeat starts a fresh process, in alternating order, that opens a session the way Medallion does
(engine/spark.py) with one task slot, runs 20 one-row `mapInArrow` jobs to warm it, then times `--jobs` more,
each one Python task. It reports each job's wall time and the CPU its Python workers spent (user + system of
the daemon's forked workers, from /proc). `pyspark` is the same session with PySpark's daemon, whose workers
keep Spark's zips of PySpark and its core jar on their path. The figure is Medallion's wall per job over
PySpark's, medians.

    python bench/python_tasks.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

ONE_SESSION = """
import json, os, subprocess, sys, time
from medallion_assets.engine.spark import spark_session
conf = {"spark.master": "local[1]"}
if sys.argv[1] == "pyspark":
    conf["spark.python.daemon.module"] = "pyspark.daemon"
spark = spark_session(conf, app_name="bench-python-tasks")
def same(batches):
    yield from batches
def job():
    spark.range(1).mapInArrow(same, "id long").collect()
def workers_cpu():
    jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
    daemons = subprocess.run(["pgrep", "-P", str(jvm)], capture_output=True, text=True).stdout.split()
    forked = [p for d in daemons for p in subprocess.run(["pgrep", "-P", d], capture_output=True,
              text=True).stdout.split()]
    ticks = 0
    for pid in forked:
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        ticks += int(stat[11]) + int(stat[12])
    return ticks / os.sysconf("SC_CLK_TCK")
for _ in range(20):
    job()
jobs = int(sys.argv[2])
cpu, started = workers_cpu(), time.monotonic()
for _ in range(jobs):
    job()
wall = time.monotonic() - started
print(json.dumps({"wall_ms": 1000 * wall / jobs, "workers_cpu_ms": 1000 * (workers_cpu() - cpu) / jobs}))
"""

FIGURES = ("wall_ms", "workers_cpu_ms")


def session(daemon: str, jobs: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", ONE_SESSION, daemon, str(jobs)],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"medallion": [], "pyspark": []}
    for repeat in range(args.repeats):
        for daemon in ("medallion", "pyspark") if repeat % 2 == 0 else ("pyspark", "medallion"):
            runs[daemon].append(session(daemon, args.jobs))
    medians = {d: {k: statistics.median(r[k] for r in rs) for k in FIGURES} for d, rs in runs.items()}
    for daemon, figures in medians.items():
        print(
            f"{daemon:9s} a job of one Python task: wall {figures['wall_ms']:.0f} ms, "
            f"its Python worker's CPU {figures['workers_cpu_ms']:.0f} ms"
        )
    ratio = medians["medallion"]["wall_ms"] / medians["pyspark"]["wall_ms"]
    print(f"medallion / pyspark, wall per job: {ratio:.2f}")


if __name__ == "__main__":
    main()
