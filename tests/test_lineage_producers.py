"""Events as real producers send them go in whole: `tests/openlineage_corpus/` holds, one file per producer,
events built as each producer's client code builds them (Spark, Airflow, dbt, Flink, Hive, the Python client,
Great Expectations, Marquez's examples), custom facets, RunEvents, JobEvents and DatasetEvents included.
`refused.ndjson` holds the same producers' events, each broken in one way the specification or Medallion
refuses; each is refused with its reason, and never loses the valid events beside it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from medallion_assets.cli import main
from medallion_assets.openlineage import ingest
from tests.conftest import REPO
from tests.fixtures.lineage import post

CORPUS = REPO / "tests" / "openlineage_corpus"
REFUSED = CORPUS / "refused.ndjson"
# Producer → (events, edges its events declare, new to the graph), as `lineage ingest` reports them.
PRODUCERS = {
    "airflow": (5, 1, 2),
    "dbt": (5, 2, 4),
    "flink": (4, 3, 5),
    "great_expectations": (2, 0, 0),
    "hive": (2, 2, 3),
    "marquez_examples": (4, 5, 6),
    "python_client": (6, 1, 2),
    "spark": (5, 2, 4),
}
REASONS = [
    "run.facets.parent.run: 'runId' is a required property",
    "job.facets.ownership.owners[0]: 'name' is a required property",
    "eventTime: '2026-11-03 at 08:00' is not a time (ISO 8601, as 2026-11-02T03:00:00Z)",
    "inputs[0].namespace: ' ' names no place; a namespace has 1 to 1024 characters, not only blanks",
    "run.facets.flink_job: 'a12f4f1e53a43f9f9a3c8e7b6d5c4b3a' is not of type 'object'",
    "event: is both a DatasetEvent (with dataset, without job and run) and a JobEvent (with job, without"
    " run); an event is one kind",
    "run.facets.great_expectations_meta: '_producer' is a required property",
    "run.runId: 'etl_orders-2026-11-03' is not a UUID",
]


def test_the_corpus_holds_every_producer_and_every_kind_of_event():
    assert sorted(path.stem for path in CORPUS.glob("*.ndjson")) == sorted([*PRODUCERS, "refused"])
    events = [json.loads(line) for producer in PRODUCERS for line in corpus_lines(producer)]
    kinds = [event["schemaURL"].rsplit("/", 1)[1] for event in events]
    assert {kind: kinds.count(kind) for kind in sorted(set(kinds))} == {
        "DatasetEvent": 2,
        "JobEvent": 2,
        "RunEvent": 29,
    }
    # The shapes that were refused or crashed ingestion: custom facets pointing into the core spec,
    # dataSource.uri file and bigquery, dataQualityAssertions under an input's facets.
    run_facet = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunFacet"
    custom = {
        name
        for event in events
        for name, facet in event.get("run", {}).get("facets", {}).items()
        if facet["_schemaURL"] == run_facet
    }
    assert {
        "spark.logicalPlan",
        "spark_version",
        "hive_query",
        "flink_job",
        "dbt_version",
        "pipeline",
    } <= custom
    datasets = [d for event in events for d in (*event.get("inputs", []), *event.get("outputs", []))]
    assert {d["facets"]["dataSource"]["uri"] for d in datasets if "dataSource" in d.get("facets", {})} >= {
        "file",
        "bigquery",
    }
    assert any("dataQualityAssertions" in d.get("facets", {}) for e in events for d in e.get("inputs", []))


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_every_event_of_a_real_producer_is_accepted(catalog, producer):
    events, edges, new = PRODUCERS[producer]
    assert len(corpus_lines(producer)) == events
    result = CliRunner().invoke(main, ["lineage", "ingest", str(CORPUS / f"{producer}.ndjson")])
    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == (
        f"ingested {events} event(s): {edges} edge(s), {new} new dataset(s); rejected 0\n"
    )
    assert len(catalog.table_rows("external_lineage")) == edges


def test_each_refused_event_has_its_reason_and_the_valid_ones_beside_it_go_in(catalog, tmp_path):
    """Each refused event between two producers' files: every valid event still goes in."""
    refused = corpus_lines("refused")
    mixed = tmp_path / "mixed.ndjson"
    producers = sorted(PRODUCERS)
    mixed.write_text(
        "".join(
            "".join(f"{line}\n" for line in corpus_lines(producer))
            + (f"{refused[index]}\n" if index < len(refused) else "")
            for index, producer in enumerate(producers)
        )
    )
    result = CliRunner().invoke(main, ["lineage", "ingest", str(mixed)])
    assert result.exit_code == 2
    where = [line.split(": ", 1)[0] for line in result.stderr.splitlines()]
    assert [line.split(": ", 1)[1] for line in result.stderr.splitlines()] == REASONS
    # The refused events sit right after each producer's file.
    ends = [sum(PRODUCERS[p][0] for p in producers[: index + 1]) + index + 1 for index in range(len(REASONS))]
    assert where == [f"{mixed}:{line}" for line in ends]
    events = sum(events for events, _, _ in PRODUCERS.values())
    assert result.stdout.startswith(f"ingested {events} event(s): ")
    assert result.stdout.endswith(f"; rejected {len(REASONS)}\n")


def test_a_job_event_that_carries_an_event_type_is_a_job_event(catalog):
    job_event = json.loads(corpus_lines("python_client")[2])
    assert job_event["schemaURL"].endswith("/JobEvent") and "run" not in job_event
    result = CliRunner().invoke(
        main, ["lineage", "ingest", "-"], input=json.dumps(job_event | {"eventType": "COMPLETE"})
    )
    assert (result.exit_code, result.stderr) == (0, "")
    assert [(row["job"], row["run_id"]) for row in catalog.table_rows("external_lineage")] == [
        ("python-jobs/load_events", None)
    ]


def test_a_line_that_is_not_utf8_is_refused_alone(catalog, tmp_path):
    events = tmp_path / "events.ndjson"
    events.write_bytes(b'{"producer": "\xff"}\n' + (CORPUS / "hive.ndjson").read_bytes())
    result = CliRunner().invoke(main, ["lineage", "ingest", str(events)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{events}:1: event: not JSON: 'utf-8' codec can't decode byte 0xff")
    assert result.stdout == "ingested 2 event(s): 2 edge(s), 3 new dataset(s); rejected 1\n"


@pytest.fixture
def failing_dataset(monkeypatch):
    """A fault nobody foresaw while handling the datasets named `boom`: the stand-in for a bug."""
    naming = ingest.dataset_id

    def dataset_id(namespace: str, name: str, names: dict) -> str:
        if name == "boom":
            raise RuntimeError(f"no idea what {name} is")
        return naming(namespace, name, names)

    monkeypatch.setattr(ingest, "dataset_id", dataset_id)


def test_an_unexpected_error_refuses_its_event_only(catalog, failing_dataset, tmp_path):
    boom = json.loads(corpus_lines("hive")[0])
    boom["inputs"][0]["name"] = "boom"
    events = tmp_path / "events.ndjson"
    events.write_text(f"{json.dumps(boom)}\n" + (CORPUS / "spark.ndjson").read_text())
    result = CliRunner().invoke(main, ["lineage", "ingest", str(events)])
    assert result.exit_code == 2
    assert result.stderr == f"{events}:1: event: could not be ingested: RuntimeError: no idea what boom is\n"
    assert result.stdout == "ingested 5 event(s): 2 edge(s), 4 new dataset(s); rejected 1\n"


def test_serve_takes_every_producer_and_answers_400_never_500(server, catalog, failing_dataset):
    endpoint = f"{server}/api/v1/lineage"
    answers = [
        post(endpoint, line.encode())[0] for producer in sorted(PRODUCERS) for line in corpus_lines(producer)
    ]
    assert answers == [201] * sum(events for events, _, _ in PRODUCERS.values())
    for line, reason in zip(corpus_lines("refused"), REASONS, strict=True):
        status, body = post(endpoint, line.encode())
        assert (status, json.loads(body)) == (400, {"code": 400, "message": reason})
    boom = json.loads(corpus_lines("spark")[4])
    boom["outputs"][0]["name"] = "boom"
    status, body = post(endpoint, json.dumps(boom).encode())
    assert (status, json.loads(body)["message"]) == (
        400,
        "event: could not be ingested: RuntimeError: no idea what boom is",
    )
    assert post(endpoint, corpus_lines("spark")[4].encode()) == (201, b"")


def corpus_lines(name: str) -> list[str]:
    return (CORPUS / f"{name}.ndjson").read_text().splitlines()
