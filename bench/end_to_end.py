"""Benchmark: the seed pipeline user_events_etl through Medallion against hand-written PySpark scripts.

`--rows` raw events are written once, before any timing, with `write_sample_data` to an S3 API server on
loopback (moto's server mode). Then, `--repeats` times, alternating which side goes first:

(a) Medallion: the seed catalog loaded into a fresh SQLite catalog (untimed), then, timed,
    `build_definitions(...)` + `run_pipeline(...)` on an ephemeral DagsterInstance, into a fresh lake and
    a fresh DuckDB warehouse: a fresh catalog means empty bookmarks, so every run ingests every object;
(b) hand-written: boto3 downloads the objects; Spark reads the JSON lines (PERMISSIVE, corrupt records to a
    quarantine table) and appends them to a bronze Iceberg table; reads it, casts event_ts to timestamp (rows
    that fail to quarantine), drops duplicate event_ids and writes the silver table; aggregates events and
    distinct users per day into the gold table, and replaces the table in DuckDB with it. The same Iceberg
    runtime, in a JDBC catalog of its own. Its bronze keeps the source file but not the line number, and its
    silver keeps an arbitrary copy of a duplicate (they are exact copies), where Medallion keeps the first;
(c) hand-written parquet: the same script on plain parquet folders, as Medallion's lake was before it became
    Iceberg tables: the figure against "today's parquet lake".

All run in this process on one Spark session, created before timing with spark.driver.memory=2g. All must
load the same gold rows, equal to what the generator says survives (asserted). Prints the medians, the ratio
Medallion / hand-written Iceberg (goal <= 1.1) and / hand-written parquet, and a per-stage breakdown:
Medallion's stage durations come from its audit_log, the framework's share is the rest of its time, and the
rules' scans of written data (all of bronze's rules; in silver and gold only rules an observation during the
write cannot compute, which the seed has none of: its unique rules are on the targets' dedupe keys) are
re-measured after each run on the tables the stages wrote.

`--whole-process` times what a user waits for (issue 35): `medallion run user_events_etl --json` as a process
of its own on a fresh embedded home (MEDALLION_HOME with the seed catalog loaded, untimed; DAGSTER_HOME unset,
so a throwaway Dagster instance), against bench/hand_written.py's script (b) run as a process: Spark start,
imports and process exit included in both, alternating order, medians of `--repeats`; wall time, and the
Python processes' CPU time (the JVM's is not counted: PySpark does not wait for it), with Medallion's
per-stage split from its report. With `--batch-events N`, a first build of `--rows` events (untimed), then
`--repeats` batches of N new events (bench/incremental.py's days: late events and copies), each run by
`medallion run` and by bench/incremental.py's hand-written incremental script as a process; gold is
compared after every batch. Goals: <= 1.1 (2,000,000 events), <= 1.5 (batches of 10,000).

    python bench/end_to_end.py                 # 5,000,000 events, 3 repeats
    python bench/end_to_end.py --quick         # 100,000 events, 2 repeats
    python bench/end_to_end.py --rows 2000000 --cluster   # both sides on a standalone cluster on loopback
    python bench/end_to_end.py --whole-process --rows 2000000 --repeats 3
    python bench/end_to_end.py --whole-process --rows 100000 --batch-events 10000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from dagster import DagsterInstance
from pyspark.sql import SparkSession

from medallion_assets import config
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.definitions import build_definitions
from medallion_assets.engine.spark import spark_session
from medallion_assets.engine.validation import evaluate_rules, reads_written_data
from medallion_assets.loading import validate_files
from medallion_assets.local_s3 import local_s3
from medallion_assets.runner import TIME_PARTS, run_pipeline
from medallion_assets.sample_data import SampleSummary, write_sample_data
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.root import Lake
from medallion_assets.storage.lake.tables import LakeTables

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.hand_written import BUCKET, PREFIX, gold_rows, land_day, run_hand_written  # noqa: E402
from bench.incremental import Installation, day_lines, land  # noqa: E402
from tests.spark_servers import standalone_cluster  # noqa: E402

SEED = Path(__file__).resolve().parents[1] / "metadata_seed"
PIPELINE = "user_events_etl"
STAGES = ("bronze_ingest", "silver_clean", "gold_daily_aggregate")
DRIVER_MEMORY = "2g"
WARM_UP_ROWS = 10_000
SIDES = ("medallion", "hand-written", "hand-written parquet")


def run_medallion(spark: SparkSession, workdir: Path) -> dict:
    """One timed Medallion run from an empty catalog, lake and warehouse; returns times, gold and audit
    rows."""
    catalog_url = f"sqlite:///{workdir / 'catalog.db'}"
    warehouse_file = workdir / "warehouse.duckdb"
    lake_root = str(workdir / "lake")
    store = CatalogStore(catalog_url)
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    # Disposed of here, in this thread: an in-memory instance left to the garbage collector is closed in
    # whichever thread collects it, and its SQLite connections refuse that with a traceback.
    with DagsterInstance.ephemeral() as instance:
        start = time.perf_counter()
        defs = build_definitions(catalog_url, lake_root, f"duckdb:///{warehouse_file}")
        report = run_pipeline(defs, store.snapshot(), store, PIPELINE, instance)
        total = time.perf_counter() - start
    assert report.status == "success", report

    audit = {entry["stage_name"]: entry for entry in store.audit_entries(event="stage", status="success")}
    return {
        "total": total,
        "stages": {name: audit[name]["duration_sec"] for name in STAGES},
        "validation": validation_seconds(spark, store, lake_root),
        "quarantined": {name: audit[name]["rows_quarantined"] for name in STAGES},
        "gold": gold_rows(warehouse_file),
    }


def validation_seconds(spark: SparkSession, store: CatalogStore, lake_root: str) -> dict[str, float]:
    """What each stage spends scanning its written data for rules, re-measured on the same files.

    Bronze evaluates its rules on the whole written dataset; silver and gold observe theirs during the write,
    which costs little, and read the written data back only for the rules an observation cannot compute.
    """
    snapshot = store.snapshot()
    lake = LakeTables(spark, Lake.resolve(lake_root))
    seconds = {}
    for stage in snapshot.stages(PIPELINE):
        target = snapshot.targets[stage.target_id]
        rules = [
            rule
            for rule in snapshot.rule_sets[stage.validation_set_id].check_def
            if target.layer == "bronze" or reads_written_data(rule, target.keys)
        ]
        start = time.perf_counter()
        if rules:
            evaluate_rules(lake.read(table_of(target)), rules)
        seconds[stage.stage_name] = time.perf_counter() - start
    return seconds


def run_side(spark: SparkSession, side: str, scratch: str, summary: SampleSummary) -> dict:
    """One run of one side in a folder of its own, checked against what the generator wrote."""
    with tempfile.TemporaryDirectory(dir=scratch) as workdir:
        if side == "medallion":
            result = run_medallion(spark, Path(workdir))
        else:
            result = run_hand_written(spark, Path(workdir), iceberg=side == "hand-written")
    spark.catalog.clearCache()
    check(result, summary, side)
    return result


def check(result: dict, summary: SampleSummary, side: str) -> None:
    """Each side kept, quarantined and deduplicated exactly what the generator says it wrote."""
    expected_quarantine = {
        "bronze_ingest": summary.malformed_events,
        "silver_clean": summary.bad_timestamp_events,
        "gold_daily_aggregate": 0,
    }
    assert result["quarantined"] == expected_quarantine, (side, result["quarantined"], expected_quarantine)
    survivors = (
        summary.event_lines
        - summary.malformed_events
        - summary.bad_timestamp_events
        - summary.duplicate_events
    )
    assert sum(row[1] for row in result["gold"]) == survivors, (side, result["gold"], survivors)


def median_of(results: list[dict], *path: str) -> float:
    values = []
    for result in results:
        for name in path:
            result = result[name]
        values.append(result)
    return statistics.median(values)


def report(medallion: list[dict], hand: list[dict], parquet: list[dict]) -> None:
    m_total, h_total, p_total = (median_of(side, "total") for side in (medallion, hand, parquet))
    print(
        f"\nMedallion:              median {m_total:7.2f} s  runs {[round(r['total'], 2) for r in medallion]}"
    )
    print(f"hand-written (Iceberg): median {h_total:7.2f} s  runs {[round(r['total'], 2) for r in hand]}")
    print(f"hand-written (parquet): median {p_total:7.2f} s  runs {[round(r['total'], 2) for r in parquet]}")
    print(f"ratio Medallion / hand-written Iceberg: {m_total / h_total:.2f}  (goal <= 1.1)")
    print(f"ratio Medallion / hand-written parquet: {m_total / p_total:.2f}")
    # The runs of a repeat are neighbours in time, so their ratio is less exposed to the machine's drift.
    paired = [m["total"] / h["total"] for m, h in zip(medallion, hand)]
    print(f"per-repeat ratios {[round(r, 2) for r in paired]}, median {statistics.median(paired):.2f}\n")
    print(f"{'stage (medians, s)':<26}{'Medallion':>10}{'rule scans':>16}{'hand-written':>14}{'gap':>8}")
    for name in STAGES:
        m, h = median_of(medallion, "stages", name), median_of(hand, "stages", name)
        rules = median_of(medallion, "validation", name)
        print(f"{name:<26}{m:>10.2f}{rules:>16.2f}{h:>14.2f}{m - h:>8.2f}")
    framework = statistics.median(r["total"] - sum(r["stages"].values()) for r in medallion)
    print(f"{'framework (Dagster, defs)':<26}{framework:>10.2f}{'':>16}{'':>14}{framework:>8.2f}")


# The whole process, as a user runs it: `medallion run` and the hand-written script each a process of its own.
MEDALLION = str(Path(sys.executable).with_name("medallion"))
HAND_WRITTEN = Path(__file__).resolve().with_name("hand_written.py")


def timed_process(command: list[str], env: dict[str, str] | None = None) -> dict:
    """Run `command` to its end; returns the JSON it printed last, with its wall seconds (`total`) and the CPU
    seconds of it and its children (`cpu`, the JVM included: each process waits for its children)."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, f"{command[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"total": wall, "cpu": cpu}


def as_json(rows: list[tuple]) -> list[list]:
    """Rows as a process prints them (dates as text), so that both sides' gold compare."""
    return json.loads(json.dumps(rows, default=str))


def medallion_process(home: Path) -> dict:
    """`medallion run user_events_etl --json` as a user runs it: a fresh process on the embedded home `home`
    (its catalog, lake and warehouse), with DAGSTER_HOME unset (a throwaway Dagster instance); each stage's
    time and its split (engine/timing.py) from the report."""
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    result = timed_process([MEDALLION, "run", PIPELINE, "--json"], env | {"MEDALLION_HOME": str(home)})
    assert result["status"] in ("success", "success_with_warnings"), result
    splits = {asset["key"]: {part: asset[part] for part in TIME_PARTS} for asset in result["assets"]}
    return {"total": result["total"], "cpu": result["cpu"], "splits": splits}


def whole_medallion(home: Path) -> dict:
    """A fresh embedded home with the seed catalog loaded (untimed), then the timed process."""
    store = CatalogStore(f"sqlite:///{home / 'catalog.db'}")
    store.migrate()
    store.upsert(validate_files(store.snapshot(), [SEED]).rows)
    result = medallion_process(home)
    audit = {entry["stage_name"]: entry for entry in store.audit_entries(event="stage", status="success")}
    quarantined = {name: audit[name]["rows_quarantined"] for name in STAGES}
    return result | {"quarantined": quarantined, "gold": as_json(gold_rows(home / "warehouse.duckdb"))}


def whole_hand_written(workdir: Path) -> dict:
    return timed_process([sys.executable, str(HAND_WRITTEN), "full", str(workdir)])


def alternating(repeat: int, sides: dict) -> list[str]:
    """The sides in the order of repeat `repeat`: one goes first on even repeats, the other on odd ones."""
    return list(sides) if repeat % 2 == 0 else list(sides)[::-1]


def whole_process(rows: int, repeats: int) -> None:
    """Both sides as processes on `rows` events from empty lakes, Spark start included in both."""
    sides = {"medallion": whole_medallion, "hand-written": whole_hand_written}
    results: dict[str, list[dict]] = {side: [] for side in sides}
    with local_s3(buckets=(BUCKET,)), tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        summary = write_sample_data(f"s3://{BUCKET}", rows)
        for repeat in range(repeats):
            for side in alternating(repeat, sides):
                with tempfile.TemporaryDirectory(dir=scratch) as workdir:
                    results[side].append(sides[side](Path(workdir)))
                check(results[side][-1], summary, side)
            assert results["medallion"][-1]["gold"] == results["hand-written"][-1]["gold"], "gold differs"
    report_processes(f"{rows:,} events from empty lakes", results, goal=1.1)


def batch_process(rows: int, batch: int, repeats: int) -> None:
    """A first build of `rows` events (untimed), then `repeats` batches of `batch` new events (bench/
    incremental.py's days: late events and copies), each run by `medallion run` and by bench/incremental.py's
    hand-written incremental script, both as processes; their gold must be equal after every batch."""
    rng, earlier = random.Random(35), []
    results: dict[str, list[dict]] = {"medallion": [], "hand-written": []}
    with local_s3(buckets=(BUCKET,)), tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        home, hand = Path(scratch) / "home", Path(scratch) / "hand"
        hand.mkdir()
        medallion = Installation(home)  # the embedded home's files: catalog.db, lake/, warehouse.duckdb
        script = [sys.executable, str(HAND_WRITTEN), "batch", str(hand), str(hand / "lake")]
        sides = {
            "medallion": lambda _: medallion_process(home),
            "hand-written": lambda day: timed_process([*script, str(day)]),
        }
        for day, events in enumerate([rows] + [batch] * repeats, start=1):
            lines = day_lines(rng, day, events, earlier)
            earlier = rng.sample(earlier + lines, min(len(earlier) + len(lines), 5_000))
            land(day, lines)
            land_day(hand, day, lines)
            timed = {side: sides[side](day) for side in alternating(day, sides)}
            assert as_json(medallion.gold()) == timed["hand-written"]["gold"], f"day {day}: gold differs"
            if day > 1:  # the first build is not timed
                for side, result in timed.items():
                    results[side].append(result)
    report_processes(f"batches of {batch:,} events after a first build of {rows:,}", results, goal=1.5)


def report_processes(what: str, results: dict[str, list[dict]], goal: float) -> None:
    """Each side's runs and medians, wall and CPU, their ratio against `goal`, and Medallion's stages split
    (medians): Spark's jobs, metadata commits, the rest; what no stage accounts for is the process's."""
    medallion, hand = results["medallion"], results["hand-written"]
    print(f"\nwhole process, {what}, Spark start included in both ({len(hand)} repeats, medians)")
    for side, runs in results.items():
        walls, cpus = [r["total"] for r in runs], [r["cpu"] for r in runs]
        print(
            f"{side:<14} wall {statistics.median(walls):7.2f} s {[round(w, 2) for w in walls]}  "
            f"Python CPU {statistics.median(cpus):7.2f} s {[round(c, 2) for c in cpus]}"
        )
    ratio = median_of(medallion, "total") / median_of(hand, "total")
    print(f"ratio Medallion / hand-written, wall: {ratio:.2f} (goal <= {goal})")
    ratio = median_of(medallion, "cpu") / median_of(hand, "cpu")
    print(f"ratio Medallion / hand-written, the Python processes' CPU: {ratio:.2f}")
    print(f"\n{'Medallion stage (medians, s)':<30}" + "".join(f"{part:>22}" for part in TIME_PARTS))
    for key in medallion[0]["splits"]:
        parts = [statistics.median(r["splits"][key][part] or 0.0 for r in medallion) for part in TIME_PARTS]
        print(f"{key:<30}" + "".join(f"{value:>22.2f}" for value in parts))
    outside = statistics.median(
        r["total"] - sum(s["duration_sec"] for s in r["splits"].values()) for r in medallion
    )
    print(f"{'outside the stages':<30}{outside:>22.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="--quick: 100,000 events, 2 repeats"
    )
    parser.add_argument("--rows", type=int, default=5_000_000, help="raw events (default 5,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each side (default 3)")
    parser.add_argument("--quick", action="store_true", help="a small run to check that everything works")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="both sides on a Spark standalone cluster (a master and a 2-core worker) on loopback",
    )
    parser.add_argument(
        "--whole-process",
        action="store_true",
        help="`medallion run` and the hand-written script each as a process, Spark start included",
    )
    parser.add_argument(
        "--batch-events",
        type=int,
        metavar="N",
        help="with --whole-process: batches of N new events after a first build of --rows events",
    )
    args = parser.parse_args()
    rows, repeats = (100_000, 2) if args.quick else (args.rows, args.repeats)
    if args.whole_process:
        if args.batch_events:
            batch_process(rows, args.batch_events, repeats)
        else:
            whole_process(rows, repeats)
        return

    with (
        local_s3(buckets=(BUCKET,)),
        tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch,
        standalone_cluster(Path(scratch), {}) if args.cluster else nullcontext((None, None)) as (master, _),
    ):
        if master:  # started after the S3 server, so that its executors see its endpoint and credentials
            # The cluster is on this machine: its executors' Python workers run this interpreter.
            os.environ.update(SPARK_MASTER=master, PYSPARK_PYTHON=sys.executable)
        spark = spark_session({"spark.driver.memory": DRIVER_MEMORY}, "medallion-bench")
        print(
            f"Spark {spark.version}, master {config.spark_remote() or config.spark_master()}, "
            f"driver memory {DRIVER_MEMORY}"
        )
        # The first Spark jobs in a JVM and the first Dagster run in a process are slower (class loading,
        # JIT, lazy imports): one untimed run of each side on a small sample, whose objects the full
        # sample then replaces (same names), so neither side pays for it.
        warm_up = write_sample_data(f"s3://{BUCKET}", WARM_UP_ROWS)
        for side in SIDES:
            run_side(spark, side, scratch, warm_up)

        start = time.perf_counter()
        summary = write_sample_data(f"s3://{BUCKET}", rows)
        objects = sum(f"/{PREFIX}" in url for url in summary.objects)
        print(f"wrote {rows:,} events in {objects} objects in {time.perf_counter() - start:.1f} s (untimed)")

        results: dict[str, list[dict]] = {side: [] for side in SIDES}
        for repeat in range(repeats):
            for side in SIDES if repeat % 2 == 0 else SIDES[::-1]:
                result = run_side(spark, side, scratch, summary)
                results[side].append(result)
                print(
                    f"repeat {repeat + 1} {side:<12} {result['total']:7.2f} s  "
                    + "  ".join(f"{name} {seconds:.2f}" for name, seconds in result["stages"].items())
                )
            gold = {side: results[side][-1]["gold"] for side in SIDES}
            assert len({repr(rows) for rows in gold.values()}) == 1, (
                f"the sides loaded other gold rows: {gold}"
            )
    medallion, hand, parquet = (results[side] for side in SIDES)
    print(
        f"\n{rows:,} events; every side loaded the same {len(hand[0]['gold'])} gold rows: "
        + ", ".join(f"{day} {events}/{users}" for day, events, users in hand[0]["gold"])
    )
    report(medallion, hand, parquet)


if __name__ == "__main__":
    main()
