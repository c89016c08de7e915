"""The asset factory: catalog rows → Dagster assets and asset checks.

One asset per dataset (a stage's target), with deps from the stage's inputs and one asset check per
validation rule. Raw sources are external assets, so the lineage graph starts at the S3 files. How each looks
in Dagster (keys, groups, kinds, owners, metadata, pools) is the translator's (`assets/translator.py`). Each
asset is a thin wrapper (`StageStep`) over `engine.stage.StageRunner`.

No `from __future__ import annotations` here: Dagster reads the asset function's annotations at definition
time to recognise its context and resources.
"""

from collections.abc import Iterator
from functools import partial
from typing import Any, cast

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    DataVersion,
    Failure,
    MaterializeResult,
    MetadataValue,
    multi_asset,
)

from medallion_assets.assets.monitoring import monitoring_check_results, monitoring_check_specs
from medallion_assets.assets.translator import MedallionTranslator
from medallion_assets.catalog.models import Rule, Stage, history_rules
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.healing.failures import adjustments, after_failure, catalog_healed
from medallion_assets.control.healing.remedies import Fault
from medallion_assets.control.steering.flags import (
    HALT_REASON_TAG,
    HALTED_TAGS,
    disabled_reason,
    read_control_state,
)
from medallion_assets.control.steering.throttles import CatalogThrottles
from medallion_assets.engine.refresh import RefreshRefused, requested_full_refresh
from medallion_assets.engine.restatement import requested_restatement
from medallion_assets.engine.stage import Adjustments, StageOutcome, StageRunner
from medallion_assets.engine.transform import top_quarantine_reasons
from medallion_assets.engine.validation import RuleOutcome
from medallion_assets.errors import SqlNotAnalyzable, StageHalted
from medallion_assets.openlineage.emitter import emitter
from medallion_assets.openlineage.events import asset_result, rerouted, stage_asset_run
from medallion_assets.recovery.routes import CatalogRoutes
from medallion_assets.redaction import scrub
from medallion_assets.resources import CatalogResource, LakeResource, SparkResource, WarehouseResource
from medallion_assets.storage.lake.layout import table_of
from medallion_assets.storage.lake.metadata import TableInfo, table_info
from medallion_assets.storage.lake.root import Lake


def _rule_name(rule: Rule) -> str:
    # Optional only in what the catalog's author writes: the Rule model fills in a name where none is given.
    assert rule.name is not None
    return rule.name


def _check_specs(stage: Stage, key: AssetKey, snapshot: CatalogSnapshot) -> list[AssetCheckSpec]:
    """One check per rule of the stage's set, and per check its target's kind implies (type 2 history)."""
    rules = snapshot.rule_sets[stage.validation_set_id].check_def if stage.validation_set_id else []
    rules = [*rules, *history_rules(snapshot.targets[stage.target_id])]
    return [
        AssetCheckSpec(
            _rule_name(rule),
            asset=key,
            blocking=rule.severity == "error",
            description=f"{rule.type} ({rule.severity}, action {rule.action})",
        )
        for rule in rules
    ]


def _check_result(outcome: RuleOutcome, rows_in_dataset: int) -> AssetCheckResult:
    """A rule's check result. Its `row_count` is the dataset's, so that the UI's plot of it follows the
    table; the rows the rule judged in this run (an incremental run's, none when it kept the verdict of an
    unchanged version) are `rows_checked_this_run`."""
    metadata: dict[str, Any] = {
        k: v for k, v in outcome.observed.items() if isinstance(v, (int, float, str, bool))
    }
    if "row_count" in metadata:
        metadata["rows_checked_this_run"] = 0 if outcome.carried else metadata["row_count"]
        metadata["row_count"] = rows_in_dataset
    return AssetCheckResult(
        check_name=outcome.rule.name,
        passed=outcome.passed,
        severity=AssetCheckSeverity.ERROR if outcome.rule.severity == "error" else AssetCheckSeverity.WARN,
        metadata={**metadata, "failing_rows": outcome.failing_rows, "message": outcome.message},
    )


def _unchanged(result: AssetCheckResult, snapshot_id: int) -> AssetCheckResult:
    """A check's result on a version the run left as it was, saying so where the UI shows its metadata."""
    note = MetadataValue.text(f"unchanged since snapshot {snapshot_id}")
    return result._replace(metadata={**result.metadata, "unchanged": note})


def _materialize_result(
    outcome: StageOutcome, monitoring: list[AssetCheckResult], table: TableInfo | None
) -> MaterializeResult[Any]:
    """The materialization: counts, the lake table and the snapshot published, which is the asset's data
    version. A version kept on a branch because a blocking check failed is named, not published."""
    # Dagster's row count is the dataset's; a bronze run appends a batch to it (rows_written).
    metadata: dict[str, Any] = {
        "dagster/row_count": outcome.details.get("rows_in_dataset", outcome.rows_written),
        "rows_written": outcome.rows_written,
        "rows_read": outcome.rows_read,
        "rows_quarantined": outcome.rows_quarantined,
        "dagster/table_name": outcome.table,
        "duration_sec": round(outcome.times.wall_sec, 3),
        **outcome.times.as_metadata(),
        **outcome.details,
    }
    if table is not None:
        metadata["location"] = MetadataValue.path(scrub(table.location))
    if outcome.unchanged_since is not None:
        metadata["unchanged_since"] = str(outcome.unchanged_since)
    if outcome.load:
        metadata.update(
            warehouse_table=outcome.load.table,
            rows_loaded=outcome.load.rows_loaded,
            rows_in_table=outcome.load.rows_in_table,
        )
    rows = metadata["dagster/row_count"]
    checks = [*(_check_result(o, rows) for o in outcome.rule_outcomes), *monitoring]
    if outcome.unchanged_since is not None:
        checks = [_unchanged(check, outcome.unchanged_since) for check in checks]
    return MaterializeResult(
        metadata=metadata,
        check_results=checks,
        data_version=DataVersion(str(outcome.snapshot_id)) if outcome.snapshot_id is not None else None,
    )


def build_stage_asset(
    stage: Stage, snapshot: CatalogSnapshot, lake: Lake, translator: MedallionTranslator
) -> AssetsDefinition:
    """The asset a stage materializes, with one check per rule; structure from `snapshot`, switches read
    live, names from `translator`."""
    spec = translator.get_asset_spec(stage, snapshot, lake)
    key = spec.key

    # A one-asset multi_asset, because only there are check outputs optional too (can_subset): a halted
    # stage evaluates none of its checks.
    @multi_asset(
        name=key.to_python_identifier(),
        specs=[spec],
        check_specs=[*_check_specs(stage, key, snapshot), *monitoring_check_specs(stage, key, snapshot)],
        can_subset=True,
        pool=translator.get_pool(stage, snapshot),
    )
    def _stage_asset(
        context: AssetExecutionContext,
        spark: SparkResource,
        lake: LakeResource,
        warehouse: WarehouseResource,
        catalog: CatalogResource,
    ) -> Iterator[MaterializeResult[Any]]:
        step = StageStep(context, stage, snapshot, catalog.get_store(), lake.get_lake(), warehouse.url)
        yield step.run(spark, warehouse)

    return _stage_asset


class StageStep:
    """One materialization of a stage's asset: kill switches before and during it, healing's adjustments, the
    engine's run, and its audit rows, OpenLineage events and Dagster result."""

    def __init__(
        self,
        context: AssetExecutionContext,
        stage: Stage,
        snapshot: CatalogSnapshot,
        store: CatalogStore,
        lake: Lake,
        warehouse_url: str,
    ) -> None:
        self.context, self.stage, self.snapshot, self.store = context, stage, snapshot, store
        self.lake, self.warehouse_url = lake, warehouse_url
        self.target = snapshot.targets[stage.target_id]
        self.audit = dict(
            run_id=context.run_id,
            pipeline_id=stage.pipeline_id,
            stage_name=stage.stage_name,
            dataset=self.target.target_id,
            event="stage",
        )
        self.lineage = stage_asset_run(snapshot, stage, context.run_id, lake, warehouse_url)
        self.run_tags = context.instance.get_run_by_id(context.run_id).tags

    def run(self, spark: SparkResource, warehouse: WarehouseResource) -> MaterializeResult[Any]:
        """Run the stage unless a kill switch halts it; a failure goes to healing and retries. A full refresh
        or restatement the run's tags ask for is checked by every step, bronze's included, so a bad one
        writes nothing."""
        try:
            full_refresh = requested_full_refresh(self.run_tags, self.snapshot, self.stage.pipeline_id)
            restatement = requested_restatement(self.run_tags, self.snapshot, self.stage.pipeline_id)
        except RefreshRefused as refused:
            # Whoever launched the run asked for something else: nothing for healing or retries to do.
            self.store.record_audit(**self.audit, status="failed", error=str(refused))
            raise Failure(description=str(refused), allow_retries=False) from None
        emitter().emit(*self.lineage.start())
        reason = self.halt_reason(self.stage)
        if reason:
            raise self.halt(reason, "before start")
        # Healing may change the catalog mid-run (a new column) and ask for adjustments (smaller load
        # batches); the run's tags say so (control/failures.py): then every step reads the catalog as healing
        # left it.
        live = self.store.snapshot() if catalog_healed(self.run_tags) else self.snapshot
        runner = StageRunner(
            spark.get_session(self.lake),
            live,
            self.store,
            self.lake,
            warehouse.get_warehouse() if self.target.kind == "warehouse" else None,
            self.halt_reason,
            Adjustments(**adjustments(self.run_tags, self.stage)),
            throttle=CatalogThrottles(self.store),
            recovery=CatalogRoutes(self.store, live),
            run_id=self.context.run_id,
            full_refresh=full_refresh,
            restatement=restatement,
        )
        try:
            # The snapshot types its rows as the base model; the stages table holds Stage rows.
            outcome = runner.run_stage(cast(Stage, live.tables["stages"].get(self.stage.key(), self.stage)))
        except StageHalted as halted:
            raise self.halt(str(halted), "before the load") from None
        except SqlNotAnalyzable as error:
            # One line that names the stage. Spark's exception, with its plan and stack trace, stays the
            # cause: in the run's log, and for healing rules that name it.
            named = SqlNotAnalyzable(f"stage {self.stage.pipeline_id}.{self.stage.stage_name}: {error}")
            named.__cause__ = error.__cause__
            raise self.failed(named) from named
        except Exception as error:
            raise self.failed(error) from error
        finally:
            if runner.warehouse is not None:
                runner.warehouse.close()
        if outcome.rows_quarantined:  # the run report names them: this run's, a bronze batch's or all
            quarantine, batch_id = table_of(self.target).quarantine(), outcome.details.get("batch_id")
            # Rejects a failed blocking rule kept unpublished wait on the run's branch.
            rejects = (
                runner.lake.batch_rows(quarantine, batch_id)
                if batch_id
                else runner.lake.read(quarantine, branch=outcome.quarantine_branch)
            )
            outcome.details["quarantine_reasons"] = top_quarantine_reasons(rejects)
        if outcome.read != self.stage.input_ids():  # re-routed: the closing events name what was really read
            self.lineage = rerouted(self.lineage, live, self.lake, outcome.read)
        return self.succeeded(outcome)

    def halt_reason(self, current: Stage) -> str | None:
        return disabled_reason(self.snapshot, read_control_state(self.store), current)

    def halt(self, reason: str, when: str) -> Failure:
        """A halt is no success: the step fails with the reason as its message, and the run's tags say it
        was halted (not broken), and why, where the runs list and the run page show them."""
        self.store.record_audit(**self.audit, status="halted", error=reason)
        emitter().emit(*self.lineage.finish(aborted=True))
        self.context.instance.add_run_tags(self.context.run_id, {**HALTED_TAGS, HALT_REASON_TAG: reason})
        return Failure(
            description=f"halted by a kill switch {when}: {reason}",
            allow_retries=False,
            metadata={"medallion/status": "halted", "reason": reason},
        )

    def failed(self, error: Exception) -> Exception:
        """Audit and report the failure; what to raise is healing's and the retry policy's answer."""
        attempt = self.context.retry_number + 1
        self.store.record_audit(
            **self.audit,
            status="failed",
            error=f"{type(error).__name__}: {error}",
            details={"attempt": attempt},
        )
        emitter().emit(*self.lineage.finish(error=error))
        fault = Fault.of(error, self.stage, self.target.layer, attempt, self.context.run_id)
        return after_failure(
            self.store,
            fault,
            self.lake,
            self.warehouse_url,
            self.run_tags,
            partial(self.context.instance.add_run_tags, self.context.run_id),
        )

    def succeeded(self, outcome: StageOutcome) -> MaterializeResult[Any]:
        """Audit the outcome, close its OpenLineage run and report it with its check results."""
        monitoring = monitoring_check_results(self.store, self.snapshot, self.stage, outcome, self.audit)
        # Failed blocking checks in the result make Dagster fail the step and skip everything downstream.
        self.store.record_audit(
            **self.audit,
            status="failed" if outcome.blocking_error() else "success",
            error=outcome.blocking_error(),
            rows_read=outcome.rows_read,
            rows_written=outcome.rows_written,
            rows_quarantined=outcome.rows_quarantined,
            duration_sec=outcome.times.wall_sec,
            # The verdicts of the version, which a later run that finds it unchanged reports again.
            details={
                **outcome.details,
                "verdicts": {o.rule.name: o.verdict() for o in outcome.rule_outcomes},
            },
        )
        table = table_info(self.lake, table_of(self.target))
        lineage_result = asset_result(outcome, table)
        emitter().emit(*self.lineage.finish(lineage_result, error=outcome.blocking_error()))
        return _materialize_result(outcome, monitoring, table)


def build_assets(
    snapshot: CatalogSnapshot, lake: Lake, translator: MedallionTranslator | None = None
) -> list[AssetsDefinition | AssetSpec]:
    """Every dataset in the catalog as an asset, and every raw source read by a stage as an external asset,
    named by `translator` (by default `MedallionTranslator`'s rules)."""
    translator = translator or MedallionTranslator()
    assets: list[AssetsDefinition | AssetSpec] = []
    sources_seen: set[str] = set()
    for stage in snapshot.stages():
        for input_id in stage.input_ids():
            if input_id in snapshot.sources and input_id not in sources_seen:
                sources_seen.add(input_id)
                pipeline = snapshot.pipelines[stage.pipeline_id]
                assets.append(translator.get_source_spec(snapshot.sources[input_id], pipeline))
        assets.append(build_stage_asset(stage, snapshot, lake, translator))
    return assets
