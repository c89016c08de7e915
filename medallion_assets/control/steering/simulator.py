"""A discrete-event simulator of Medallion's launcher and Dagster's run queue, on the same policy code.

The scenario (YAML or JSON; `Scenario` below is its reference) lists pipelines with criticality, cost,
duration, source and target systems, and when their data arrives (a cron schedule, explicit minutes, or
both); concurrency throttles per system; and the profiles in force. The simulated world:

- **Launcher**: every `tick_seconds`, `scheduling.plan_tick` (the sensor's own policy) decides which due
  pipelines to launch and re-tags queued runs. A pipeline is due from its first unserved arrival until
  a run of it is launched; one run serves every arrival before its launch.
- **FIFO baseline** (`policy="fifo"`): what plain cron schedules do. Every arrival launches a run at once,
  priority 0, so the queue is first in, first out, and nothing looks at the systems.
- **FIFO with pools** (`policy="fifo_pools"`): the same, with Dagster's concurrency pools: a dequeued run
  holds its run slot while its work waits for a free slot on each of its systems.
- **Run queue**: as Dagster's queued run coordinator: the highest `dagster/priority` first, then first in,
  first out; held runs stay queued; at most `max_concurrent_runs` runs at a time.
- **Systems**: a run occupies its source and its target for its whole duration. A system's concurrency
  limit (throttles.DEFAULT_CONCURRENCY_LIMIT without a throttle) is its capacity: with n > limit runs on
  it, it is a hotspot and each of them progresses at limit/n speed (and costs proportionally more, since
  compute is billed by time). Every run start that takes a system over its limit is a throttle violation.

The scenario's `pipelines` entries: pipeline_id, criticality, expected_cost, duration_minutes, source,
target, schedule (cron, UTC, minute 0 = Monday 2024-01-01 00:00), arrivals_minutes. Top level: hours,
tick_seconds, max_concurrent_runs, default_profile, pipeline_profiles {pipeline: profile},
profile_settings {profile: {setting: value}}, throttles [{system_kind, system_id, limit}]. Example:
bench/scenarios/scheduling_500.yaml.

Measured: data latency (arrival → completion of the run that served it) on average and at p95, overall
and for critical pipelines; peak concurrency and peak launches per minute per system; violations; cost.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict, deque
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from medallion_assets.catalog.models import Identifier
from medallion_assets.control.steering.scheduling import (
    DEFAULT_SETTINGS,
    FALLBACK_PROFILE,
    PROFILES,
    ProfileName,
    QueuedRun,
    SchedulingPolicy,
    Work,
    plan_tick,
)
from medallion_assets.naming import pool_name

POLICIES = ("fifo", "fifo_pools", "balanced", "focus", "scenario")
# The epoch the scenario's minute 0 maps to, for cron schedules: a Monday at midnight UTC.
SCENARIO_START = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
EPSILON = 1e-9


class ScenarioInvalid(ValueError):
    """A scenario file that does not parse or does not validate; the message names file and field."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScenarioPipeline(_Model):
    pipeline_id: Identifier
    criticality: Literal["critical", "high", "normal", "low"] = "normal"
    expected_cost: float = Field(default=1.0, ge=0)
    duration_minutes: float = Field(gt=0, description="run time on systems within their limits")
    source: Identifier = Field(description="source system")
    target: Identifier = Field(description="target system")
    schedule: str | None = Field(default=None, description="cron: data arrives at every tick within `hours`")
    arrivals_minutes: list[float] = Field(
        default_factory=list, description="further arrivals, minutes from start"
    )

    def pools(self) -> tuple[str, ...]:
        return pool_name("source", self.source), pool_name("target", self.target)


class ScenarioThrottle(_Model):
    system_kind: Literal["source", "target"]
    system_id: Identifier
    limit: int = Field(gt=0, description="concurrent runs")


class Scenario(_Model):
    hours: float = Field(default=4, gt=0, description="arrivals are generated within this horizon")
    tick_seconds: float = Field(default=30, gt=0, description="the launcher sensor's interval")
    max_concurrent_runs: int = Field(default=10, gt=0, description="dagster.yaml's run queue limit")
    default_profile: ProfileName = FALLBACK_PROFILE
    pipeline_profiles: dict[str, ProfileName] = Field(default_factory=dict)
    profile_settings: dict[ProfileName, dict[str, float]] = Field(default_factory=dict)
    throttles: list[ScenarioThrottle] = Field(default_factory=list)
    pipelines: list[ScenarioPipeline]

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        ids = [p.pipeline_id for p in self.pipelines]
        problems = [f"pipeline {i!r} appears twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
        problems += [
            f"pipeline_profiles names unknown pipeline {i!r}" for i in self.pipeline_profiles if i not in ids
        ]
        problems += [
            f"profile_settings[{profile}] has unknown setting {name!r}; known: {', '.join(DEFAULT_SETTINGS)}"
            for profile, values in self.profile_settings.items()
            for name in values
            if name not in DEFAULT_SETTINGS
        ]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def policy(self, profile: str | None = None) -> SchedulingPolicy:
        """The scheduling policy this scenario describes, or `profile` in force for every pipeline."""
        settings: dict[str, dict[str, float]] = {
            p: {**DEFAULT_SETTINGS, **self.profile_settings.get(p, {})} for p in PROFILES
        }
        limits = {pool_name(t.system_kind, t.system_id): t.limit for t in self.throttles}
        if profile:
            return SchedulingPolicy(profile, {}, settings, limits)
        return SchedulingPolicy(self.default_profile, dict(self.pipeline_profiles), settings, limits)

    def only(self, criticality: str) -> Scenario:
        """The same scenario with only the pipelines of one criticality (e.g. critical ones running alone)."""
        return self.model_copy(
            update={"pipelines": [p for p in self.pipelines if p.criticality == criticality]}
        )

    def arrivals(self) -> list[tuple[float, str]]:
        """(seconds from start, pipeline id) of every data arrival, in time order."""
        from medallion_assets.dagster_compat import cron_string_iterator  # Dagster's own cron semantics

        horizon = self.hours * 3600
        arrivals = []
        for pipeline in self.pipelines:
            arrivals += [(minute * 60, pipeline.pipeline_id) for minute in pipeline.arrivals_minutes]
            if pipeline.schedule:
                for tick in cron_string_iterator(SCENARIO_START, pipeline.schedule, "UTC"):
                    offset = tick.timestamp() - SCENARIO_START
                    if offset >= horizon:
                        break
                    arrivals.append((offset, pipeline.pipeline_id))
        return sorted(arrivals)


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())  # JSON is YAML too
        return Scenario.model_validate(raw)
    except yaml.YAMLError as error:
        raise ScenarioInvalid(f"{path}: not YAML or JSON: {error}") from error
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'scenario'}: {e['msg']}" for e in error.errors()
        )
        raise ScenarioInvalid(f"{path}: {problems}") from error


@dataclass
class _Run:
    run_id: int
    pipeline: ScenarioPipeline
    arrivals: list[float]
    priority: int = 0
    profile: str = "fifo"
    held: bool = False
    remaining: float = 0.0  # seconds of work left at full speed
    started: float | None = None

    def work(self) -> Work:
        return _work(self.pipeline, self.arrivals[0])


def _work(pipeline: ScenarioPipeline, due_since: float) -> Work:
    return Work(
        pipeline.pipeline_id, pipeline.criticality, pipeline.expected_cost, pipeline.pools(), due_since
    )


@dataclass
class SystemStats:
    limit: int
    peak_concurrency: int = 0
    peak_launches_per_minute: int = 0
    violations: int = 0


@dataclass
class SimulationResult:
    policy: str
    runs: int
    avg_latency_min: float
    p95_latency_min: float
    critical_avg_latency_min: float | None
    critical_p95_latency_min: float | None
    violations: int
    total_cost: float
    makespan_min: float
    systems: dict[str, SystemStats]
    # (minute, pool → runs on it) at every change: the load over time, for plots.
    load: list[tuple[float, dict[str, int]]] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        """Everything but the load timeline, JSON-ready."""
        return {k: v for k, v in asdict(self).items() if k != "load"}


class _World:
    """The simulated launcher, run queue and systems; `run` advances it event by event."""

    def __init__(self, scenario: Scenario, policy: str):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; policies: {', '.join(POLICIES)}")
        self.scenario, self.fifo, self.pools_enforced = (
            scenario,
            policy.startswith("fifo"),
            policy == "fifo_pools",
        )
        self.policy = scenario.policy(policy if policy in PROFILES else None)
        self.name = {"scenario": "scenario profiles", "fifo_pools": "fifo + pools"}.get(policy, policy)
        self.now = 0.0
        self.pending: dict[str, list[float]] = defaultdict(list)  # pipeline → arrivals no run serves yet
        self.queue: list[_Run] = []
        self.running: list[_Run] = []
        self.on_system: Counter[str] = Counter()
        self.latencies: list[tuple[ScenarioPipeline, float]] = []
        self.starts: dict[str, list[float]] = defaultdict(list)
        self.cost = 0.0
        self.violations: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.load: list[tuple[float, dict[str, int]]] = []
        self.run_count = 0
        pools = {pool for p in scenario.pipelines for pool in p.pools()}
        self.limits = {pool: self.policy.limit(pool) for pool in sorted(pools)}

    def run(self) -> SimulationResult:
        by_id = {p.pipeline_id: p for p in self.scenario.pipelines}
        arrivals = deque((at, by_id[pid]) for at, pid in self.scenario.arrivals())
        next_tick = 0.0
        while arrivals or self.pending or self.queue or self.running:
            finish = min(
                (r.remaining / speed for r in self.running if (speed := self._speed(r))), default=math.inf
            )
            upcoming = min(
                arrivals[0][0] if arrivals else math.inf,
                finish + self.now,
                math.inf if self.fifo else next_tick,
            )
            self._advance(upcoming)
            while arrivals and arrivals[0][0] <= self.now + EPSILON:
                self._arrive(arrivals.popleft()[1])
            for done in [r for r in self.running if r.remaining <= EPSILON]:
                self._complete(done)
            if not self.fifo and next_tick <= self.now + EPSILON:
                self._tick()
                next_tick += self.scenario.tick_seconds
            self._dequeue()
        return self._result()

    def _speed(self, run: _Run) -> float:
        if run.started is None:
            return 0.0
        return min(min(1.0, self.limits[pool] / self.on_system[pool]) for pool in run.pipeline.pools())

    def _advance(self, until: float) -> None:
        for run in self.running:
            run.remaining -= self._speed(run) * (until - self.now)
        self.now = until

    def _arrive(self, pipeline: ScenarioPipeline) -> None:
        if self.fifo:
            self._enqueue(pipeline, [self.now], priority=0, profile="fifo", held=False)
        else:
            self.pending[pipeline.pipeline_id].append(self.now)

    def _enqueue(
        self, pipeline: ScenarioPipeline, arrivals: list[float], *, priority: int, profile: str, held: bool
    ) -> None:
        self.run_count += 1
        self.queue.append(
            _Run(
                self.run_count,
                pipeline,
                arrivals,
                priority=priority,
                profile=profile,
                held=held,
                remaining=pipeline.duration_minutes * 60,
            )
        )

    def _tick(self) -> None:
        in_flight = {r.pipeline.pipeline_id for r in [*self.queue, *self.running]}
        by_id = {p.pipeline_id: p for p in self.scenario.pipelines}
        waiting = [_work(by_id[pid], times[0]) for pid, times in self.pending.items() if pid not in in_flight]
        queued = [QueuedRun(str(r.run_id), r.work(), r.profile, r.held) for r in self.queue]
        plan = plan_tick(self.policy, self.now, waiting, queued, [r.work() for r in self.running])
        for decision in plan.launches:
            pipeline_id = decision.work.pipeline_id
            self._enqueue(
                by_id[pipeline_id],
                self.pending.pop(pipeline_id),
                priority=decision.priority,
                profile=decision.profile,
                held=decision.held,
            )
        for decision in plan.retags:
            # As the sensor does: cancel and requeue, so the run goes to the back of its priority.
            run = next(r for r in self.queue if str(r.run_id) == decision.run_id)
            self.queue.remove(run)
            run.priority, run.profile, run.held = decision.priority, decision.profile, decision.held
            self.queue.append(run)

    def _dequeue(self) -> None:
        free = self.scenario.max_concurrent_runs - len(self.running)
        ready = [r for r in sorted(self.queue, key=lambda r: -r.priority) if not r.held][: max(free, 0)]
        for run in ready:
            self.queue.remove(run)
            self.running.append(run)
        started = False
        for run in self.running:
            if run.started is not None or not self._pools_free(run):
                continue
            run.started, started = self.now, True
            for pool in run.pipeline.pools():
                self.on_system[pool] += 1
                self.peak[pool] = max(self.peak[pool], self.on_system[pool])
                self.starts[pool].append(self.now)
                if self.on_system[pool] > self.limits[pool]:
                    self.violations[pool] += 1
        if started:
            self._record_load()

    def _pools_free(self, run: _Run) -> bool:
        """Under pools, a dequeued run's work waits, holding its run slot, until each of its systems has
        room."""
        return not self.pools_enforced or all(
            self.on_system[p] < self.limits[p] for p in run.pipeline.pools()
        )

    def _complete(self, run: _Run) -> None:
        self.running.remove(run)
        for pool in run.pipeline.pools():
            self.on_system[pool] -= 1
        # Only a started run does work (see _speed), so only a started run completes.
        assert run.started is not None
        nominal = run.pipeline.duration_minutes * 60
        self.cost += run.pipeline.expected_cost * (self.now - run.started) / nominal
        self.latencies += [(run.pipeline, self.now - arrival) for arrival in run.arrivals]
        self._record_load()

    def _record_load(self) -> None:
        self.load.append((self.now / 60, {pool: self.on_system[pool] for pool in self.limits}))

    def _result(self) -> SimulationResult:
        every = [latency / 60 for _, latency in self.latencies]
        critical = [latency / 60 for p, latency in self.latencies if p.criticality == "critical"]
        systems = {
            pool: SystemStats(
                limit, self.peak[pool], _peak_per_minute(self.starts[pool]), self.violations[pool]
            )
            for pool, limit in self.limits.items()
        }
        return SimulationResult(
            self.name,
            self.run_count,
            _mean(every),
            _p95(every),
            _mean(critical) if critical else None,
            _p95(critical) if critical else None,
            sum(self.violations.values()),
            round(self.cost, 2),
            round(self.now / 60, 2),
            systems,
            self.load,
        )


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 2) if values else 0.0


def _p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)], 2)


def _peak_per_minute(starts: list[float]) -> int:
    """The most run starts within any 60-second window."""
    peak, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= 60:
            first += 1
        peak = max(peak, last - first + 1)
    return peak


def simulate(scenario: Scenario, policy: str = "scenario") -> SimulationResult:
    """Simulate `scenario` under `policy`: fifo, balanced or focus for every pipeline, or the scenario's own
    profiles (`scenario`)."""
    return _World(scenario, policy).run()


def results_json(results: list[SimulationResult]) -> str:
    return json.dumps([r.summary() for r in results], indent=2)
