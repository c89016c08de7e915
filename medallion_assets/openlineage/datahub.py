"""Lineage into DataHub: an OpenLineage transport that turns each completed run's events into DataHub
metadata and sends it with acryl-datahub's REST emitter.

Chosen like any other transport, in `openlineage.yml` or the environment:

    transport:
      type: datahub
      url: http://datahub-gms:8080        # DataHub's GMS
      token: …                             # optional: a personal access token
      env: PROD                            # optional: the datasets' DataHub environment
      timeout: 10                          # optional: seconds per request
      retries: 3                           # optional: retries with backoff (the SDK's default otherwise)

For each COMPLETE run event it sends, in one batch:
- every dataset with a `schema` facet: its `schemaMetadata` (fields and their types);
- every output: its `upstreamLineage`, each input an upstream (TRANSFORMED), with the `columnLineage` facet as
  fine-grained (column) lineage;
- the job's `sql` facet, when there is one, as a query entity (`queryProperties` with the SQL text,
  `querySubjects` naming the datasets and columns), which the upstreams and column edges cite: DataHub's
  `transformation_text`, as `DataHubClient.lineage.add_lineage` writes it.
START, FAIL and the other run states carry nothing DataHub keeps: they are not sent. The aspects are whole,
not patches: a stage's target gets exactly the upstreams its run reports.

A dataset's DataHub name is its OpenLineage naming: `platform` is the namespace's scheme (`s3`, `postgres`,
`redshift`, `duckdb`, `file`…), and the name is the bucket and path for object stores, the table's name for
databases.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import attr
from datahub.emitter.mce_builder import make_data_platform_urn, make_dataset_urn, make_schema_field_urn
from datahub.emitter.mcp import MetadataChangeProposalWrapper
from datahub.emitter.rest_emitter import DatahubRestEmitter
from datahub.metadata import schema_classes as dh
from datahub.metadata.urns import QueryUrn
from openlineage.client.event_v2 import RunEvent, RunState
from openlineage.client.serde import Serde
from openlineage.client.transport.transport import Config, Transport

# Namespaces whose names are paths inside a bucket or a file system: DataHub names those datasets
# `bucket/path`.
OBJECT_STORES = ("s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasbs", "hdfs", "file")
# DataHub's field types by the start of a column's type (Spark's, or a warehouse's).
FIELD_TYPES: tuple[tuple[tuple[str, ...], type], ...] = (
    (("string", "varchar", "char", "text"), dh.StringTypeClass),
    (("boolean", "bool"), dh.BooleanTypeClass),
    (("timestamp", "datetime"), dh.TimeTypeClass),
    (("date",), dh.DateTypeClass),
    (
        ("tinyint", "smallint", "int", "bigint", "long", "float", "double", "decimal", "numeric", "real"),
        dh.NumberTypeClass,
    ),
    (("binary", "bytes", "bytea"), dh.BytesTypeClass),
    (("array",), dh.ArrayTypeClass),
    (("map",), dh.MapTypeClass),
    (("struct", "record"), dh.RecordTypeClass),
)
# DataHub asks who made a query and when; the events say when, and the producer is Medallion.
ACTOR = "urn:li:corpuser:medallion"


@attr.define
class DataHubConfig(Config):
    """Where DataHub's GMS listens, the token it wants (if any), and the environment datasets live in."""

    url: str
    token: str | None = None
    env: str = "PROD"
    timeout: float = 10.0
    retries: int | None = None  # the SDK's own number of retries with backoff, unless set

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> DataHubConfig:
        if not params.get("url"):
            raise ValueError("the datahub transport needs url: DataHub's GMS, as http://datahub-gms:8080")
        return cls(
            url=params["url"],
            token=params.get("token") or None,
            env=params.get("env") or "PROD",
            timeout=float(params.get("timeout", 10.0)),
            retries=int(params["retries"]) if params.get("retries") not in (None, "") else None,
        )


class DataHubTransport(Transport):
    """Sends each completed run's datasets, schemas, lineage and SQL to DataHub through its REST emitter."""

    kind = "datahub"
    config_class = DataHubConfig

    def __init__(self, config: DataHubConfig) -> None:
        self.config = config
        # Rest.li ingestion, which every GMS serves; the OpenAPI one would first ask the server's /config.
        self.emitter = DatahubRestEmitter(
            config.url,
            token=config.token,
            timeout_sec=config.timeout,
            retry_max_times=config.retries,
            openapi_ingestion=False,
        )

    def emit(self, event: Any) -> None:
        if isinstance(event, RunEvent) and event.eventType == RunState.COMPLETE:
            if proposals := metadata(Serde.to_dict(event), self.config.env):
                self.emitter.emit_mcps(proposals)

    def close(self, timeout: float = -1) -> bool:
        self.emitter.close()
        return True


@dataclass(frozen=True)
class _Dataset:
    urn: str
    platform: str
    facets: Mapping[str, Any]


def metadata(event: Mapping[str, Any], env: str = "PROD") -> list[MetadataChangeProposalWrapper]:
    """The DataHub aspects a completed run event (as JSON) says: schemas, lineage, the query."""
    inputs = [_dataset(d, env) for d in event.get("inputs") or []]
    outputs = [_dataset(d, env) for d in event.get("outputs") or []]
    proposals = [
        MetadataChangeProposalWrapper(entityUrn=dataset.urn, aspect=schema)
        for dataset in (*inputs, *outputs)
        if (schema := _schema(dataset)) is not None
    ]
    sql = ((event.get("job") or {}).get("facets") or {}).get("sql", {}).get("query")
    query = QueryUrn(hashlib.sha256(sql.encode()).hexdigest()).urn() if sql else None
    by_naming = {
        (d["namespace"], d["name"]): dataset for d, dataset in zip(event.get("inputs") or [], inputs)
    }
    subjects: dict[str, None] = {}
    for output in outputs:
        if not inputs:
            continue
        columns = list(_column_edges(output, by_naming, query))
        proposals.append(
            MetadataChangeProposalWrapper(
                entityUrn=output.urn,
                aspect=dh.UpstreamLineageClass(
                    upstreams=[
                        dh.UpstreamClass(
                            dataset=d.urn, type=dh.DatasetLineageTypeClass.TRANSFORMED, query=query
                        )
                        for d in inputs
                    ],
                    fineGrainedLineages=columns or None,
                ),
            )
        )
        subjects.update(dict.fromkeys([*(d.urn for d in inputs), output.urn]))
        subjects.update(
            dict.fromkeys(
                field for edge in columns for field in (*(edge.upstreams or ()), *(edge.downstreams or ()))
            )
        )
    if query is not None and subjects:
        stamp = dh.AuditStampClass(time=_millis(event["eventTime"]), actor=ACTOR)
        proposals += MetadataChangeProposalWrapper.construct_many(
            query,
            aspects=[
                dh.QueryPropertiesClass(
                    statement=dh.QueryStatementClass(value=sql, language=dh.QueryLanguageClass.SQL),
                    source=dh.QuerySourceClass.SYSTEM,
                    created=stamp,
                    lastModified=stamp,
                ),
                dh.QuerySubjectsClass(subjects=[dh.QuerySubjectClass(entity=urn) for urn in subjects]),
            ],
        )
    return proposals


def _dataset(dataset: Mapping[str, Any], env: str) -> _Dataset:
    namespace, name = dataset["namespace"], dataset["name"]
    parts = urlsplit(namespace)
    # A namespace without a scheme is a platform's name alone (`file`, `bigquery`).
    platform, place = (parts.scheme, (parts.netloc, parts.path)) if parts.scheme else (namespace, ())
    if platform in OBJECT_STORES:
        name = "/".join(part.strip("/") for part in (*place, name) if part.strip("/"))
    return _Dataset(make_dataset_urn(platform, name, env), platform, dataset.get("facets") or {})


def _schema(dataset: _Dataset) -> dh.SchemaMetadataClass | None:
    fields = (dataset.facets.get("schema") or {}).get("fields") or []
    if not fields:
        return None
    return dh.SchemaMetadataClass(
        schemaName=dataset.urn,
        platform=make_data_platform_urn(dataset.platform),
        version=0,
        hash="",
        platformSchema=dh.OtherSchemaClass(rawSchema=""),
        fields=[
            dh.SchemaFieldClass(
                fieldPath=field["name"],
                type=dh.SchemaFieldDataTypeClass(type=_field_type(field.get("type") or "")),
                nativeDataType=field.get("type") or "",
                description=field.get("description"),
            )
            for field in fields
        ],
    )


def _field_type(native: str) -> Any:
    native = native.strip().lower()
    kind: type = next(
        (kind for prefixes, kind in FIELD_TYPES if native.startswith(prefixes)), dh.NullTypeClass
    )
    return kind()


def _column_edges(
    output: _Dataset, inputs: Mapping[tuple[str, str], _Dataset], query: str | None
) -> Iterator[dh.FineGrainedLineageClass]:
    """The output's columnLineage facet: each column ← the input columns it comes from."""
    fields = (output.facets.get("columnLineage") or {}).get("fields") or {}
    for column, lineage in fields.items():
        upstreams = list(_input_fields(lineage.get("inputFields") or [], inputs))
        if upstreams:
            yield dh.FineGrainedLineageClass(
                upstreamType=dh.FineGrainedLineageUpstreamTypeClass.FIELD_SET,
                upstreams=upstreams,
                downstreamType=dh.FineGrainedLineageDownstreamTypeClass.FIELD,
                downstreams=[make_schema_field_urn(output.urn, column)],
                query=query,
            )


def _input_fields(
    fields: Iterable[Mapping[str, Any]], inputs: Mapping[tuple[str, str], _Dataset]
) -> Iterator[str]:
    for field in fields:
        # A column edge from a dataset the event does not list as an input has no upstream to hang from.
        if (dataset := inputs.get((field["namespace"], field["name"]))) is not None:
            yield make_schema_field_urn(dataset.urn, field["field"])


def _millis(event_time: str) -> int:
    return int(datetime.fromisoformat(event_time).timestamp() * 1000)
