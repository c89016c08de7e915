"""Scheduling profiles: which due pipelines to launch now, at which `dagster/priority`, and why.

One pure policy, `plan_tick`, decides for the medallion_launcher sensor and for the simulator alike
(no Dagster here). Every tick it sees the work waiting to launch, the runs queued and running, and the
concurrency limit of every system (Dagster pool); the catalog says which profile is in force per pipeline
(its `pipeline_profiles` row, else the profile with `is_default`) and the profile's tunable weights
(`profile_settings`, defaults in DEFAULT_SETTINGS).

The policy, in four rules:

1. **Score** = criticality weight × (1 + minutes stale) / max(expected_cost, cost_floor).
   Weight over cost is Smith's rule (weighted shortest job first), which minimises weighted average
   latency; multiplying by staleness ages waiting work, so cheap work never starves expensive work forever.
2. **Priority** (`dagster/priority`, higher dequeues first) = the score, rounded and capped at 999. Under
   **focus**, a critical pipeline gets FOCUS_PRIORITY + that: above every other run.
3. **Focus holds**: while any critical work is due, queued or running, non-critical pipelines under focus
   are not launched, and their queued runs are tagged `medallion/held=true` (a run tag limit of 0 in
   dagster.yaml keeps them queued). With no critical work active, focus schedules like balanced.
4. **Throttles and stagger**: candidates are taken by priority, then score. One launches only if every
   system it touches stays within its concurrency limit, counting queued and running runs and those
   launched this tick; and, except critical work under focus, only if that system has taken fewer than
   `launches_per_system_per_tick` new runs this tick. A system thus never exceeds its throttle, and a
   top-of-the-hour rush reaches it one run per tick, not all at once.

A queued run is re-tagged (the sensor cancels and requeues it) only when its profile or its held state
changes; its priority then follows rule 2 again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from medallion_assets.catalog.models import PipelineProfile, Profile, ProfileSetting
from medallion_assets.catalog.snapshot import CatalogSnapshot
from medallion_assets.control.rows import rows_as
from medallion_assets.control.steering.throttles import (
    DEFAULT_CONCURRENCY_LIMIT,
    concurrency_limits,
    stage_pool,
)

ProfileName = Literal["balanced", "focus"]
PROFILES: tuple[ProfileName, ...] = ("balanced", "focus")
FALLBACK_PROFILE: ProfileName = "balanced"  # in force when no profile row has is_default
MAX_SCORE_PRIORITY = 999
FOCUS_PRIORITY = 1000

# Every tunable setting of a profile, with its default. profile_settings rows override them per profile.
DEFAULT_SETTINGS: dict[str, float] = {
    "weight_critical": 8.0,
    "weight_high": 4.0,
    "weight_normal": 2.0,
    "weight_low": 1.0,
    "cost_floor": 0.1,  # keeps a zero-cost pipeline's score finite
    "launches_per_system_per_tick": 1,
    "max_gold_age_minutes": 1440,  # gold older than this makes its pipeline due
}
# Settings a value of zero or below would break; such a row is ignored (validate warns).
POSITIVE_SETTINGS = ("cost_floor", "launches_per_system_per_tick")


@dataclass(frozen=True)
class Work:
    """A pipeline's work as the policy sees it: who, how important, how costly, where, and due since when."""

    pipeline_id: str
    criticality: str
    expected_cost: float
    pools: tuple[str, ...]
    due_since: float  # epoch seconds
    due_reason: str = ""


@dataclass(frozen=True)
class QueuedRun:
    """A run waiting in Dagster's queue, with the profile and held state it was tagged with."""

    run_id: str
    work: Work
    profile: str
    held: bool


@dataclass(frozen=True)
class Decision:
    """One explained decision. `action`: launch | wait | hold for waiting work; retag for a queued run."""

    action: str
    work: Work
    profile: str
    score: float
    priority: int
    held: bool
    reason: str
    throttle: dict[str, str]  # pool → "in flight/limit" when decided
    run_id: str | None = None

    def details(self) -> dict[str, Any]:
        """What the audit log records for this decision."""
        return {
            "profile": self.profile,
            "score": round(self.score, 3),
            "priority": self.priority,
            "held": self.held,
            "reason": self.reason,
            "due": self.work.due_reason,
            "throttle": self.throttle,
        }


@dataclass
class Plan:
    launches: list[Decision] = field(default_factory=list)
    waits: list[Decision] = field(default_factory=list)
    retags: list[Decision] = field(default_factory=list)


@dataclass(frozen=True)
class SchedulingPolicy:
    """What the catalog says about scheduling, read fresh every tick."""

    default_profile: str = FALLBACK_PROFILE
    pipeline_profiles: dict[str, str] = field(default_factory=dict)
    settings: dict[str, dict[str, float]] = field(
        default_factory=lambda: {p: dict(DEFAULT_SETTINGS) for p in PROFILES}
    )
    limits: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_snapshot(cls, snapshot: CatalogSnapshot) -> SchedulingPolicy:
        settings: dict[str, dict[str, float]] = {profile: dict(DEFAULT_SETTINGS) for profile in PROFILES}
        for row in rows_as(ProfileSetting, snapshot.tables["profile_settings"].values()):
            if row.setting in DEFAULT_SETTINGS and (row.value > 0 or row.setting not in POSITIVE_SETTINGS):
                settings[row.profile_id][row.setting] = row.value
        return cls(
            default_profile=default_profile(snapshot),
            pipeline_profiles={
                row.pipeline_id: row.profile_id
                for row in rows_as(PipelineProfile, snapshot.tables["pipeline_profiles"].values())
            },
            settings=settings,
            limits=concurrency_limits(snapshot),
        )

    def profile_of(self, pipeline_id: str) -> str:
        return self.pipeline_profiles.get(pipeline_id, self.default_profile)

    def limit(self, pool: str) -> int:
        return self.limits.get(pool, DEFAULT_CONCURRENCY_LIMIT)

    def score(self, work: Work, now: float) -> float:
        setting = self.settings[self.profile_of(work.pipeline_id)]
        minutes_stale = max(0.0, now - work.due_since) / 60
        return (
            setting[f"weight_{work.criticality}"]
            * (1 + minutes_stale)
            / max(work.expected_cost, setting["cost_floor"])
        )

    def priority(self, work: Work, score: float) -> int:
        banded = min(MAX_SCORE_PRIORITY, round(score))
        return FOCUS_PRIORITY + banded if self.focus_critical(work) else banded

    def held(self, work: Work, critical_active: bool) -> bool:
        return (
            critical_active
            and self.profile_of(work.pipeline_id) == "focus"
            and work.criticality != "critical"
        )

    def focus_critical(self, work: Work) -> bool:
        return work.criticality == "critical" and self.profile_of(work.pipeline_id) == "focus"


def default_profile(snapshot: CatalogSnapshot) -> str:
    """The profile with is_default (the first by name if several do), else FALLBACK_PROFILE."""
    defaults = sorted(
        row.profile_id for row in rows_as(Profile, snapshot.tables["profiles"].values()) if row.is_default
    )
    return defaults[0] if defaults else FALLBACK_PROFILE


def pipeline_pools(snapshot: CatalogSnapshot, pipeline_id: str) -> tuple[str, ...]:
    """The Dagster pools a pipeline's stages draw on (its source and target systems), sorted."""
    pools = {stage_pool(stage, snapshot) for stage in snapshot.stages(pipeline_id)}
    return tuple(sorted(pool for pool in pools if pool))


def plan_tick(
    policy: SchedulingPolicy,
    now: float,
    waiting: Sequence[Work],
    queued: Sequence[QueuedRun] = (),
    running: Sequence[Work] = (),
) -> Plan:
    """Decide one tick: which `waiting` work to launch (and why not the rest), which queued runs to re-tag."""
    critical_active = any(
        w.criticality == "critical" for w in [*waiting, *running, *(q.work for q in queued)]
    )
    in_flight = Counter(pool for work in [*running, *(q.work for q in queued)] for pool in work.pools)
    plan = Plan()

    for run in queued:
        score = policy.score(run.work, now)
        profile, held = policy.profile_of(run.work.pipeline_id), policy.held(run.work, critical_active)
        if (profile, held) != (run.profile, run.held):
            plan.retags.append(
                Decision(
                    "retag",
                    run.work,
                    profile,
                    score,
                    policy.priority(run.work, score),
                    held,
                    f"re-tagged from {run.profile}{' (held)' if run.held else ''} "
                    f"to {profile}{' (held)' if held else ''}",
                    _throttle_state(policy, run.work, in_flight),
                    run_id=run.run_id,
                )
            )

    scored = [(policy.score(work, now), work) for work in waiting]
    scored.sort(key=lambda item: (-policy.priority(item[1], item[0]), -item[0], item[1].due_since))
    launched: Counter[str] = Counter()
    for score, work in scored:
        profile, priority = policy.profile_of(work.pipeline_id), policy.priority(work, score)
        held = policy.held(work, critical_active)
        state = _throttle_state(policy, work, in_flight)
        decide = partial(
            Decision, work=work, profile=profile, score=score, priority=priority, held=held, throttle=state
        )
        if held:
            plan.waits.append(decide(action="hold", reason="focus: critical work is due, queued or running"))
            continue
        full = [pool for pool in work.pools if in_flight[pool] >= policy.limit(pool)]
        if full:
            at_limit = ", ".join(f"{pool} at {state[pool]}" for pool in full)
            plan.waits.append(decide(action="wait", reason=f"throttle: {at_limit}"))
            continue
        per_tick = policy.settings[profile]["launches_per_system_per_tick"]
        busy = [pool for pool in work.pools if launched[pool] >= per_tick]
        if busy and not policy.focus_critical(work):
            plan.waits.append(
                decide(
                    action="wait", reason=f"stagger: {', '.join(busy)} took {per_tick:g} new run(s) this tick"
                )
            )
            continue
        why = "focus: critical first" if policy.focus_critical(work) else f"{profile}: by score"
        plan.launches.append(decide(action="launch", reason=f"{why}; systems within throttle"))
        for pool in work.pools:
            in_flight[pool] += 1
            launched[pool] += 1
    return plan


def _throttle_state(policy: SchedulingPolicy, work: Work, in_flight: Counter[str]) -> dict[str, str]:
    return {pool: f"{in_flight[pool]}/{policy.limit(pool)}" for pool in work.pools}


def profile_warnings(snapshot: CatalogSnapshot) -> list[str]:
    """Contradictory or ineffective scheduling settings, each saying what will happen."""
    warnings = []
    defaults = sorted(
        row.profile_id for row in rows_as(Profile, snapshot.tables["profiles"].values()) if row.is_default
    )
    uses_profiles = bool(snapshot.tables["profiles"] or snapshot.tables["pipeline_profiles"])
    if not defaults and uses_profiles:  # a catalog without profiles runs everything balanced, as it should
        warnings.append(
            f"no profile has is_default: pipelines without a pipeline_profiles row use {FALLBACK_PROFILE}"
        )
    elif len(defaults) > 1:
        warnings.append(f"profiles {', '.join(defaults)} all have is_default: {defaults[0]} is used")
    policy = SchedulingPolicy.from_snapshot(snapshot)
    enabled = [p for p in snapshot.pipelines.values() if p.enabled]
    under_focus = sorted(p.pipeline_id for p in enabled if policy.profile_of(p.pipeline_id) == "focus")
    if under_focus and not any(p.criticality == "critical" for p in enabled):
        warnings.append(
            f"profile focus is in force for {', '.join(under_focus)} but no enabled pipeline is "
            "critical: nothing is held, focus schedules like balanced"
        )
    for row in rows_as(ProfileSetting, snapshot.tables["profile_settings"].values()):
        where = f"profile_settings[{row.profile_id}, {row.setting}]"
        if row.setting not in DEFAULT_SETTINGS:
            warnings.append(f"{where}: unknown setting, ignored; known: {', '.join(DEFAULT_SETTINGS)}")
        elif row.value <= 0 and row.setting in POSITIVE_SETTINGS:
            warnings.append(
                f"{where} = {row.value:g} must be positive: ignored, "
                f"the default {DEFAULT_SETTINGS[row.setting]:g} is used"
            )
        elif row.value <= 0:
            consequence = (
                "gold is always stale: its pipelines are due on every tick"
                if row.setting == "max_gold_age_minutes"
                else f"{row.setting.removeprefix('weight_')} pipelines score 0 or less and launch last"
            )
            warnings.append(f"{where} = {row.value:g}: {consequence}")
    return warnings
