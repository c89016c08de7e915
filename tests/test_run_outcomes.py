"""What a run says about itself: a stage's SQL Spark cannot analyse in one line that names the stage, and
a share of rows quarantined above the default data-quality bar as success with warnings."""

from __future__ import annotations

import subprocess
import sys

import boto3
import pytest

from medallion_assets.control.monitoring.alerts import classify
from medallion_assets.engine.ingest import REJECTION_REASON


def test_sql_spark_cannot_analyse_fails_its_stage_in_one_line_naming_it(medallion, capfd):
    stage = next(s for s in medallion.store.snapshot().stages("user_events_etl") if s.stage_order == 3)
    # A function no engine has: sqlglot parses it as any call, so only Spark's analysis can refuse it.
    sql = stage.transform_sql.replace("COUNT(DISTINCT user_id)", "no_such_function(user_id)")
    medallion.store.upsert({"stages": [stage.model_copy(update={"transform_sql": sql})]})

    report = medallion.run("user_events_etl")

    gold = report.assets[-1]
    assert (report.status, gold.status) == ("failed", "failed")
    assert gold.reason == (
        "SqlNotAnalyzable: stage user_events_etl.gold_daily_aggregate: Spark cannot analyze its SQL: "
        "[UNRESOLVED_ROUTINE] Cannot resolve routine `NO_SUCH_FUNCTION` on search path [`system`.`builtin`, "
        "`system`.`session`, `spark_catalog`.`default`]. SQLSTATE: 42883 (attempt 1; never retried)"
    )
    # Spark's plan and stack trace are in the run's log (the failure's cause), not on the screen.
    screen = capfd.readouterr()
    assert "at org.apache.spark" not in screen.out + screen.err


def test_a_run_that_quarantined_two_percent_succeeds_with_warnings(medallion, raw_data):
    # Unparseable lines until 2% of the raw events go to quarantine: over the default min_dq_rate of 99%.
    extra = round((0.02 * raw_data.event_lines - raw_data.malformed_events) / 0.98)
    body = "".join(f'{{"event_id": "broken-{n}", \n' for n in range(extra))
    boto3.client("s3").put_object(Bucket="medallion-raw", Key="user_events/broken.jsonl", Body=body.encode())

    report = medallion.run("user_events_etl")

    assert report.status == "success_with_warnings"
    bronze = report.assets[0]
    assert (bronze.key, bronze.status) == ("bronze/user_events", "success")
    assert (bronze.rows_read, bronze.rows_quarantined) == (
        raw_data.event_lines + extra,
        raw_data.malformed_events + extra,
    )
    assert {"name": "dq_rate", "passed": False, "severity": "warn"} in bronze.checks
    # The report names why, with counts: every line here is one kind of reject.
    assert bronze.quarantine_reasons == {REJECTION_REASON["jsonl"]: raw_data.malformed_events + extra}
    assert [c for a in report.assets[1:] for c in a.checks if c["name"] == "dq_rate"] == [
        {"name": "dq_rate", "passed": True, "severity": "warn"}
    ] * 2
    # Audited as a warning, which is how the notification sensor hears of it (a check_warned event).
    [warning] = medallion.store.audit_entries(event="check", status="warn")
    assert classify(warning) == "check_warned"
    rate = 1 - (raw_data.malformed_events + extra) / (raw_data.event_lines + extra)
    assert warning["error"] == (
        f"dq_rate: {rate:.2%} of {raw_data.event_lines + extra} rows passed, "
        f"{raw_data.malformed_events + extra} rejected (at least 99.00% required)"
    )


EARLY_STOP = """
import sys
from medallion_assets.engine.spark import spark_session
conf = {"spark.master": "local[1]"}
if len(sys.argv) > 1:
    conf["spark.python.daemon.module"] = sys.argv[1]
spark = spark_session(conf, "early-stop")
frame = spark.range(0, 5_000_000, numPartitions=1)
for _ in range(2):  # Spark closes the Python worker's socket once it has the first row it asked for
    print(frame.mapInArrow(lambda batches: batches, frame.schema).limit(1).collect())
spark.stop()
"""


@pytest.mark.integration  # Spark in a fresh interpreter, whose stderr is the user's screen
def test_python_tasks_spark_stops_reading_early_print_no_traceback():
    def run(*daemon_module: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", EARLY_STOP, *daemon_module], capture_output=True, text=True, timeout=600
        )

    ours = run()
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout.splitlines() == ["[Row(id=0)]", "[Row(id=0)]"]
    assert "Traceback" not in ours.stderr and "BrokenPipeError" not in ours.stderr
    # PySpark's own daemon, on the same job, prints the worker's broken pipe as an error.
    theirs = run("pyspark.daemon")
    assert theirs.returncode == 0 and theirs.stderr.count("BrokenPipeError: [Errno 32] Broken pipe") == 2
