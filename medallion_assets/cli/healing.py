"""`medallion healing actions`: the registered actions a healing_actions row may name, with their
parameters."""

from __future__ import annotations

import json
from typing import Any

import click

from medallion_assets.redaction import echo


@click.group()
def healing() -> None:
    """Self-healing: rules in healing_actions name registered actions (metadata never runs code)."""


@healing.command("actions")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def actions(as_json: bool) -> None:
    """List every registered healing action, its parameters and defaults."""
    # control.healing.rules registers the built-in actions when imported; the registry lives in
    # control.healing.remedies.
    import medallion_assets.control.healing.rules  # noqa: F401
    from medallion_assets.control.healing.remedies import ACTIONS

    listed: list[dict[str, Any]] = [
        {
            "name": action.name,
            "description": action.description,
            "scope": "run (healing sensor)" if action.run_level else "step",
            "params": {
                name: {
                    "type": getattr(f.annotation, "__name__", str(f.annotation)),
                    "default": f.default,
                    "description": f.description or "",
                }
                for name, f in action.params.model_fields.items()
            },
        }
        for action in sorted(ACTIONS.values(), key=lambda a: a.name)
    ]
    if as_json:
        echo(json.dumps(listed, indent=2))
        return
    for action in listed:
        echo(f"{action['name']}  [{action['scope']}]  {action['description']}")
        for name, param in action["params"].items():
            echo(
                f"    {name}: {param['type']} = {param['default']!r}"
                + (f"  ({param['description']})" if param["description"] else "")
            )
