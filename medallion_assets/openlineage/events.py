"""OpenLineage events for Medallion runs.

Runs nest three deep, tied by the parent run facet (the run one level up) and its root (the Dagster run):

    Dagster run    job <pipeline>                         runId: the Dagster run id
    └─ asset run   job <pipeline>.<dataset>               one per materialization attempt
       ├─ query    job <pipeline>.<dataset>.query_<n>     each SQL statement the asset runs
       └─ checks   job <pipeline>.<dataset>.checks        the asset checks, reading the written data back

Jobs and datasets are named in `openlineage/naming.py`; events are sent by `openlineage/emitter.py`. Check
results become `dataQualityAssertions`, which the specification defines as an input facet: the facet of the
dataset the checks run reads.

Free text that leaves the process (SQL, the stage definition, error messages) is scrubbed of credentials:
passwords in URLs, the values of secret-looking environment variables, and COPY credentials.
"""

from __future__ import annotations

import importlib.metadata
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, cast

import yaml
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import (
    DatasetFacet,
    JobFacet,
    OutputDatasetFacet,
    RunFacet,
    column_lineage_dataset,
    data_quality_assertions_dataset,
    dataset_version_dataset,
    error_message_run,
    job_type_job,
    output_statistics_output_dataset,
    parent_run,
    processing_engine_run,
    schema_dataset,
    source_code_job,
    sql_job,
)
from openlineage.client.uuid import generate_new_uuid

from medallion_assets.catalog.models import ColumnLineage, Stage
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.openlineage.naming import DatasetLocation, dataset_location, job_name, namespace
from medallion_assets.redaction import scrub
from medallion_assets.storage.lake.metadata import TableInfo
from medallion_assets.storage.lake.root import Lake

if TYPE_CHECKING:  # the engine imports PySpark, which building events does not need
    from medallion_assets.engine.stage import StageOutcome

PRODUCER = f"urn:medallion:{importlib.metadata.version('medallion')}"
INTEGRATION = "DAGSTER"
End = Literal["COMPLETE", "FAIL", "ABORT"]

# The catalog's column transformations in the terms of the column lineage facet (type, subtype).
_TRANSFORMATIONS = {
    "identity": ("DIRECT", "IDENTITY"),
    "expression": ("DIRECT", "TRANSFORMATION"),
    "aggregate": ("DIRECT", "AGGREGATION"),
    "filter": ("INDIRECT", "FILTER"),
    "join_key": ("INDIRECT", "JOIN"),
}


def _now() -> datetime:
    return datetime.now(UTC)


# ------------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CheckResult:
    """One asset check's result, as `dataQualityAssertions` reports it."""

    name: str
    assertion: str
    passed: bool
    severity: str
    column: str | None = None
    description: str | None = None
    params: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class AssetResult:
    """What a materialization wrote: the lake output's rows, bytes, files and columns, the rows loaded into
    the warehouse, and the check results."""

    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    columns: Mapping[str, str] = field(default_factory=dict)
    loaded_rows: int | None = None
    checks: Sequence[CheckResult] = ()
    version: str | None = None  # the lake table's snapshot this materialization published
    input_versions: Mapping[str, str] = field(default_factory=dict)  # input dataset → the snapshot read


def asset_result(outcome: StageOutcome, table: TableInfo | None) -> AssetResult:
    """A stage outcome's AssetResult: rows, the bytes and files of the version it published (`table`'s
    metadata), columns, check results, rows loaded."""
    published = table.snapshot(outcome.snapshot_id) if table and outcome.snapshot_id is not None else None
    totals = published.summary if published else {}
    size = int(totals["total-files-size"]) if "total-files-size" in totals else None
    files = int(totals["total-data-files"]) if "total-data-files" in totals else None
    checks = [
        CheckResult(
            name=cast(str, o.rule.name),  # Rule's own validation names every rule
            assertion=o.rule.type,
            passed=o.passed,
            severity=o.rule.severity,
            column=",".join(o.rule.subject_columns()) or None,
            description=o.message,
            params={
                "failing_rows": o.failing_rows,
                **{k: v for k, v in o.observed.items() if isinstance(v, (int, float, str, bool))},
            },
        )
        for o in outcome.rule_outcomes
    ]
    return AssetResult(
        version=str(outcome.snapshot_id) if outcome.snapshot_id is not None else None,
        input_versions={dataset: str(version) for dataset, version in outcome.input_snapshots.items()},
        rows=outcome.rows_written,
        bytes=size,
        files=files,
        columns=dict(outcome.columns),
        loaded_rows=outcome.load.rows_loaded if outcome.load else None,
        checks=checks,
    )


# -------------------------------------------------------------------------------------------------- events


def _job_type(job_type: str) -> job_type_job.JobTypeJobFacet:
    return job_type_job.JobTypeJobFacet(
        processingType="BATCH", integration=INTEGRATION, jobType=job_type, producer=PRODUCER
    )


def _parent(run_id: str, job: str, root_run_id: str, root_job: str) -> parent_run.ParentRunFacet:
    return parent_run.ParentRunFacet(
        run=parent_run.Run(runId=run_id),
        job=parent_run.Job(namespace=namespace(), name=job),
        root=parent_run.Root(
            run=parent_run.RootRun(runId=root_run_id),
            job=parent_run.RootJob(namespace=namespace(), name=root_job),
        ),
        producer=PRODUCER,
    )


def _sql_facet(sql: str, dialect: str) -> sql_job.SQLJobFacet:
    return sql_job.SQLJobFacet(query=scrub(sql), dialect=dialect, producer=PRODUCER)


def _error_facet(error: BaseException | str) -> error_message_run.ErrorMessageRunFacet:
    if isinstance(error, BaseException):
        message = f"{type(error).__name__}: {error}"
        stack = "".join(traceback.format_exception(error))
    else:
        message, stack = error, None
    return error_message_run.ErrorMessageRunFacet(
        message=scrub(message),
        programmingLanguage="python",
        stackTrace=scrub(stack) if stack else None,
        producer=PRODUCER,
    )


def _version(version: str | None) -> dict[str, DatasetFacet]:
    """The dataset's version facet: the lake table's snapshot id."""
    if version is None:
        return {}
    return {
        "version": dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=version, producer=PRODUCER
        )
    }


def _schema(columns: Mapping[str, str]) -> dict[str, DatasetFacet]:
    if not columns:
        return {}
    fields = [
        schema_dataset.SchemaDatasetFacetFields(name=name, type=type_name, ordinal_position=position)
        for position, (name, type_name) in enumerate(columns.items(), 1)
    ]
    return {"schema": schema_dataset.SchemaDatasetFacet(fields=fields, producer=PRODUCER)}


def _event(
    state: str,
    run_id: str,
    job: str,
    job_facets: dict[str, JobFacet],
    run_facets: dict[str, RunFacet],
    when: datetime,
    inputs: Sequence[InputDataset] = (),
    outputs: Sequence[OutputDataset] = (),
) -> RunEvent:
    return RunEvent(
        eventType=RunState(state),
        eventTime=when.isoformat(),
        producer=PRODUCER,
        run=Run(runId=run_id, facets=run_facets),
        job=Job(namespace=namespace(), name=job, facets=job_facets),
        inputs=list(inputs),
        outputs=list(outputs),
    )


def pipeline_run_event(
    pipeline_id: str,
    dagster_run_id: str,
    state: Literal["START", End],
    error: BaseException | str | None = None,
    when: datetime | None = None,
) -> RunEvent:
    """An event of the Dagster run itself (job `<pipeline>`): the root every asset run points at."""
    run_facets: dict[str, RunFacet] = (
        {"errorMessage": _error_facet(error)} if error is not None and state == "FAIL" else {}
    )
    return _event(
        state,
        dagster_run_id,
        job_name(pipeline_id),
        {"jobType": _job_type("JOB")},
        run_facets,
        when or _now(),
    )


@dataclass
class AssetRun:
    """An asset's materialization as OpenLineage sees it: `start()` at the beginning, `finish()` at the end.

    `inputs` are the datasets actually read (after any re-route), `outputs` what the asset writes (its lake
    folder and, for a warehouse target, the table). `queries` are (sql, dialect) in the order the asset runs
    them.
    """

    pipeline_id: str
    dataset: str
    dagster_run_id: str
    inputs: Sequence[DatasetLocation]
    outputs: Sequence[DatasetLocation]
    queries: Sequence[tuple[str, str]] = ()
    source_code: str = ""
    column_lineage: Sequence[ColumnLineage] = ()
    run_id: str = field(default_factory=lambda: str(generate_new_uuid()))
    started_at: datetime = field(default_factory=_now)

    @property
    def job(self) -> str:
        """The asset's job name: pipeline.dataset."""
        return job_name(self.pipeline_id, self.dataset)

    def _job_facets(self) -> dict[str, JobFacet]:
        facets: dict[str, JobFacet] = {"jobType": _job_type("ASSET")}
        if self.queries:
            facets["sql"] = _sql_facet(*self.queries[0])
        if self.source_code:
            # A metadata-driven stage's source code is its catalog row.
            facets["sourceCode"] = source_code_job.SourceCodeJobFacet(
                language="yaml", sourceCode=scrub(self.source_code), producer=PRODUCER
            )
        return facets

    def _run_facets(self) -> dict[str, RunFacet]:
        engine = processing_engine_run.ProcessingEngineRunFacet(
            version=importlib.metadata.version("dagster"),
            name="dagster",
            openlineageAdapterVersion=importlib.metadata.version("medallion"),
            producer=PRODUCER,
        )
        root = job_name(self.pipeline_id)
        return {
            "parent": _parent(self.dagster_run_id, root, self.dagster_run_id, root),
            "processing_engine": engine,
        }

    def _inputs(self, result: AssetResult | None = None) -> list[InputDataset]:
        versions = result.input_versions if result else {}
        return [
            InputDataset(
                *location.naming(),
                facets={**_schema(location.columns), **_version(versions.get(location.dataset_id))},
            )
            for location in self.inputs
        ]

    def _outputs(self, result: AssetResult | None) -> list[OutputDataset]:
        outputs = []
        for location in self.outputs:
            columns = (result.columns if result and result.columns else None) or location.columns
            lake_version = result.version if result and location.table is None else None
            facets = {**_schema(columns), **self._column_lineage(), **_version(lake_version)}
            output_facets: dict[str, OutputDatasetFacet] = {}
            rows = (result.loaded_rows if location.table else result.rows) if result else None
            if result and rows is not None:
                lake = location.table is None
                output_facets["outputStatistics"] = (
                    output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                        rowCount=rows,
                        size=result.bytes if lake else None,
                        fileCount=result.files if lake else None,
                        producer=PRODUCER,
                    )
                )
            outputs.append(OutputDataset(*location.naming(), facets=facets, outputFacets=output_facets))
        return outputs

    def _column_lineage(self) -> dict[str, DatasetFacet]:
        named = {location.dataset_id: location.naming() for location in self.inputs}
        fields: dict[str, list[column_lineage_dataset.InputField]] = {}
        for row in self.column_lineage:
            if row.downstream != self.dataset or row.upstream not in named:
                continue
            kind, subtype = _TRANSFORMATIONS[row.transformation]
            fields.setdefault(row.downstream_column, []).append(
                column_lineage_dataset.InputField(
                    *named[row.upstream],
                    field=row.upstream_column,
                    transformations=[column_lineage_dataset.Transformation(type=kind, subtype=subtype)],
                )
            )
        if not fields:
            return {}
        return {
            "columnLineage": column_lineage_dataset.ColumnLineageDatasetFacet(
                fields={
                    column: column_lineage_dataset.Fields(inputFields=inputs)
                    for column, inputs in fields.items()
                },
                producer=PRODUCER,
            )
        }

    def start(self) -> list[RunEvent]:
        """The asset run's START event."""
        return [
            _event(
                "START",
                self.run_id,
                self.job,
                self._job_facets(),
                self._run_facets(),
                self.started_at,
                self._inputs(),
                self._outputs(None),
            )
        ]

    def finish(
        self,
        result: AssetResult | None = None,
        error: BaseException | str | None = None,
        aborted: bool = False,
    ) -> list[RunEvent]:
        """The events that close the asset run, in emission order: each query's child run, the checks' child
        run (when there are check results), then the asset's COMPLETE, FAIL (with `error`) or ABORT
        (`aborted`: halted by a kill switch or cancelled).

        The engine does not time queries one by one: a query run spans the asset run, and ends as the asset
        did, or COMPLETE when the asset produced a result (the queries did their part).
        """
        state: End = "ABORT" if aborted else "FAIL" if error is not None else "COMPLETE"
        ended = _now()
        events = []
        for number, (sql, dialect) in enumerate(self.queries, 1):
            events += self._child(
                f"query_{number}",
                "QUERY",
                "COMPLETE" if result else state,
                ended,
                {"sql": _sql_facet(sql, dialect)},
            )
        if result and result.checks:
            events += self._child(
                "checks", "ASSET_CHECK", "COMPLETE", ended, {}, inputs=[self._checked(result)]
            )
        run_facets = self._run_facets()
        if state == "FAIL" and error is not None:  # FAIL is the state of an error
            run_facets["errorMessage"] = _error_facet(error)
        events.append(
            _event(
                state,
                self.run_id,
                self.job,
                self._job_facets(),
                run_facets,
                ended,
                self._inputs(result),
                self._outputs(result),
            )
        )
        return events

    def _checked(self, result: AssetResult) -> InputDataset:
        """The lake output as the checks read it, carrying their assertions."""
        lake = next(location for location in self.outputs if location.table is None)
        assertions = [
            data_quality_assertions_dataset.Assertion(
                assertion=c.assertion,
                success=c.passed,
                column=c.column,
                severity=c.severity,
                name=c.name,
                description=c.description,
                params=dict(c.params),
            )
            for c in result.checks
        ]
        return InputDataset(
            *lake.naming(),
            inputFacets={
                "dataQualityAssertions": data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
                    assertions=assertions, producer=PRODUCER
                )
            },
        )

    def _child(
        self,
        part: str,
        job_type: str,
        state: str,
        ended: datetime,
        job_facets: dict[str, JobFacet],
        inputs: Sequence[InputDataset] = (),
    ) -> list[RunEvent]:
        child_run_id, job = str(generate_new_uuid()), job_name(self.pipeline_id, self.dataset, part)
        run_facets: dict[str, RunFacet] = {
            "parent": _parent(self.run_id, self.job, self.dagster_run_id, job_name(self.pipeline_id))
        }
        job_facets = {"jobType": _job_type(job_type), **job_facets}
        return [
            _event("START", child_run_id, job, job_facets, run_facets, self.started_at, inputs),
            _event(state, child_run_id, job, job_facets, run_facets, ended, inputs),
        ]


def rerouted(run: AssetRun, snapshot: CatalogSnapshot, lake: Lake, dataset_ids: Sequence[str]) -> AssetRun:
    """The same asset run reading `dataset_ids`, as a re-route chose them: its closing events name those."""
    return replace(run, inputs=[dataset_location(snapshot, i, lake) for i in dataset_ids])


def stage_asset_run(
    snapshot: CatalogSnapshot,
    stage: Stage,
    dagster_run_id: str,
    lake: Lake,
    warehouse_url: str,
    inputs: Sequence[str] | None = None,
) -> AssetRun:
    """The AssetRun of a catalog stage. `inputs` are the dataset ids actually read, when a re-route replaced
    the stage's own; the warehouse url only names the table (its credentials never reach an event)."""
    target = snapshot.targets[stage.target_id]
    outputs = [dataset_location(snapshot, stage.target_id, lake)]
    if target.kind == "warehouse":
        outputs.append(DatasetLocation(stage.target_id, warehouse_url, target.location, target.columns or {}))
    return AssetRun(
        pipeline_id=stage.pipeline_id,
        dataset=stage.target_id,
        dagster_run_id=dagster_run_id,
        inputs=[dataset_location(snapshot, i, lake) for i in (inputs or stage.input_ids())],
        outputs=outputs,
        queries=[(stage.transform_sql, stage.sql_dialect)] if stage.transform_sql else [],
        source_code=yaml.dump(
            stage.model_dump(mode="json", exclude_none=True), Dumper=_StageDumper, sort_keys=False
        ),
        column_lineage=[
            r
            for r in snapshot.rows_of("column_lineage", ColumnLineage).values()
            if r.downstream == stage.target_id
        ],
    )


class _StageDumper(yaml.SafeDumper):
    """Writes a stage row as it reads in metadata_seed/: multi-line SQL as a block, not an escaped string."""


_StageDumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    ),
)
