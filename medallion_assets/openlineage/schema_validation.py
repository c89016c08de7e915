"""OpenLineage events checked against the specification's JSON schemas, offline.

The schemas are resolved through their `$id`s by a `referencing.Registry`, never fetched. They are read from
`MEDALLION_OPENLINEAGE_SPEC` when set, else from `spec/` beside this module: a checkout, a wheel and a
container validate against the same copy, and nothing outside the package is read.

An event is checked against the core schema as the kind of event (RunEvent, DatasetEvent, JobEvent) the core
schema's own `required` and `not` rules make it. Then each facet whose name is one of the specification's
standard facets for its place (`parent` under `run.facets`, `schema` under a dataset's `facets`, …) is
checked against the version of that facet's schema its `_schemaURL` names, when the specification here has
that version. A standard facet of a version not here (an older `dataQualityMetrics` without `columnMetrics`,
a URL of the producer's own), and any other name, a custom facet (Spark's `spark.logicalPlan`, Airflow's
`airflow`), are held only to the core schema's rules for facets (an object with `_producer` and
`_schemaURL`): a newer version's rules are not the ones its producer wrote it by. `standard_facets_only` asks
that every facet be a standard one of a version here, as Medallion's own events are.

`format` is an annotation, as JSON Schema 2020-12 leaves it by default: `file` and `bigquery` are the
`dataSource.uri`s Spark and dbt send. What Medallion parses itself is checked where it is used.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match
from referencing import Registry, Resource

from medallion_assets import config

PACKAGED_SPEC = Path(__file__).with_name("spec")
CORE_ID = "https://openlineage.io/spec/2-0-2/OpenLineage.json"
EVENT_KINDS = ("RunEvent", "DatasetEvent", "JobEvent")
# jsonschema quotes the offending value; a whole event quoted back would drown the problem.
MAX_MESSAGE = 300
# The core schema's base for the facets of each place: (whose facets, group) → bases, the first one first.
# dbt puts `dataQualityAssertions`, an input dataset facet, under an input's `facets` on purpose.
FACET_BASES = {
    ("run", "facets"): ("RunFacet",),
    ("job", "facets"): ("JobFacet",),
    ("inputs", "facets"): ("DatasetFacet", "InputDatasetFacet"),
    ("outputs", "facets"): ("DatasetFacet", "OutputDatasetFacet"),
    ("dataset", "facets"): ("DatasetFacet",),
    ("inputs", "inputFacets"): ("InputDatasetFacet",),
    ("outputs", "outputFacets"): ("OutputDatasetFacet",),
}
# `https://openlineage.io/spec/facets/1-0-1/ParentRunFacet.json`: its version.
_VERSION = re.compile(r"/(\d+)-(\d+)-(\d+)/[^/]+$")


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
class FacetSchema:
    """One version of a standard facet: the document it comes from and the validator of its definition."""

    document: str
    version: tuple[int, ...]
    validator: Draft202012Validator


@dataclass(frozen=True)
class EventKind:
    """What makes an event this kind, as the core schema says: keys it must have, keys it may not all have."""

    name: str
    required: tuple[str, ...]
    not_all: tuple[str, ...]
    validator: Draft202012Validator

    def fits(self, event: dict[str, Any]) -> bool:
        return all(key in event for key in self.required) and not (
            self.not_all and all(key in event for key in self.not_all)
        )

    def partly_fits(self, event: dict[str, Any]) -> bool:
        return any(key in event for key in self.required) and not (
            self.not_all and all(key in event for key in self.not_all)
        )

    def __str__(self) -> str:
        shape = f"with {', '.join(self.required)}"
        if self.not_all:
            shape += f", without {' and '.join(self.not_all)}"
        return f"a {self.name} ({shape})"


@dataclass(frozen=True)
class Specification:
    """The core schema's event kinds and every standard facet's versions, by (base, facet name)."""

    kinds: tuple[EventKind, ...]
    facets: dict[tuple[str, str], list[FacetSchema]]

    def facet_versions(self, bases: tuple[str, ...], name: str) -> list[FacetSchema]:
        """The versions of the standard facet `name` in a place of these bases, oldest first; none for a
        custom facet."""
        return next((versions for base in bases if (versions := self.facets.get((base, name)))), [])

    @staticmethod
    def named_version(versions: list[FacetSchema], schema_url: Any) -> FacetSchema | None:
        """The version `schema_url` names, when it is one of `versions`."""
        document = schema_url.partition("#")[0] if isinstance(schema_url, str) else None
        return next((schema for schema in versions if schema.document == document), None)


def _event_kind(core: dict[str, Any], name: str, validator: Draft202012Validator) -> EventKind:
    # Each kind is allOf [BaseEvent, its own part]: the own part holds what tells the kinds apart.
    own = next(part for part in core["$defs"][name]["allOf"] if "$ref" not in part)
    return EventKind(
        name, tuple(own.get("required", ())), tuple(own.get("not", {}).get("required", ())), validator
    )


@functools.cache
def specification(folder: Path) -> Specification:
    """The specification in `folder` (OpenLineage.json and facets/*.json), read once per folder."""
    files = [folder / "OpenLineage.json", *sorted((folder / "facets").glob("*.json"))]
    schemas = {schema["$id"]: schema for schema in (json.loads(path.read_text()) for path in files)}
    registry = Registry().with_resources(
        (uri, Resource.from_contents(schema)) for uri, schema in schemas.items()
    )

    def validator(uri: str) -> Draft202012Validator:
        # No format checker: formats are annotations (JSON Schema 2020-12's default).
        return Draft202012Validator({"$ref": uri}, registry=registry)

    core = schemas[CORE_ID]
    kinds = tuple(_event_kind(core, kind, validator(f"{CORE_ID}#/$defs/{kind}")) for kind in EVENT_KINDS)
    facets: dict[tuple[str, str], list[FacetSchema]] = {}
    for document, schema in schemas.items():
        version = _VERSION.search(document)
        if document == CORE_ID or version is None:
            continue
        # A facet document names its facet by its one property; each definition extending a core base is the
        # facet for places of that base (LineageFacet.json holds a dataset and a job facet, both `lineage`).
        for name in schema.get("properties", {}):
            for definition, body in schema.get("$defs", {}).items():
                for part in body.get("allOf", []):
                    base = part.get("$ref", "").rpartition("/")[2]
                    if part.get("$ref", "").startswith(CORE_ID) and base:
                        facets.setdefault((base, name), []).append(
                            FacetSchema(
                                document,
                                tuple(int(number) for number in version.groups()),
                                validator(f"{document}#/$defs/{definition}"),
                            )
                        )
    for versions in facets.values():
        versions.sort(key=lambda schema: schema.version)
    return Specification(kinds, facets)


def _place(path: Iterable[Any]) -> str:
    """`outputs[0].facets.schema.fields[2].name` from a JSON path."""
    text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")
    return text or "event"


def _message(error: ValidationError, prefix: tuple[str | int, ...] = ()) -> str:
    # The core schema wraps each facet group in an anyOf: what is wrong is inside it, not "the group".
    while error.context:
        error = best_match(error.context)
    message = error.message if len(error.message) <= MAX_MESSAGE else error.message[:MAX_MESSAGE] + "…"
    return f"{_place((*prefix, *error.absolute_path))}: {message}"


def _kind(spec: Specification, event: dict[str, Any]) -> EventKind:
    """The one kind of event the core schema's rules make `event`."""
    fitting = [kind for kind in spec.kinds if kind.fits(event)]
    if len(fitting) == 1:
        return fitting[0]
    if not fitting:
        # The kind the event has part of (a run without its job): its own error says what is missing.
        partial = [kind for kind in spec.kinds if kind.partly_fits(event)]
        if len(partial) == 1:
            return partial[0]
        raise EventInvalid(f"event: is none of {', '.join(str(kind) for kind in spec.kinds)}")
    raise EventInvalid(f"event: is both {' and '.join(str(kind) for kind in fitting)}; an event is one kind")


def _facets(event: dict[str, Any]) -> Iterator[tuple[tuple[str | int, ...], tuple[str, str], str, Any]]:
    """(path to the facet's group, place, facet name, facet) for every facet of a valid event."""
    for owner in ("run", "job"):
        for key, facet in event.get(owner, {}).get("facets", {}).items():
            yield (owner, "facets"), (owner, "facets"), key, facet
    if "dataset" in event:
        for key, facet in event["dataset"].get("facets", {}).items():
            yield ("dataset", "facets"), ("dataset", "facets"), key, facet
    for side in ("inputs", "outputs"):
        for index, dataset in enumerate(event.get(side, [])):
            for group in ("facets", "inputFacets", "outputFacets"):
                for key, facet in dataset.get(group, {}).items():
                    yield (side, index, group), (side, group), key, facet


def validate_event(event: Any, standard_facets_only: bool = False) -> dict[str, Any]:
    """`event` when the specification accepts it, else EventInvalid naming the first problem's place."""
    if not isinstance(event, dict):
        raise EventInvalid(f"event: an event is a JSON object, not {type(event).__name__}")
    spec = specification(spec_folder())
    if error := best_match(_kind(spec, event).validator.iter_errors(event)):
        raise EventInvalid(_message(error))
    for path, place, key, facet in _facets(event):
        bases = FACET_BASES.get(place)
        if bases is None:  # an inputFacets group on an output: the core schema knows no such group
            continue
        versions = spec.facet_versions(bases, key)
        schema = spec.named_version(versions, facet["_schemaURL"])
        if schema is None and standard_facets_only:
            raise EventInvalid(
                f"{_place((*path, key))}: not a standard facet of the specification"
                if not versions
                else f"{_place((*path, key))}: names a version of its schema the specification here lacks"
            )
        if schema is None:  # the core schema's rules for facets, checked with the event, are all there is
            continue
        if error := best_match(schema.validator.iter_errors(facet)):
            raise EventInvalid(_message(error, (*path, key)))
    return event
