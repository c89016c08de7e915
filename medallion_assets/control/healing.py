"""Self-healing: a failure is matched against `healing_actions` rows, and the matched rule's action runs.

Metadata never runs code. A rule names an action registered here with `@healing_action`, and its `params` are
checked by that action's own pydantic model, when the catalog is loaded and again when the rule fires. The
built-in actions live in `control/actions.py`; `medallion healing actions` lists every registered one.

An in-step action runs inside the failed step, then the step is retried under the stage's retry policy
(Dagster's RetryRequested, see control/retries.py). A run-level action is left to the healing sensor, which
re-executes failed runs; a rule is one or the other, so no failure is retried twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from medallion_assets.catalog.models import HealingAction, Stage
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.registry import registry_problems
from medallion_assets.error_chain import causes
from medallion_assets.patterns import compiled


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    def of(cls, error: BaseException, stage: Stage, layer: str, attempt: int, run_id: str | None = None) -> Fault:
        codes = set()
        for cause in causes(error):
            codes |= {kind.__name__ for kind in type(cause).__mro__}
            if getattr(cause, "pgcode", None):
                codes.add(cause.pgcode)
        return cls(stage, layer, attempt, frozenset(codes), f"{type(error).__name__}: {error}", run_id, error)


@dataclass(frozen=True)
class Remedy:
    """What an action did. `overrides` adjust the next attempt (see engine.stages.Adjustments)."""

    outcome: Literal["retry", "give_up"]
    detail: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HealingContext:
    """What an action may use: the fault, its validated parameters, and the installation it runs in."""

    fault: Fault
    rule: HealingAction
    params: BaseModel
    store: CatalogStore
    lake_root: str
    warehouse_url: str


@dataclass(frozen=True)
class RegisteredAction:
    name: str
    run: Callable[[HealingContext], Remedy]
    params: type[BaseModel]
    run_level: bool

    @property
    def description(self) -> str:
        return (self.run.__doc__ or "").strip().splitlines()[0]


ACTIONS: dict[str, RegisteredAction] = {}


def healing_action(name: str, params: type[BaseModel] = NoParams, run_level: bool = False):
    """Register `function(context) -> Remedy` as the healing action `name`, its parameters checked by `params`."""

    def register(function: Callable[[HealingContext], Remedy]) -> Callable[[HealingContext], Remedy]:
        if name in ACTIONS:
            raise ValueError(f"healing action {name!r} is registered twice")
        ACTIONS[name] = RegisteredAction(name, function, params, run_level)
        return function

    return register


def rule_problems(rule: HealingAction) -> list[str]:
    """Why a rule cannot be used: an unknown action or parameters its action refuses ([] when usable)."""
    return registry_problems("action", rule.action, ACTIONS, rule.params)


def _specificity(rule: HealingAction) -> int:
    return sum(value is not None for value in (rule.error_code, rule.message_pattern, rule.layer,
                                               rule.pipeline_id, rule.stage_name))


def matching_rule(rules: Iterable[HealingAction], fault: Fault, run_level: bool = False) -> HealingAction | None:
    """The most specific enabled rule whose signature and scope match the fault (ties: by healing_id)."""
    codes, message = fault.codes, fault.message
    candidates = [
        rule for rule in rules
        if rule.enabled and rule.action in ACTIONS and ACTIONS[rule.action].run_level == run_level
        and (rule.error_code is None or rule.error_code in codes)
        and (rule.message_pattern is None or compiled(rule.message_pattern).search(message))
        and rule.layer in (None, fault.layer) and rule.pipeline_id in (None, fault.stage.pipeline_id)
        and rule.stage_name in (None, fault.stage.stage_name)
    ]
    return min(candidates, key=lambda rule: (-_specificity(rule), rule.healing_id), default=None)


def heal(store: CatalogStore, fault: Fault, lake_root: str, warehouse_url: str, run_level: bool = False) -> Remedy | None:
    """Run the action of the rule matching `fault` (an in-step or a run-level one), the rules read fresh from
    the catalog; audit what happened.

    None when no rule matches. An action that itself fails gives up, with its error: healing never hides
    the original failure behind a new one.
    """
    rule = matching_rule(store.read_table("healing_actions"), fault, run_level)
    if rule is None:
        return None
    action = ACTIONS[rule.action]
    try:
        remedy = action.run(HealingContext(fault, rule, action.params.model_validate(rule.params), store,
                                           lake_root, warehouse_url))
    except Exception as error:  # noqa: BLE001 — reported as the remedy's outcome, with the error
        remedy = Remedy("give_up", f"action {rule.action} failed: {type(error).__name__}: {error}")
    store.record_audit(run_id=fault.run_id, pipeline_id=fault.stage.pipeline_id, stage_name=fault.stage.stage_name,
                       dataset=fault.stage.target_id, event="healing", status=remedy.outcome, error=fault.message,
                       details={"rule": rule.healing_id, "action": rule.action, "params": rule.params,
                                "attempt": fault.attempt, "outcome": remedy.outcome, "detail": remedy.detail,
                                "overrides": remedy.overrides})
    return remedy


def healing_in_run(store: CatalogStore, run_id: str) -> list[dict]:
    """The audit entries of healing done so far in a run."""
    return store.audit_entries(run_id=run_id, event="healing")


def overrides_for(healed: list[dict], stage: Stage) -> dict[str, Any]:
    """The adjustments earlier healing in the run asked of the stage's next attempts, merged in order."""
    merged: dict[str, Any] = {}
    for entry in healed:
        if (entry["pipeline_id"], entry["stage_name"], entry["status"]) == (stage.pipeline_id, stage.stage_name, "retry"):
            merged.update((entry["details"] or {}).get("overrides", {}))
    return merged


# The built-in actions register themselves on import; imported last, as they use the names above.
from medallion_assets.control import actions as _builtin_actions  # noqa: E402, F401
