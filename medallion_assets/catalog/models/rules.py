"""Validation rules: the checks a stage's output must pass, and those every type 2 history gets."""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from medallion_assets.catalog.models.base import Columns, Identifier, Row
from medallion_assets.catalog.models.datasets import Target, ValidityColumns
from medallion_assets.naming import check_identifier
from medallion_assets.patterns import compiled

RuleType = Literal[
    "row_count",
    "not_null",
    "unique",
    "accepted_values",
    "range",
    "regex",
    "schema_match",
    "freshness",
    "great_expectations",
    "scd2_one_current",
    "scd2_no_overlap",
]


# Rules on a type 2 history: `columns` are the keys, `kwargs` may rename the validity columns.
HISTORY_RULE_TYPES = frozenset({"scd2_one_current", "scd2_no_overlap"})


RULE_TYPES: tuple[RuleType, ...] = typing.get_args(RuleType)


class Rule(BaseModel):
    """One validation rule. Severity error makes a blocking asset check; its action says what befalls rows."""

    model_config = ConfigDict(extra="forbid")
    type: RuleType
    name: Identifier | None = None
    column: Identifier | None = None
    columns: list[Identifier] | None = None
    severity: Literal["warn", "error"] = "error"
    action: Literal["warn", "drop", "quarantine", "fail"] | None = None
    min: float | None = None
    max: float | None = None
    values: list[Any] | None = None
    pattern: str | None = None
    max_age_hours: float | None = None
    expected: Columns | None = None
    expectation: str | None = Field(
        default=None, description="Great Expectations class, e.g. ExpectColumnValuesToBeBetween"
    )
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _complete(self) -> Rule:
        needs = {
            "not_null": ("column",),
            "accepted_values": ("column", "values"),
            "range": ("column",),
            "regex": ("column", "pattern"),
            "schema_match": ("expected",),
            "freshness": ("column", "max_age_hours"),
            "great_expectations": ("expectation",),
        }
        missing = [name for name in needs.get(self.type, ()) if getattr(self, name) is None]
        if self.type == "unique" and not (self.column or self.columns):
            missing.append("column")
        if self.type in HISTORY_RULE_TYPES:
            if not self.columns:
                missing.append("columns")
            ValidityColumns(**self.kwargs)  # kwargs may only rename the validity columns
        if missing:
            raise ValueError(f"rule type {self.type} needs {', '.join(missing)}")
        if self.type == "regex":
            compiled(self.pattern)
        if self.action is None:
            self.action = "fail" if self.severity == "error" else "warn"
        if self.name is None:
            subject = self.column or "_".join(self.columns or []) or (self.expectation or "").lower()
            self.name = check_identifier("_".join(part for part in (self.type, subject) if part), "rule name")
        return self

    def subject_columns(self) -> list[str]:
        return [self.column] if self.column else list(self.columns or [])


class ValidationRuleSet(Row):
    key_fields = ("rule_set_id",)
    rule_set_id: Identifier
    description: str = ""
    check_def: list[Rule]

    @field_validator("check_def")
    @classmethod
    def _unique_names(cls, rules: list[Rule]) -> list[Rule]:
        # Each rule's own validator (_complete) has named it by now.
        names = [rule.name for rule in rules if rule.name is not None]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"rule names must be unique within a set: {', '.join(duplicates)}")
        return rules


def history_rules(target: Target) -> list[Rule]:
    """The checks every type 2 target gets: at most one current row per key, no overlapping validity
    intervals, and (keys, valid_from) unique."""
    if target.scd_type != 2:
        return []
    names = target.validity_columns or ValidityColumns()
    validity = names.model_dump()
    return [
        Rule(type="scd2_one_current", name="scd2_one_current_row", columns=target.keys, kwargs=validity),
        Rule(
            type="scd2_no_overlap", name="scd2_no_overlapping_validity", columns=target.keys, kwargs=validity
        ),
        Rule(type="unique", name="scd2_unique_valid_from", columns=[*target.keys, names.valid_from]),
    ]
