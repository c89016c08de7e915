"""What healing actions speak: the Fault they answer, the Remedy they return, the context they run in, and
the registry (`@healing_action`) that rules name them through. `control/healing.py` matches rules and runs
actions; `control/actions.py` holds the built-ins; both import this, and it imports neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from medallion_assets.catalog.models import HealingAction, Stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.errors import causes
from medallion_assets.storage.lake.root import Lake


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class Fault:
    """One failure of one stage attempt: what the rules are matched against.

    `codes` are the error's class names (with their bases, along its cause chain) and any driver error code;
    `error` is the exception itself when the failure happened in this process (in-step healing).
    """

    stage: Stage
    layer: str
    attempt: int
    codes: frozenset[str]
    message: str
    run_id: str | None = None
    error: BaseException | None = None

    @classmethod
    def of(
        cls, error: BaseException, stage: Stage, layer: str, attempt: int, run_id: str | None = None
    ) -> Fault:
        codes: set[str] = set()
        for cause in causes(error):
            codes |= {kind.__name__ for kind in type(cause).__mro__}
            # A database driver's error (psycopg2's) carries its SQLSTATE code; any other error has none.
            pgcode: str | None = getattr(cause, "pgcode", None)
            if pgcode:
                codes.add(pgcode)
        return cls(stage, layer, attempt, frozenset(codes), f"{type(error).__name__}: {error}", run_id, error)


@dataclass(frozen=True)
class Remedy:
    """What an action did. `overrides` adjust the next attempts (engine.stage.Adjustments), carried to them
    in the run's tags (control/failures.py)."""

    outcome: Literal["retry", "give_up"]
    detail: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HealingContext(Generic[P]):
    """What an action may use: the fault, its validated parameters (of the action's `params` model), and the
    installation it runs in."""

    fault: Fault
    rule: HealingAction
    params: P
    store: CatalogStore
    lake: Lake
    warehouse_url: str


@dataclass(frozen=True)
class RegisteredAction:
    name: str
    # Called with a context whose params its `params` model validated.
    run: Callable[[HealingContext[Any]], Remedy]
    params: type[BaseModel]
    run_level: bool

    @property
    def description(self) -> str:
        return (self.run.__doc__ or "").strip().splitlines()[0]


ACTIONS: dict[str, RegisteredAction] = {}


Action = TypeVar("Action", bound=Callable[[HealingContext[Any]], Remedy])


def healing_action(
    name: str, params: type[BaseModel] = NoParams, run_level: bool = False
) -> Callable[[Action], Action]:
    """Register `function(context) -> Remedy` as the healing action `name`, its parameters checked by
    `params`."""

    def register(function: Action) -> Action:
        if name in ACTIONS:
            raise ValueError(f"healing action {name!r} is registered twice")
        ACTIONS[name] = RegisteredAction(name, function, params, run_level)
        return function

    return register
