"""What healing actions and notification channels share: registries of named entries, each with a pydantic
model of the parameters a catalog row may give it, so that metadata names code but never supplies it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError


def registry_problems(kind: str, name: str, registry: Mapping[str, Any], params: dict[str, Any]) -> list[str]:
    """Why a row cannot use `name` with `params`: not registered, or params its `params` model refuses."""
    entry = registry.get(name)
    if entry is None:
        return [f"unknown {kind} {name!r}; registered {kind}s: {', '.join(sorted(registry))}"]
    try:
        entry.params.model_validate(params)
    except ValidationError as error:
        return [f"params for {name}: " + "; ".join(_describe(e) for e in error.errors())]
    return []


def _describe(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else error["msg"]
