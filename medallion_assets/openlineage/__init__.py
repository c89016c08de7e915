"""OpenLineage: the events Medallion's runs emit, and the events other tools send it.

- `events`: START / COMPLETE / FAIL / ABORT events of pipeline, asset, query and check runs.
- `naming`: the names of jobs and datasets, by the OpenLineage naming conventions.
- `emitter`: sends events from a background thread, never slowing or breaking a run.
- `ingest`: external events read into the catalog's lineage rows.
- `server`: `medallion lineage serve`, an HTTP endpoint that takes events as Marquez's API does.
- `schema_validation`: events checked against the specification shipped in `spec/`.
"""
