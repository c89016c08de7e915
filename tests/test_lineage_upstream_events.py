"""Every event the OpenLineage schemas accept (JSON Schema 2020-12, formats as annotations) is taken by
`lineage ingest` and `lineage serve`, as Marquez takes it: events written here in the forms of OpenLineage's
own examples and of Marquez's test events. A time without a UTC offset is read as UTC and the sender is told;
a facet is held to the version of its schema its `_schemaURL` names when Medallion has that version, else
only to the core schema's rules for facets. An event the schemas refuse still is refused, naming the field."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from medallion_assets.cli import main
from tests.fixtures.lineage import post

# OpenLineage's specification README: a START of a job reading a table, then its COMPLETE writing another.
SPEC_START = {
    "eventType": "START",
    "eventTime": "2020-12-28T19:52:00.001+10:00",
    "run": {"runId": "0176a8c2-fe01-7439-87e6-56a1a1b4029f"},
    "job": {"namespace": "my-scheduler-namespace", "name": "myjob.mytask"},
    "inputs": [{"namespace": "my-datasource-namespace", "name": "instance.schema.table"}],
    "producer": "https://github.com/OpenLineage/OpenLineage/blob/v1-0-0/client",
    "schemaURL": "https://openlineage.io/spec/1-0-5/OpenLineage.json#/definitions/RunEvent",
}
# Marquez's test events send their time without an offset, with microseconds.
MARQUEZ_COMPLETE = {
    "eventType": "COMPLETE",
    "eventTime": "2020-12-28T19:51:01.641499",
    "run": {"runId": "ea041791-68bc-4ae1-bd89-4c8106a157e4"},
    "job": {"namespace": "my-scheduler-namespace", "name": "myjob.mytask"},
    "inputs": [{"namespace": "my-datasource-namespace", "name": "instance.schema.table"}],
    "outputs": [{"namespace": "my-datasource-namespace", "name": "instance.schema.output_table"}],
    "producer": "https://github.com/MarquezProject/marquez/blob/main/api/src/test/resources",
    "schemaURL": "https://openlineage.io/spec/1-0-5/OpenLineage.json#/definitions/RunEvent",
}
FACET_PRODUCER = "https://github.com/OpenLineage/OpenLineage/tree/0.3.1/integration/great_expectations"
# `dataQualityMetrics` as version 1-0-0 of its schema wrote it: no `columnMetrics`, which 1-0-3 requires.
OLD_METRICS = {
    "_producer": FACET_PRODUCER,
    "_schemaURL": "https://openlineage.io/spec/facets/1-0-0/DataQualityMetricsInputDatasetFacet.json",
    "rowCount": 1500,
    "bytes": 2048,
}
# An `ownership` whose owner has a type only, under a schema of its producer's own.
NAMELESS_OWNER = {
    "_producer": "https://github.com/apache/airflow/tree/providers-openlineage/1.14.0",
    "_schemaURL": "https://example.com/schemas/Ownership.json",
    "owners": [{"type": "team"}],
}
CURRENT_OWNERSHIP = "https://openlineage.io/spec/facets/1-0-1/OwnershipJobFacet.json#/$defs/OwnershipJobFacet"
READ_AS_UTC = "eventTime: '2020-12-28T19:51:01.641499' has no UTC offset: read as UTC"


def with_older_facets(event: dict) -> dict:
    inputs = [{**event["inputs"][0], "inputFacets": {"dataQualityMetrics": OLD_METRICS}}]
    job = {**event["job"], "facets": {"ownership": NAMELESS_OWNER}}
    return {**event, "inputs": inputs, "job": job}


def ingest(catalog, events: list[dict]):
    text = "".join(json.dumps(event) + "\n" for event in events)
    return CliRunner().invoke(main, ["lineage", "ingest", "-"], input=text)


def test_ingest_takes_the_upstream_forms_and_reads_a_naive_time_as_utc(catalog):
    result = ingest(catalog, [SPEC_START, with_older_facets(MARQUEZ_COMPLETE)])
    assert (result.exit_code, result.stderr) == (0, f"warning: <stdin>:2: {READ_AS_UTC}\n")
    assert result.stdout == "ingested 2 event(s): 1 edge(s), 2 new dataset(s); rejected 0\n"
    [edge] = catalog.table_rows("external_lineage")
    assert (edge["upstream"], edge["downstream"], edge["job"], edge["event_time"]) == (
        "my-datasource-namespace/instance.schema.table",
        "my-datasource-namespace/instance.schema.output_table",
        "my-scheduler-namespace/myjob.mytask",
        "2020-12-28T19:51:01.641499+00:00",
    )


@pytest.mark.parametrize(
    ("facets", "reason"),
    [
        # The version named is one Medallion has: its rules hold.
        (
            {"ownership": {**NAMELESS_OWNER, "_schemaURL": CURRENT_OWNERSHIP}},
            "job.facets.ownership.owners[0]: 'name' is a required property",
        ),
        # Whatever the version, a facet is an object with `_producer` and `_schemaURL`.
        (
            {"ownership": {key: value for key, value in NAMELESS_OWNER.items() if key != "_producer"}},
            "job.facets.ownership: '_producer' is a required property",
        ),
    ],
)
def test_an_event_the_schemas_refuse_still_is_refused_naming_the_field(catalog, facets, reason):
    event = {**SPEC_START, "job": {**SPEC_START["job"], "facets": facets}}
    result = ingest(catalog, [event])
    assert (result.exit_code, result.stderr) == (2, f"<stdin>:1: {reason}\n")


def test_serve_takes_them_and_says_how_it_read_the_time(server, catalog):
    endpoint = f"{server}/api/v1/lineage"
    assert post(endpoint, json.dumps(SPEC_START).encode()) == (201, b"")
    status, body = post(endpoint, json.dumps(with_older_facets(MARQUEZ_COMPLETE)).encode())
    assert (status, json.loads(body)) == (201, {"code": 201, "warnings": [READ_AS_UTC]})
    older = {**SPEC_START, "job": {**SPEC_START["job"], "facets": {"ownership": NAMELESS_OWNER}}}
    assert post(endpoint, json.dumps(older).encode()) == (201, b"")
    status, body = post(endpoint, json.dumps({**SPEC_START, "eventTime": "28/12/2020"}).encode())
    assert (status, json.loads(body)) == (
        400,
        {"code": 400, "message": "eventTime: '28/12/2020' is not a time (ISO 8601, as 2026-11-02T03:00:00Z)"},
    )
    assert [row["event_time"] for row in catalog.table_rows("external_lineage")] == [
        "2020-12-28T19:51:01.641499+00:00"
    ]
