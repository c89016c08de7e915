"""What the factory adds for monitoring: Dagster freshness policies from SLAs, and the volume-anomaly and
data-quality-rate checks a stage reports beside its rule checks.

Kept apart from factory.py so the factory's own checks and metadata stay readable; `build_stage_asset` and its
`StageStep` call the three functions here. No `from __future__ import annotations`, as in the factory.
"""

from datetime import timedelta
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetKey,
    FreshnessPolicy,
    MetadataValue,
)

from medallion_assets.catalog.models import Sla, Stage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.monitoring.anomalies import dq_rate, volume_verdicts
from medallion_assets.control.monitoring.sla import effective_sla
from medallion_assets.control.monitoring.status import warehouse_versions
from medallion_assets.engine.stage import StageOutcome

VOLUME_CHECK, DQ_CHECK, WAREHOUSE_CHECK = "volume_anomaly", "dq_rate", "warehouse_matches_lake"


def freshness_policy(snapshot: CatalogSnapshot, stage: Stage) -> FreshnessPolicy | None:
    """The SLA of the stage's dataset as Dagster's freshness policy, which the daemon evaluates into fresh,
    late and stale."""
    sla = effective_sla(snapshot, stage)
    return policy_of(sla) if sla else None


def policy_of(sla: Sla) -> FreshnessPolicy:
    if sla.expected_by:
        hour, minute = map(int, sla.expected_by.split(":"))
        return FreshnessPolicy.cron(
            deadline_cron=f"{minute} {hour} * * *",
            lower_bound_delta=timedelta(minutes=sla.window_minutes),
            timezone=sla.timezone,
        )
    # The Sla model sets exactly one of expected_by and max_stale_minutes.
    assert sla.max_stale_minutes is not None
    return FreshnessPolicy.time_window(
        fail_window=timedelta(minutes=sla.max_stale_minutes),
        warn_window=timedelta(minutes=sla.warn_stale_minutes) if sla.warn_stale_minutes else None,
    )


def rows_judged(outcome: StageOutcome) -> int:
    """The rows the stage's casts and rules judged: what its SQL made of the inputs, when it has SQL (an
    aggregate's rows are not the rows it read), else the rows it read."""
    return int(outcome.details.get("rows_in", outcome.rows_read))


def rows_rejected(outcome: StageOutcome) -> int:
    """Quarantined rows (unparseable records included) and rows dropped by rules. Rows breaking two drop rules
    count twice, so the rate derived is a lower bound."""
    dropped = sum(o.failing_rows for o in outcome.rule_outcomes if o.rule.action == "drop")
    return outcome.rows_quarantined + dropped


def monitoring_check_specs(stage: Stage, key: AssetKey, snapshot: CatalogSnapshot) -> list[AssetCheckSpec]:
    pipeline = snapshot.pipelines[stage.pipeline_id]
    specs = []
    if pipeline.volume_band:
        band = pipeline.volume_band
        specs.append(
            AssetCheckSpec(
                VOLUME_CHECK,
                asset=key,
                description=(
                    f"rows read and written within median ± {band.k:g}·MAD of the last {band.runs} "
                    "successful runs"
                ),
            )
        )
    specs.append(
        AssetCheckSpec(
            DQ_CHECK,
            asset=key,
            description=(
                f"share of the rows the stage judges that no cast or rule rejects at least "
                f"{pipeline.min_dq_rate:.2%} ({pipeline.dq_severity} below it)"
            ),
        )
    )
    if snapshot.targets[stage.target_id].kind == "warehouse":
        specs.append(
            AssetCheckSpec(
                WAREHOUSE_CHECK,
                asset=key,
                description="the warehouse table holds the lake's current version (judged by each run, and "
                "by the medallion_control sensor after a rollback)",
            )
        )
    return specs


def warehouse_verdict(
    store: CatalogStore, snapshot: CatalogSnapshot, dataset: str
) -> tuple[bool, dict[str, Any]] | None:
    """Whether the warehouse table of `dataset` holds the lake's current version, and the metadata that
    names both versions; None before its first load."""
    versions = warehouse_versions(store, snapshot, dataset)
    if versions is None:
        return None
    return versions.agree(), {
        "message": str(versions),
        "lake_snapshot": MetadataValue.text(str(versions.current)),
        "warehouse_snapshot": MetadataValue.text(str(versions.held)),
    }


def monitoring_check_results(
    store: CatalogStore, snapshot: CatalogSnapshot, stage: Stage, outcome: StageOutcome, audit: dict[str, Any]
) -> list[AssetCheckResult]:
    """The stage's volume and quality verdicts, judged before its own audit entry joins the history, and
    whether its warehouse table now holds the lake's current version. A volume or quality warning or failure
    is audited too, which is how the notification sensor hears of it. The stage's DQ rate is added to
    `outcome.details`."""
    pipeline = snapshot.pipelines[stage.pipeline_id]
    results = []
    if pipeline.volume_band:
        band = pipeline.volume_band
        verdicts = volume_verdicts(
            store,
            stage.pipeline_id,
            stage.stage_name,
            {"rows_read": outcome.rows_read, "rows_written": outcome.rows_written},
            band,
        )
        anomalies = [v for v in verdicts if v.status == "anomaly"]
        explanation = "; ".join(v.explanation(band) for v in verdicts)
        metadata: dict[str, Any] = {
            "explanation": explanation,
            "k": band.k,
            "history_runs": verdicts[0].history_runs,
            **{
                f"{v.metric}_{name}": value
                for v in verdicts
                for name, value in (("median", v.median), ("mad", v.mad), ("low", v.low), ("high", v.high))
                if value is not None
            },
        }
        results.append(
            AssetCheckResult(
                check_name=VOLUME_CHECK,
                passed=not anomalies,
                severity=AssetCheckSeverity.WARN,
                metadata=metadata,
            )
        )
        if anomalies:
            store.record_audit(
                **{**audit, "event": "volume_anomaly"},
                status="warn",
                error=explanation,
                rows_read=outcome.rows_read,
                rows_written=outcome.rows_written,
                details={"verdicts": [v.__dict__ for v in anomalies]},
            )
    judged, rejected = rows_judged(outcome), rows_rejected(outcome)
    rate = dq_rate(judged, rejected)
    if rate is not None:  # in the details, the rates reach the materialization's metadata and the audit log
        outcome.details.update(dq_rate=round(rate, 6), **rule_rates(outcome, judged))
    passed = rate is None or rate >= pipeline.min_dq_rate
    message = (
        "no rows judged"
        if rate is None
        else f"{rate:.2%} of {judged} rows passed, {rejected} rejected "
        f"(at least {pipeline.min_dq_rate:.2%} required)"
    )
    metadata = {
        "message": message,
        "threshold": pipeline.min_dq_rate,
        "rows_rejected": rejected,
        **rule_rates(outcome, judged),
    }
    if rate is not None:
        metadata["dq_rate"] = round(rate, 6)
    warn = pipeline.dq_severity == "warn"
    results.append(
        AssetCheckResult(
            check_name=DQ_CHECK,
            passed=passed,
            severity=AssetCheckSeverity.WARN if warn else AssetCheckSeverity.ERROR,
            metadata=metadata,
        )
    )
    if not passed:  # audited, which is how the notification sensor hears of it
        store.record_audit(
            **{**audit, "event": "check"},
            status="warn" if warn else "failed",
            error=f"{DQ_CHECK}: {message}",
            rows_read=outcome.rows_read,
            rows_written=outcome.rows_written,
        )
    if snapshot.targets[stage.target_id].kind == "warehouse":
        # Nothing loaded although the stage succeeded: nothing the warehouse could disagree with.
        agree, metadata = warehouse_verdict(store, snapshot, stage.target_id) or (
            True,
            {"message": "nothing loaded"},
        )
        results.append(AssetCheckResult(check_name=WAREHOUSE_CHECK, passed=agree, metadata=metadata))
    return results


def rule_rates(outcome: StageOutcome, judged: int) -> dict[str, float]:
    """Per rule, the share of the rows judged that pass it."""
    if not judged:
        return {}
    return {f"dq_rate_{o.rule.name}": round(1 - o.failing_rows / judged, 6) for o in outcome.rule_outcomes}
