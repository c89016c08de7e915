"""`validate`, which every event emitted in the test suite goes through: the package's validator
(medallion_assets.openlineage.schema_validation) against the specification shipped in the package, holding
Medallion's own events to the specification's standard facets only."""

from __future__ import annotations

from medallion_assets.openlineage.schema_validation import validate_event


def validate(event: dict) -> dict:
    """The event against the core schema, and each facet, which must be a standard one, against its own
    schema."""
    return validate_event(event, standard_facets_only=True)
