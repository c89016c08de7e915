"""What every catalog row is built from: the `Row` base, checked identifiers and column types, and the
warning a deprecated spelling gives."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict

from medallion_assets.naming import check_identifier, split_qualified

Identifier = Annotated[str, AfterValidator(check_identifier)]


QualifiedName = Annotated[str, AfterValidator(lambda value: ".".join(split_qualified(value)) and value)]


COLUMN_TYPE = re.compile(
    r"(string|int|bigint|long|double|float|boolean|date|timestamp|decimal\(\d{1,2},\s*\d{1,2}\))"
)


Layer = Literal["bronze", "silver", "gold"]


FileFormat = Literal["jsonl", "csv", "parquet"]


Compression = Literal["auto", "none", "gzip", "bzip2", "zstd"]


DeclaredColumns = TypeVar("DeclaredColumns", bound=Mapping[str, str])


def check_columns(columns: DeclaredColumns) -> DeclaredColumns:
    """Each name an identifier and each type one of `COLUMN_TYPE`'s spellings (ValueError naming the first
    that is not)."""
    for name, type_name in columns.items():
        check_identifier(name, "column")
        if not COLUMN_TYPE.fullmatch(type_name):
            raise ValueError(f"column {name!r} has unknown type {type_name!r}")
    return columns


Columns = Annotated[dict[str, str], AfterValidator(check_columns)]


class Row(BaseModel):
    """A catalog row. `key_fields` name the primary key, used for upserts and in every error message."""

    model_config = ConfigDict(extra="forbid")
    key_fields: ClassVar[tuple[str, ...]]

    def key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.key_fields)


class DeprecatedName(FutureWarning):
    """A catalog field or value spelled the old way; it still loads, under its new spelling. Shown by default.

    `field` is the old spelling's field, so the loader can point at its file and line."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def _renamed(data: Any, table: str, old: str, new: str) -> Any:
    """A YAML row with the deprecated field `old` spelled as `new`, with a DeprecatedName warning."""
    if not isinstance(data, dict) or old not in data:
        return data
    if new in data:
        raise ValueError(f"{old} is the deprecated name of {new}: write only {new}")
    warnings.warn(DeprecatedName(f"{table}: field {old!r} is deprecated, write {new!r}", old), stacklevel=3)
    return {(new if name == old else name): value for name, value in data.items()}
