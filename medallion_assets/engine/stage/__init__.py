"""Running one stage, by mode: the runner (runner.py) asks the plan (plan.py) what the stage will do this run
and hands it to that mode's strategy, one module each: bronze ingest (bronze.py), silver or gold in full
(full.py), a silver merge or change feed (merge.py), gold by groups (groups.py), gold by day (days.py). They
share the context of the run (context.py), the stage's transformation (shape.py), its inputs as readable
(inputs.py), the incremental modes' replacement of keys (replace.py) and one write-audit-publish step
(publish.py); a warehouse target is then loaded (load.py).

As SQLMesh gives each model kind an evaluation strategy, a new mode is a module with a `build` and one entry
in the runner's `STRATEGIES`.
"""

from medallion_assets.engine.stage.load import staged_on_executors
from medallion_assets.engine.stage.outcome import Adjustments, StageOutcome
from medallion_assets.engine.stage.plan import ASKED_FULL, gold_groups, gold_mode_description
from medallion_assets.engine.stage.runner import StageRunner

__all__ = [
    "ASKED_FULL",
    "Adjustments",
    "StageOutcome",
    "StageRunner",
    "gold_groups",
    "gold_mode_description",
    "staged_on_executors",
]
