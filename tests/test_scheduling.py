"""Scheduling profiles: the policy's decisions and reasons, the simulator's figures on hand-computed
scenarios, and the profile, simulate and validate commands."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from medallion_assets.catalog.models import PipelineProfile, ProfileSetting
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.catalog.store import CatalogStore
from medallion_assets.cli import main
from medallion_assets.control.steering.scheduling import (
    DEFAULT_SETTINGS,
    QueuedRun,
    SchedulingPolicy,
    Work,
    pipeline_pools,
    plan_tick,
    profile_warnings,
)
from medallion_assets.control.steering.simulator import Scenario, ScenarioInvalid, load_scenario, simulate
from tests.conftest import SEED

NOW = 10_000.0


def work(pipeline_id, criticality="normal", cost=1.0, pools=("source_a", "target_w"), waited_min=0.0) -> Work:
    return Work(pipeline_id, criticality, cost, tuple(pools), NOW - waited_min * 60, "test")


def policy(default="balanced", overrides=None, limits=None, **settings) -> SchedulingPolicy:
    tuned = {p: {**DEFAULT_SETTINGS, **settings} for p in ("balanced", "focus")}
    return SchedulingPolicy(default, overrides or {}, tuned, limits or {})


def summary(decisions):
    return [(d.work.pipeline_id, d.action, d.priority, d.reason) for d in decisions]


def test_balanced_scores_weight_times_staleness_over_cost_and_staggers_each_system():
    plan = plan_tick(
        policy(limits={"source_a": 3}),
        NOW,
        [
            work("cheap", cost=0.5),
            work("costly", cost=4),
            work("old_low", "low", cost=1, waited_min=9),
            work("elsewhere", pools=("source_b",)),
        ],
    )
    # cheap: 2×1/0.5 = 4; old_low: 1×(1+9)/1 = 10; costly: 2×1/4 = 0.5; elsewhere: 2.
    assert summary(plan.launches) == [
        ("old_low", "launch", 10, "balanced: by score; systems within throttle"),
        ("elsewhere", "launch", 2, "balanced: by score; systems within throttle"),
    ]
    assert summary(plan.waits) == [
        ("cheap", "wait", 4, "stagger: source_a, target_w took 1 new run(s) this tick"),
        ("costly", "wait", 0, "stagger: source_a, target_w took 1 new run(s) this tick"),
    ]
    assert plan.launches[0].details() == {
        "profile": "balanced",
        "score": 10.0,
        "priority": 10,
        "held": False,
        "reason": "balanced: by score; systems within throttle",
        "due": "test",
        "throttle": {"source_a": "0/3", "target_w": "0/2"},
    }


def test_a_system_at_its_limit_takes_no_new_run_counting_queued_and_running_ones():
    running = [work("r1", pools=("source_a",))]
    queued = [QueuedRun("q1", work("q1", pools=("source_a",)), "balanced", False)]
    plan = plan_tick(
        policy(launches_per_system_per_tick=5),
        NOW,
        [work("w1", pools=("source_a",)), work("w2", pools=("source_b",))],
        queued,
        running,
    )
    assert summary(plan.waits) == [("w1", "wait", 2, "throttle: source_a at 2/2")]
    assert [d.work.pipeline_id for d in plan.launches] == ["w2"]
    assert plan.retags == []


def test_focus_puts_critical_work_first_and_holds_the_rest_while_any_critical_work_is_active():
    focus = policy("focus", overrides={"batch": "balanced"})
    waiting = [
        work("normal", cost=0.1),
        work("critical", "critical", cost=50, pools=("source_c",)),
        work("batch", pools=("source_b",)),
    ]
    plan = plan_tick(focus, NOW, waiting)
    assert summary(plan.launches) == [
        ("critical", "launch", 1000, "focus: critical first; systems within throttle"),
        ("batch", "launch", 2, "balanced: by score; systems within throttle"),
    ]
    assert summary(plan.waits) == [("normal", "hold", 20, "focus: critical work is due, queued or running")]
    # With no critical work active, focus schedules like balanced.
    assert [d.work.pipeline_id for d in plan_tick(focus, NOW, waiting[:1]).launches] == ["normal"]


def test_critical_work_under_focus_skips_the_stagger_but_never_the_throttle():
    focus = policy("focus")
    pools = ("source_a",)
    plan = plan_tick(focus, NOW, [work(f"c{i}", "critical", pools=pools) for i in range(3)])
    assert [d.work.pipeline_id for d in plan.launches] == ["c0", "c1"]
    assert summary(plan.waits) == [("c2", "wait", 1008, "throttle: source_a at 2/2")]


def test_queued_runs_are_retagged_only_when_their_profile_or_held_state_changes():
    queued = [
        QueuedRun("r1", work("crit", "critical"), "balanced", False),
        QueuedRun("r2", work("other", pools=("source_b",)), "balanced", False),
        QueuedRun("r3", work("steady", pools=("source_c",), waited_min=30), "focus", True),
    ]
    plan = plan_tick(policy("focus"), NOW, [], queued)
    assert [(d.run_id, d.priority, d.held, d.reason) for d in plan.retags] == [
        ("r1", 1008, False, "re-tagged from balanced to focus"),
        ("r2", 2, True, "re-tagged from balanced to focus (held)"),
    ]
    released = plan_tick(policy("focus"), NOW, [], queued[1:])
    assert [(d.run_id, d.held, d.reason) for d in released.retags] == [
        ("r2", False, "re-tagged from balanced to focus"),
        ("r3", False, "re-tagged from focus (held) to focus"),
    ]


def seed_snapshot(**extra_rows) -> CatalogSnapshot:
    from medallion_assets.loading import validate_files

    snapshot = CatalogSnapshot()
    for table, rows in validate_files(snapshot, [SEED]).rows.items():
        for row in rows:
            snapshot.add(table, row)
    for table, rows in extra_rows.items():
        for row in rows:
            snapshot.add(table, row)
    return snapshot


def test_the_policy_reads_profiles_overrides_settings_and_pools_from_the_catalog():
    snapshot = seed_snapshot(
        pipeline_profiles=[PipelineProfile(pipeline_id="orders_etl", profile_id="focus")],
        profile_settings=[
            ProfileSetting(profile_id="focus", setting="weight_low", value=3),
            ProfileSetting(profile_id="focus", setting="cost_floor", value=0),
        ],
    )
    read = SchedulingPolicy.from_snapshot(snapshot)
    assert (read.profile_of("orders_etl"), read.profile_of("user_events_etl")) == ("focus", "balanced")
    assert read.settings["focus"]["weight_low"] == 3 and read.settings["balanced"]["weight_low"] == 1
    assert read.settings["focus"]["cost_floor"] == DEFAULT_SETTINGS["cost_floor"]
    assert pipeline_pools(snapshot, "orders_etl") == ("source_medallion_raw", "target_warehouse")
    assert read.limit("source_medallion_raw") == 2


def test_validate_warns_about_contradictory_settings_with_what_will_happen():
    snapshot = seed_snapshot(
        pipeline_profiles=[PipelineProfile(pipeline_id="user_events_etl", profile_id="focus")],
        profile_settings=[
            ProfileSetting(profile_id="balanced", setting="wieght_low", value=2),
            ProfileSetting(profile_id="balanced", setting="launches_per_system_per_tick", value=0),
        ],
    )
    assert profile_warnings(snapshot) == [
        "profile_settings[balanced, wieght_low]: unknown setting, ignored; known: "
        + ", ".join(DEFAULT_SETTINGS),
        "profile_settings[balanced, launches_per_system_per_tick] = 0 must be positive: ignored, the default "
        "1 is used",
    ]
    orders = snapshot.pipelines["orders_etl"]
    snapshot.add("pipelines", orders.model_copy(update={"criticality": "high"}))
    assert profile_warnings(snapshot)[0] == (
        "profile focus is in force for user_events_etl but no enabled pipeline is critical: nothing is held, "
        "focus schedules like balanced"
    )


TWO_ON_ONE_SOURCE = {
    "tick_seconds": 30,
    "hours": 1,
    "throttles": [{"system_kind": "source", "system_id": "s", "limit": 1}],
    "pipelines": [
        {
            "pipeline_id": "a",
            "expected_cost": 10,
            "duration_minutes": 10,
            "source": "s",
            "target": "t1",
            "arrivals_minutes": [0],
        },
        {
            "pipeline_id": "b",
            "expected_cost": 5,
            "duration_minutes": 5,
            "source": "s",
            "target": "t2",
            "arrivals_minutes": [0],
        },
    ],
}


def test_simulated_fifo_overloads_a_system_that_balanced_staggers():
    scenario = Scenario.model_validate(TWO_ON_ONE_SOURCE)
    fifo = simulate(scenario, "fifo")
    # Both start at once on a source that takes one: each at half speed; b ends at 10 min, a at 15.
    assert (fifo.avg_latency_min, fifo.p95_latency_min, fifo.violations, fifo.total_cost) == (12.5, 15, 1, 25)
    assert fifo.systems["source_s"].peak_concurrency == 2
    pools = simulate(scenario, "fifo_pools")
    # With pools, b's work waits for a's slot on the source: no violation, b ends at 15 min.
    assert (pools.avg_latency_min, pools.violations, pools.total_cost) == (12.5, 0, 15)
    balanced = simulate(scenario, "balanced")
    # The cheaper b first (score 0.4 against 0.2), then a when b is done.
    assert (balanced.avg_latency_min, balanced.p95_latency_min, balanced.violations, balanced.total_cost) == (
        10,
        15,
        0,
        15,
    )
    assert (
        balanced.systems["source_s"].peak_concurrency,
        balanced.systems["source_s"].peak_launches_per_minute,
    ) == (1, 1)


def test_simulated_focus_holds_normal_work_until_critical_work_is_done():
    scenario = Scenario.model_validate(
        {
            "default_profile": "focus",
            "hours": 1,
            "pipelines": [
                {
                    "pipeline_id": "c",
                    "criticality": "critical",
                    "duration_minutes": 10,
                    "source": "s1",
                    "target": "t",
                    "arrivals_minutes": [0],
                },
                {
                    "pipeline_id": "n",
                    "duration_minutes": 1,
                    "source": "s2",
                    "target": "t",
                    "arrivals_minutes": [0, 2],
                },
            ],
        }
    )
    focus = simulate(scenario, "scenario")
    # n's two arrivals are served by one run, launched when c completes at minute 10.
    assert (focus.runs, focus.critical_avg_latency_min, focus.avg_latency_min) == (
        2,
        10,
        round((10 + 11 + 9) / 3, 2),
    )
    assert simulate(scenario, "balanced").avg_latency_min == round((10 + 1 + 1.5) / 3, 2)


def test_scenarios_with_cron_schedules_use_dagster_cron_semantics(tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(
        json.dumps(
            {
                "hours": 2,
                "pipelines": [
                    {
                        "pipeline_id": "hourly",
                        "duration_minutes": 1,
                        "source": "s",
                        "target": "t",
                        "schedule": "0 * * * *",
                    },
                    {
                        "pipeline_id": "quarter",
                        "duration_minutes": 1,
                        "source": "s",
                        "target": "t",
                        "schedule": "*/15 * * * *",
                        "arrivals_minutes": [7],
                    },
                ],
            }
        )
    )
    assert load_scenario(path).arrivals() == [
        (0.0, "hourly"),
        (0.0, "quarter"),
        (420.0, "quarter"),
        (900.0, "quarter"),
        (1800.0, "quarter"),
        (2700.0, "quarter"),
        (3600.0, "hourly"),
        (3600.0, "quarter"),
        (4500.0, "quarter"),
        (5400.0, "quarter"),
        (6300.0, "quarter"),
    ]


def test_a_bad_scenario_names_the_file_and_every_problem(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "pipeline_profiles": {"ghost": "focus"},
                "pipelines": [{"pipeline_id": "p", "duration_minutes": 0, "source": "s", "target": "t"}],
            }
        )
    )
    with pytest.raises(ScenarioInvalid) as raised:
        load_scenario(path)
    assert str(raised.value) == f"{path}: pipelines.0.duration_minutes: Input should be greater than 0"
    path.write_text(yaml.safe_dump({"pipeline_profiles": {"ghost": "focus"}, "pipelines": []}))
    with pytest.raises(ScenarioInvalid) as raised:
        load_scenario(path)
    assert (
        str(raised.value)
        == f"{path}: scenario: Value error, pipeline_profiles names unknown pipeline 'ghost'"
    )


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDALLION_HOME", str(tmp_path))
    runner = CliRunner()
    assert runner.invoke(main, ["catalog", "load", str(SEED)]).exit_code == 0
    return runner


def test_profile_cli_switches_the_default_and_one_pipeline_and_refuses_unknown_names(cli, tmp_path):
    unknown = cli.invoke(main, ["profile", "set", "turbo"])
    assert (unknown.exit_code, unknown.stderr) == (
        2,
        "unknown profile 'turbo'; known profiles: balanced, focus\n",
    )
    ghost = cli.invoke(main, ["profile", "set", "--pipeline", "ghost", "focus"])
    assert (ghost.exit_code, ghost.stderr) == (
        2,
        "unknown pipeline 'ghost'; pipelines: customer_changes_etl, orders_etl, user_events_etl\n",
    )
    assert cli.invoke(main, ["profile", "set", "focus"]).exit_code == 0
    assert cli.invoke(main, ["profile", "set", "--pipeline", "user_events_etl", "balanced"]).exit_code == 0
    shown = cli.invoke(main, ["profile", "show"]).stdout.splitlines()
    assert shown[0] == "default profile: focus"
    assert [line.split()[:3] for line in shown[3:]] == [
        ["customer_changes_etl", "focus", "(default)"],
        ["orders_etl", "focus", "(default)"],
        ["user_events_etl", "balanced", "(override)"],
    ]
    store = CatalogStore(f"sqlite:///{tmp_path}/catalog.db")
    assert [(e["pipeline_id"], e["details"]["profile"]) for e in store.audit_entries(event="profile")] == [
        (None, "focus"),
        ("user_events_etl", "balanced"),
    ]


def test_simulate_cli_prints_fifo_and_the_scenario_profiles_as_json(cli, tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(TWO_ON_ONE_SOURCE))
    result = cli.invoke(main, ["simulate", "--scenario", str(path), "--json"])
    assert result.exit_code == 0, result.output
    figures = [(r["policy"], r["avg_latency_min"], r["violations"]) for r in json.loads(result.stdout)]
    assert figures == [("fifo", 12.5, 1), ("scenario profiles", 10, 0)]


def test_catalog_validate_warns_when_focus_has_no_critical_pipeline(cli, tmp_path):
    override = tmp_path / "no_critical.yaml"
    override.write_text(
        yaml.safe_dump(
            {
                "pipelines": [{"pipeline_id": "orders_etl", "criticality": "high"}],
                "profiles": [
                    {"profile_id": "focus", "is_default": True},
                    {"profile_id": "balanced", "is_default": False},
                ],
            }
        )
    )
    result = cli.invoke(main, ["catalog", "validate", str(override)])
    assert result.exit_code == 0
    assert result.stderr == (
        "warning: profile focus is in force for customer_changes_etl, orders_etl, user_events_etl but no "
        "enabled pipeline is critical: nothing is held, focus schedules like balanced\n"
    )
