"""OpenLineage: the events Medallion's runs emit, and the events other tools send it.

- `events`: START / COMPLETE / FAIL / ABORT events of asset runs and the emitter that sends them.
- `ingest`: external events read into the catalog's lineage rows.
- `server`: `medallion lineage serve`, an HTTP endpoint that takes events as Marquez's API does.
- `schema_validation`: events checked against the specification shipped in `spec/`.
"""
