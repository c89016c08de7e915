"""Benchmark: restating two days of user_events_etl against a full refresh (issue 34, item 3).

`--days` days of `--rows` events each (bench/incremental.py's events: late ones and copies included) land on
an S3 API server on loopback and one run builds the pipeline, silver partitioned by `days(event_ts)` and gold
by `event_date` and merged into the warehouse. Then, timed: a restatement of two days in the middle (the run
tag `medallion/restate`) and a full refresh (`medallion/full_refresh=*`), each the time of its silver and gold
stages (their audit rows), and the bytes each wrote in the lake (the snapshot summaries' `added-files-size`).
The restatement's gold must equal the full refresh's, in the warehouse too.

    python bench/restatement.py                          # 10 days of 50,000 events
    python bench/restatement.py --days 3 --rows 5000     # to check it works
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from incremental import FIRST_DAY, Installation, day_lines, land

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from medallion_assets.catalog.models import LakeTable  # noqa: E402
from medallion_assets.engine.refresh import EVERY_DATASET, FULL_REFRESH_TAG  # noqa: E402
from medallion_assets.engine.restatement import RESTATE_TAG  # noqa: E402
from medallion_assets.engine.spark import spark_session  # noqa: E402
from medallion_assets.local_s3 import local_s3  # noqa: E402
from medallion_assets.storage.lake.root import Lake  # noqa: E402

BUCKET = "medallion-raw"
GOLD = "gold_daily_user_events"
TABLES = (("silver", "user_events"), ("gold", "daily_user_events"))


def written_bytes(lake: str) -> int:
    """The bytes the last commit of silver and of gold added (their snapshot summaries)."""
    catalog = Lake.resolve(lake).catalog("lake").metadata()
    return sum(
        int(catalog.load_table(table).current_snapshot().summary["added-files-size"]) for table in TABLES
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--rows", type=int, default=50_000, help="events a day (default 50,000)")
    args = parser.parse_args()
    rng = random.Random(34)
    middle = FIRST_DAY.date() + timedelta(days=args.days // 2)
    restated = f"{middle - timedelta(days=1)}:{middle}"
    with local_s3(buckets=(BUCKET,)), tempfile.TemporaryDirectory(prefix="medallion-bench-") as scratch:
        spark = spark_session({"spark.driver.memory": "2g"}, "medallion-bench")
        medallion = Installation(Path(scratch))
        by_day = {"lake_table": LakeTable(partition_by=["event_date"]), "load_mode": "merge"}
        medallion.store.upsert(
            {"targets": [medallion.store.snapshot().targets[GOLD].model_copy(update=by_day)]}
        )
        earlier: list[str] = []
        for day in range(1, args.days + 1):
            lines = day_lines(rng, day, args.rows, earlier)
            earlier = rng.sample(earlier + lines, min(len(earlier) + len(lines), 5_000))
            land(day, lines)
        seconds, _, _ = medallion.run()
        print(f"Spark {spark.version}; {args.days} days of {args.rows:,} events; first build {seconds:.2f} s")
        timed = {}
        for name, tags in (
            ("restatement", {RESTATE_TAG: restated}),
            ("full refresh", {FULL_REFRESH_TAG: EVERY_DATASET}),
        ):
            seconds, audit, report = medallion.run(tags)
            stages = audit["silver_clean"]["duration_sec"] + audit["gold_daily_aggregate"]["duration_sec"]
            timed[name] = stages
            modes = {a.key: a.mode for a in report.assets if a.mode}
            print(
                f"{name:>12}: run {seconds:6.2f} s, silver + gold {stages:6.2f} s, "
                f"{written_bytes(medallion.lake):,} bytes written  {modes}"
            )
            if name == "restatement":
                restated_gold = medallion.gold()
        assert medallion.gold() == restated_gold, "the restatement's gold differs from a full refresh's"
        ratio = timed["restatement"] / timed["full refresh"]
        print(f"restatement of {restated} / full refresh (silver + gold): {ratio:.2f}")
        spark.stop()


if __name__ == "__main__":
    main()
