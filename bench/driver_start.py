"""A Spark driver's start and first job, with the class-data archive `make jars` records and without.

Each repeat starts a fresh process, in alternating order, that opens a session the way Medallion does
(engine/spark.py), runs `range(3).count()`, and reports its JVM's CPU (user + system, from /proc) and the
wall time to the count's answer. The figure is the archive's CPU over the plain start's, medians.

    python bench/driver_start.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

ONE_START = """
import json, os, sys, time
from medallion_assets.engine.spark import spark_session
started = time.monotonic()
# Without the archive: any option of our own replaces Medallion's (-Xshare:auto is the JVM's default).
conf = {"spark.master": "local[1]"}
if sys.argv[1] == "plain":
    conf["spark.driver.extraJavaOptions"] = "-Xshare:auto"
spark = spark_session(conf, app_name="bench-driver-start")
spark.range(3).count()
wall = time.monotonic() - started
jvm = spark._jvm.java.lang.ProcessHandle.current().pid()
stat = open(f"/proc/{jvm}/stat").read().rsplit(")", 1)[1].split()
print(json.dumps({"cpu": (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK"), "wall": wall}))
"""


def start(variant: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", ONE_START, variant], capture_output=True, text=True, check=True, timeout=900
    )
    figures: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"archive": [], "plain": []}
    for repeat in range(args.repeats):
        for variant in ("archive", "plain") if repeat % 2 == 0 else ("plain", "archive"):
            runs[variant].append(start(variant))
    medians = {v: {k: statistics.median(r[k] for r in rs) for k in ("cpu", "wall")} for v, rs in runs.items()}
    for variant, figures in medians.items():
        print(
            f"{variant:8s} JVM CPU {figures['cpu']:.1f} s, wall to the first answer {figures['wall']:.1f} s"
        )
    print(f"archive / plain, JVM CPU: {medians['archive']['cpu'] / medians['plain']['cpu']:.2f}")


if __name__ == "__main__":
    main()
