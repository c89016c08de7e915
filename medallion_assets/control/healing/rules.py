"""Self-healing: a failure is matched against `healing_actions` rows, and the matched rule's action runs.

Metadata never runs code. A rule names an action registered here with `@healing_action`, and its `params` are
checked by that action's own pydantic model, when the catalog is loaded and again when the rule fires. What
actions speak (Fault, Remedy, the registry) is in `control/remedies.py`; the built-in actions live in
`control/actions.py`; `medallion healing actions` lists every registered one.

An in-step action runs inside the failed step, then the step is retried under the stage's retry policy; a
run-level action is left to the healing sensor, which re-executes failed runs; a rule is one or the other, so
no failure is retried twice. control/failures.py takes a failure through all of it.
"""

from __future__ import annotations

from collections.abc import Iterable

from medallion_assets.catalog.models import HealingAction
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.control.healing import actions as _builtin_actions  # noqa: F401 — registers the built-ins
from medallion_assets.control.healing.remedies import ACTIONS, Fault, HealingContext, Remedy
from medallion_assets.control.registry import registry_problems
from medallion_assets.control.rows import rows_as
from medallion_assets.patterns import compiled
from medallion_assets.storage.lake.root import Lake


def rule_problems(rule: HealingAction) -> list[str]:
    """Why a rule cannot be used: an unknown action or parameters its action refuses ([] when usable)."""
    return registry_problems("action", rule.action, ACTIONS, rule.params)


def _specificity(rule: HealingAction) -> int:
    return sum(
        value is not None
        for value in (rule.error_code, rule.message_pattern, rule.layer, rule.pipeline_id, rule.stage_name)
    )


def matching_rule(
    rules: Iterable[HealingAction], fault: Fault, run_level: bool = False
) -> HealingAction | None:
    """The most specific enabled rule whose signature and scope match the fault (ties: by healing_id)."""
    codes, message = fault.codes, fault.message
    candidates = [
        rule
        for rule in rules
        if rule.enabled
        and rule.action in ACTIONS
        and ACTIONS[rule.action].run_level == run_level
        and (rule.error_code is None or rule.error_code in codes)
        and (rule.message_pattern is None or compiled(rule.message_pattern).search(message))
        and rule.layer in (None, fault.layer)
        and rule.pipeline_id in (None, fault.stage.pipeline_id)
        and rule.stage_name in (None, fault.stage.stage_name)
    ]
    return min(candidates, key=lambda rule: (-_specificity(rule), rule.healing_id), default=None)


def heal(
    store: CatalogStore, fault: Fault, lake: Lake, warehouse_url: str, run_level: bool = False
) -> Remedy | None:
    """Run the action of the rule matching `fault` (an in-step or a run-level one), the rules read fresh from
    the catalog; audit what happened.

    None when no rule matches. An action that itself fails gives up, with its error: healing never hides
    the original failure behind a new one.
    """
    rule = matching_rule(rows_as(HealingAction, store.read_table("healing_actions")), fault, run_level)
    if rule is None:
        return None
    action = ACTIONS[rule.action]
    try:
        remedy = action.run(
            HealingContext(fault, rule, action.params.model_validate(rule.params), store, lake, warehouse_url)
        )
    except Exception as error:  # noqa: BLE001 — reported as the remedy's outcome, with the error
        remedy = Remedy("give_up", f"action {rule.action} failed: {type(error).__name__}: {error}")
    store.record_audit(
        run_id=fault.run_id,
        pipeline_id=fault.stage.pipeline_id,
        stage_name=fault.stage.stage_name,
        dataset=fault.stage.target_id,
        event="healing",
        status=remedy.outcome,
        error=fault.message,
        details={
            "rule": rule.healing_id,
            "action": rule.action,
            "params": rule.params,
            "attempt": fault.attempt,
            "outcome": remedy.outcome,
            "detail": remedy.detail,
            "overrides": remedy.overrides,
        },
    )
    return remedy
