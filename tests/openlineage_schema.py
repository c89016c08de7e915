"""The OpenLineage specification's JSON schemas (../shared/openlineage-spec), resolved offline through their
`$id`s, and `validate`, which every event emitted in the test suite goes through."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry, Resource

from tests.conftest import REPO

SPEC = REPO.parent / "shared" / "openlineage-spec"
SCHEMAS = {schema["$id"]: schema for schema in (
    json.loads(path.read_text()) for path in [SPEC / "OpenLineage.json", *sorted((SPEC / "facets").glob("*.json"))])}
REGISTRY = Registry().with_resources((uri, Resource.from_contents(schema)) for uri, schema in SCHEMAS.items())
FORMATS = FormatChecker()
# jsonschema checks "uri" only with an optional package; a scheme is what the producer and schema URLs need.
FORMATS.checks("uri")(lambda value: not isinstance(value, str) or bool(urlsplit(value).scheme))
CORE = Draft202012Validator(SCHEMAS["https://openlineage.io/spec/2-0-2/OpenLineage.json"], registry=REGISTRY,
                            format_checker=FORMATS)
FACET_BASE = {"run": "RunFacet", "job": "JobFacet", "facets": "DatasetFacet", "inputFacets": "InputDatasetFacet",
              "outputFacets": "OutputDatasetFacet"}

def _facets(event: dict) -> Iterator[tuple[str, str, dict]]:
    for group in ("run", "job"):
        for key, facet in event[group].get("facets", {}).items():
            yield group, key, facet
    for dataset in [*event.get("inputs", []), *event.get("outputs", [])]:
        for group in ("facets", "inputFacets", "outputFacets"):
            for key, facet in dataset.get(group, {}).items():
                yield group, key, facet


def validate(event: dict) -> dict:
    """The event against the core schema, and each facet against its own schema, in the place its kind belongs."""
    CORE.validate(event)
    for group, key, facet in _facets(event):
        document, _, pointer = facet["_schemaURL"].partition("#")
        schema = SCHEMAS[document]
        assert key in schema["properties"], f"{key} is not the name {document} gives its facet"
        base = schema["$defs"][pointer.rsplit("/", 1)[-1]]["allOf"][0]["$ref"]
        assert base.endswith(f"/{FACET_BASE[group]}"), f"{key} ({base}) does not belong in {group}"
        Draft202012Validator(schema, registry=REGISTRY, format_checker=FORMATS).validate({key: facet})
    return event
