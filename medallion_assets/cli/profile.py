"""`medallion profile set|show` and `medallion simulate`: switch scheduling profiles, and try them offline."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any, cast

import click

from medallion_assets.cli.common import catalog_store, refuse
from medallion_assets.redaction import echo

if TYPE_CHECKING:
    from medallion_assets.catalog.models import Profile


@click.group()
def profile() -> None:
    """Scheduling profiles (balanced, focus): the medallion_launcher sensor applies a change on its next
    tick."""


@profile.command("set")
@click.argument("profile_id", metavar="balanced|focus")
@click.option("--pipeline", "pipeline_id", help="override the profile for this pipeline only")
def profile_set(profile_id: str, pipeline_id: str | None) -> None:
    """Make PROFILE the default profile, or one pipeline's profile (a pipeline_profiles row)."""
    from medallion_assets.catalog.models import PipelineProfile, Profile
    from medallion_assets.control.steering.scheduling import PROFILES

    if profile_id not in PROFILES:
        refuse(f"unknown profile {profile_id!r}; known profiles: {', '.join(PROFILES)}")
    store = catalog_store()
    snapshot = store.snapshot()
    if pipeline_id:
        if pipeline_id not in snapshot.pipelines:
            refuse(f"unknown pipeline {pipeline_id!r}; pipelines: {', '.join(sorted(snapshot.pipelines))}")
        store.upsert({"pipeline_profiles": [PipelineProfile(pipeline_id=pipeline_id, profile_id=profile_id)]})
        subject = f"pipeline {pipeline_id}"
    else:
        # The snapshot types its rows as the base model; the profiles table holds Profile rows.
        profiles = cast("dict[tuple[Any, ...], Profile]", snapshot.tables["profiles"])
        existing = {row.profile_id: row for row in profiles.values()}
        rows = [
            existing.get(p, Profile(profile_id=p)).model_copy(update={"is_default": p == profile_id})
            for p in PROFILES
        ]
        store.upsert({"profiles": rows})
        subject = "default"
    who = getpass.getuser()
    store.record_audit(
        pipeline_id=pipeline_id,
        event="profile",
        status="set",
        details={"profile": profile_id, "scope": subject, "by": who},
    )
    echo(f"{subject} profile set to {profile_id} by {who}; the launcher applies it on its next tick")


@profile.command("show")
def profile_show() -> None:
    """The default profile, its settings, and the profile in force for every pipeline."""
    from medallion_assets.control.steering.scheduling import SchedulingPolicy

    snapshot = catalog_store().snapshot()
    policy = SchedulingPolicy.from_snapshot(snapshot)
    echo(f"default profile: {policy.default_profile}")
    for name, settings in policy.settings.items():
        echo(f"  {name}: " + ", ".join(f"{k}={v:g}" for k, v in settings.items()))
    for pipeline_id, pipeline in sorted(snapshot.pipelines.items()):
        source = "override" if pipeline_id in policy.pipeline_profiles else "default"
        echo(
            f"{pipeline_id:<28} {policy.profile_of(pipeline_id):<9} ({source})  "
            f"criticality={pipeline.criticality} cost={pipeline.expected_cost:g}"
        )


@click.command("simulate")
@click.option(
    "--scenario",
    "scenario_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="scenario YAML or JSON (see medallion_assets/control/steering/simulator.py)",
)
@click.option("--json", "as_json", is_flag=True, help="print results as JSON")
def simulate(scenario_path: str, as_json: bool) -> None:
    """Simulate a scenario under its own profiles, and under a FIFO baseline (plain cron schedules)."""
    from medallion_assets.control.steering.simulator import ScenarioInvalid, load_scenario, results_json
    from medallion_assets.control.steering.simulator import simulate as run_simulation

    try:
        scenario = load_scenario(scenario_path)
    except ScenarioInvalid as error:
        refuse(str(error))
    results = [run_simulation(scenario, "fifo"), run_simulation(scenario, "scenario")]
    if as_json:
        echo(results_json(results))
        return
    echo(
        f"{'policy':<20}{'runs':>6}{'avg min':>9}{'p95 min':>9}{'crit avg':>10}{'violations':>12}{'cost':>10}"
    )
    for r in results:
        critical = "-" if r.critical_avg_latency_min is None else f"{r.critical_avg_latency_min:g}"
        echo(
            f"{r.policy:<20}{r.runs:>6}{r.avg_latency_min:>9g}{r.p95_latency_min:>9g}{critical:>10}"
            f"{r.violations:>12}{r.total_cost:>10g}"
        )
    for r in results:
        echo(f"\n{r.policy}: system  peak/limit  max starts per minute  violations")
        for pool, stats in r.systems.items():
            echo(
                f"  {pool:<28}{stats.peak_concurrency:>3}/{stats.limit:<6}{stats.peak_launches_per_minute:>8}"
                f"{stats.violations:>14}"
            )
