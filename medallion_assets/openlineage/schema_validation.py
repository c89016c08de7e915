"""OpenLineage events checked against the specification's JSON schemas, offline.

The schemas are resolved through their `$id`s by a `referencing.Registry`, never fetched. They are read from
`MEDALLION_OPENLINEAGE_SPEC` when set, else from `spec/` beside this module: a checkout, a wheel and a
container validate against the same copy, and nothing outside the package is read.

An event is checked against the core schema, then each facet whose `_schemaURL` names a schema of the
specification against that schema, in the place its kind belongs (a run facet under `run.facets`, …). Facets
of other producers (Airflow's, Spark's) are only held to the core schema's rules for facets, unless
`standard_facets_only` asks that every facet be one of the specification's, as Medallion's own events are.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from medallion_assets import config

PACKAGED_SPEC = Path(__file__).with_name("spec")
CORE_ID = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
EVENT_KINDS = ("RunEvent", "DatasetEvent", "JobEvent")
# jsonschema quotes the offending value; a whole event quoted back would drown the problem.
MAX_MESSAGE = 300
# Where each kind of facet belongs: the group an event holds it in → the base its schema must extend.
FACET_BASE = {
    "run": "RunFacet",
    "job": "JobFacet",
    "facets": "DatasetFacet",
    "inputFacets": "InputDatasetFacet",
    "outputFacets": "OutputDatasetFacet",
}


class EventInvalid(ValueError):
    """An event the specification refuses; the message names the place in the event and what is wrong."""


def spec_folder() -> Path:
    """Where the schemas are read from: the environment variable, else the package's copy."""
    if configured := config.openlineage_spec():
        folder = Path(configured)
        if not (folder / "OpenLineage.json").is_file():
            raise FileNotFoundError(f"{config.OPENLINEAGE_SPEC_ENV}={configured}: no OpenLineage.json there")
        return folder
    return PACKAGED_SPEC


@dataclass(frozen=True)
class Specification:
    """Every schema of the specification and its validator, by `$id`, all resolving through one registry."""

    schemas: dict[str, dict[str, Any]]
    validators: dict[str, Draft202012Validator]
    events: dict[str, Draft202012Validator]


@functools.cache
def specification(folder: Path) -> Specification:
    """The specification in `folder` (OpenLineage.json and facets/*.json), read once per folder."""
    files = [folder / "OpenLineage.json", *sorted((folder / "facets").glob("*.json"))]
    schemas = {schema["$id"]: schema for schema in (json.loads(path.read_text()) for path in files)}
    registry = Registry().with_resources(
        (uri, Resource.from_contents(schema)) for uri, schema in schemas.items()
    )
    formats = FormatChecker()
    # jsonschema checks "uri" only with an optional package; a scheme is what producer and schema URLs need.
    formats.checks("uri")(lambda value: not isinstance(value, str) or bool(urlsplit(value).scheme))

    def validator(schema: dict[str, Any]) -> Draft202012Validator:
        return Draft202012Validator(schema, registry=registry, format_checker=formats)

    return Specification(
        schemas,
        {uri: validator(schema) for uri, schema in schemas.items()},
        {kind: validator({"$ref": f"{CORE_ID}#/$defs/{kind}"}) for kind in EVENT_KINDS},
    )


def _place(path: Iterable[Any]) -> str:
    """`outputs[0].facets.schema.fields[2].name` from a JSON path."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
    return text or "event"


def _message(error: ValidationError, prefix: tuple[str | int, ...] = ()) -> str:
    message = error.message if len(error.message) <= MAX_MESSAGE else error.message[:MAX_MESSAGE] + "…"
    return f"{_place((*prefix, *error.absolute_path))}: {message}"


def _kind(event: dict[str, Any]) -> str:
    """Which of the specification's events this is: the core schema's oneOf would only say "none of them"."""
    return (
        "RunEvent"
        if "run" in event or "eventType" in event
        else "DatasetEvent"
        if "dataset" in event
        else "JobEvent"
    )


def _facets(event: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str, str, Any]]:
    """(path to the facet's group, group, facet name, facet) for every facet of the event."""
    for group in ("run", "job"):
        for key, facet in (event.get(group) or {}).get("facets", {}).items():
            yield (group, "facets"), group, key, facet
    for side in ("inputs", "outputs"):
        for index, dataset in enumerate(event.get(side) or []):
            for group in ("facets", "inputFacets", "outputFacets"):
                for key, facet in dataset.get(group, {}).items():
                    yield (side, index, group), group, key, facet


def validate_event(event: Any, standard_facets_only: bool = False) -> dict[str, Any]:
    """`event` when the specification accepts it, else EventInvalid naming the first problem's place."""
    if not isinstance(event, dict):
        raise EventInvalid(f"event: an event is a JSON object, not {type(event).__name__}")
    spec = specification(spec_folder())
    if error := best_match(spec.events[_kind(event)].iter_errors(event)):
        raise EventInvalid(_message(error))
    for path, group, key, facet in _facets(event):
        document, _, pointer = facet["_schemaURL"].partition("#")
        schema = spec.schemas.get(document)
        where = _place((*path, key))
        if schema is None:
            if standard_facets_only:
                raise EventInvalid(f"{where}: {document} is not a facet schema of the specification")
            continue
        if key not in schema["properties"]:
            raise EventInvalid(
                f"{where}: {document} names its facet {', '.join(schema['properties'])}, not {key}"
            )
        definition = schema.get("$defs", {}).get(pointer.rsplit("/", 1)[-1])
        if not isinstance(definition, dict) or not definition.get("allOf"):
            raise EventInvalid(f"{where}: {facet['_schemaURL']} names no facet definition of {document}")
        base = definition["allOf"][0]["$ref"]
        if not base.endswith(f"/{FACET_BASE[group]}"):
            raise EventInvalid(f"{where}: a {base.rsplit('/', 1)[-1]} does not belong in {group}")
        if error := best_match(spec.validators[document].iter_errors({key: facet})):
            raise EventInvalid(_message(error, path))
    return event
