"""The rows a change adds, changes (field by field) and removes, per catalog table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from medallion_assets.catalog.models import LOADABLE, Row


@dataclass(frozen=True)
class RowChange:
    """One row's change. `fields` holds each changed field's old and new value (None for an added or removed
    row, whose values are in `old` or `new`)."""

    table: str
    key: tuple[Any, ...]
    change: Literal["added", "changed", "removed"]
    fields: dict[str, tuple[Any, Any]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return ".".join(map(str, self.key))


def diff_rows(
    old: Mapping[str, Mapping[tuple[Any, ...], Row]],
    new: Mapping[str, Mapping[tuple[Any, ...], Row]],
    tables: Iterable[str] = LOADABLE,
) -> list[RowChange]:
    """The changes from `old` to `new` in `tables`, in load order, each table's rows by key."""
    changes = []
    for table in (name for name in LOADABLE if name in set(tables)):
        before, after = old.get(table, {}), new.get(table, {})
        for key in sorted({*before, *after}, key=lambda k: tuple(map(str, k))):
            if key not in before:
                changes.append(RowChange(table, key, "added"))
            elif key not in after:
                changes.append(RowChange(table, key, "removed"))
            else:
                was, now = before[key].model_dump(mode="json"), after[key].model_dump(mode="json")
                fields = {name: (was[name], now[name]) for name in was if was[name] != now[name]}
                if fields:
                    changes.append(RowChange(table, key, "changed", fields))
    return changes
