"""What a run says about itself: a stage's SQL Spark cannot analyse in one line that names the stage."""

from __future__ import annotations


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
