"""Catalog rows as their models: the catalog reads every table into one model, but its reading functions
return the common base `Row`; these say which model a table's rows are, so the controls are type-checked."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar, cast

from medallion_assets.catalog.models import Row

R = TypeVar("R", bound=Row)


def rows_as(model: type[R], rows: Iterable[Row]) -> Iterable[R]:
    """`rows` of a table whose model is `model`, unchanged (no check: the catalog built them as `model`)."""
    return cast(Iterable[R], rows)


def list_as(model: type[R], rows: list[Row]) -> list[R]:
    """`rows` of a table whose model is `model`, the same list (no check: the catalog built them as
    `model`)."""
    return cast(list[R], rows)
