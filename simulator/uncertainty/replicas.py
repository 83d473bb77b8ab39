"""Replicas of one scenario: seeds seed, seed+1, ..., parameter distributions drawn per replica, run
serially or in sweep.py's process pool, summarised as medians with 95% intervals."""
from __future__ import annotations

import copy
import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import RlsimError
from ..scenario import LIMITS_FIX, Scenario, load_limits, scenario_data, validate_scenario
from ..units import whole_number
from .distributions import Distribution, draw, find_distributions, put_dotted
from .intervals import aggregate, ci_coverage


@dataclass(frozen=True)
class ReplicaPlan:
    """What to run: one validated-once mapping, N seeds and the parameter draws of each replica."""

    data: dict[str, Any]
    source: str
    seeds: list[int]
    distributions: list[Distribution]
    draws: list[dict[str, float | int]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def varies(self) -> bool:
        """True when the answer needs the replica form (several seeds or a distribution value)."""
        return self.n > 1 or bool(self.distributions)

    def replica_data(self, index: int) -> dict[str, Any]:
        """The scenario mapping of replica `index`: its seed and its parameter draws."""
        data = dict(self.data)
        if self.distributions:
            data = _with_values(data, self.draws[index])
        data["seed"] = self.seeds[index]
        data["replicas"] = 1
        return data

    def scenario(self, index: int) -> Scenario:
        with self.draws_named(index):
            return validate_scenario(self.replica_data(index), self.source)

    @contextmanager
    def draws_named(self, index: int) -> Iterator[None]:
        """A drawn value the scenario or its run refuses is said as a draw (its replica, seed and
        law), with the bound that keeps the draws valid."""
        try:
            yield
        except RlsimError as exc:
            drawn = [d for d in self.distributions
                     if exc.field and (exc.field == d.key or exc.field.startswith(d.key + "."))]
            if not drawn or not self.draws:
                raise
            value = self.draws[index].get(drawn[0].key) if index < len(self.draws) else None
            raise RlsimError(f"{exc.message} (the value drawn for replica {index}, seed {self.seeds[index]}, from its "
                             f"{drawn[0].law} distribution)", source=exc.source, field=exc.field,
                             fix=_draw_fix(exc, value)) from None


def _draw_fix(exc: RlsimError, value: Any) -> str:
    """How to keep the draws valid: whole numbers for a whole-number key, numbers only for a numeric
    key, else bounds."""
    # pydantic's messages for a fractional number given to an int field and for a value outside a
    # Literal's names
    if exc.message.startswith("Input should be a valid integer") and isinstance(value, float):
        fix = "add integer: true to the distribution (the key takes whole numbers)"
    elif isinstance(value, (int, float)) and exc.message.startswith("Input should be '"):
        fix = "a distribution is for a numeric key; this key takes a name: give one value per run (--grid for several)"
    else:
        fix = "bound the draws to values the key takes with min: / max: on the distribution"
    return fix + (f"; {exc.fix}" if exc.fix else "")


def _with_values(data: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(data))
    for key, value in values.items():
        put_dotted(out, key, value)
    return out


def plan_replicas(spec: Any = None, *, seeds: int | None = None, **keywords: Any) -> ReplicaPlan:
    """The replica plan of a scenario. `seeds` (--seeds N) overrides the scenario's `replicas:`.
    Replica i runs seed + i; its parameter draws come from SeedSequence(seed).spawn(N)[i]."""
    from ..api import check_scenario_keywords
    check_scenario_keywords(keywords, "plan_replicas")   # a typo raised a TypeError naming scenario_data
    if isinstance(spec, Scenario) and not keywords:
        data, source = spec.to_dict(), spec.source
    else:
        data, source = scenario_data(spec, **keywords)
    given_n = seeds if seeds is not None else data.get("replicas", 1)
    n = whole_number(given_n)   # np.int64(16) is 16
    if n is None or n < 1:
        given = "seeds" if seeds is not None else "replicas"   # the API's keyword (rlsim's --seeds is checked by argparse)
        raise RlsimError(f"{given} must be a whole number >= 1, got {given_n!r}", source=source, field=given,
                         fix="e.g. seeds=16 (rlsim: --seeds 16)" if seeds is not None else "e.g. replicas: 16")
    check_runs(data, source, n, f"{n:,} replicas", "--seeds" if seeds is not None else "replicas")
    given_seed = data.get("seed", 0)
    base_seed = whole_number(given_seed)
    if base_seed is None or base_seed < 0:
        integral = isinstance(given_seed, float) and given_seed.is_integer() and given_seed >= 0
        raise RlsimError(f"seed must be a whole number >= 0, written as an integer, got {given_seed!r}", source=source,
                         field="seed", fix=f"write seed: {int(given_seed)}" if integral else "e.g. seed: 0 (--seed 0)")
    dists = find_distributions(data, source)
    streams = np.random.SeedSequence(base_seed).spawn(n)
    draws = [draw(data, dists, np.random.default_rng(s))[1] for s in streams] if dists else []
    return ReplicaPlan(data, source, [base_seed + i for i in range(n)], dists, draws)


def _replica_summary(plans: Sequence[ReplicaPlan], costs: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """One replica's summary; `layout: auto` plans on the first seed (one layout for every replica:
    they differ by their runs, as repeated runs of one configuration do)."""
    from ..api import simulate
    plan, index = plans[int(values["plan"])], int(values["replica"])
    with plan.draws_named(index):
        return dict(simulate(plan.scenario(index), costs=costs, keep_samples=False, plan_seed=plan.seeds[0]).summary)


def check_runs(data: Mapping[str, Any], source: str, runs: int, what: str, field: str) -> None:
    """Refuse, before any is run or drawn, more simulations than the scenario's limits.max_runs."""
    try:
        limit = load_limits(data.get("limits") or {}, source).max_runs
    except RlsimError:
        validate_scenario(dict(data), source)   # a bad limits section with the other bad fields, all named
        raise
    if runs > limit:
        raise RlsimError(f"{what} is {runs:,} simulations, past limits.max_runs={limit:,}", source=source,
                         field=field, fix=LIMITS_FIX.format(name="max_runs"))


def run_many(plans: Sequence[ReplicaPlan], *, jobs: int = 1, costs: Any = None) -> list[list[dict[str, Any]]]:
    """The summary of each replica of each plan, in order (the same bytes for any `jobs`); one pool
    for all of them when jobs > 1 (a FakeCosts-style `costs` object runs in this process)."""
    given_jobs, jobs = jobs, whole_number(jobs)   # np.int64(2) is 2
    if jobs is None or jobs < 1:
        raise RlsimError(f"jobs must be a whole number >= 1, got {given_jobs!r}", field="jobs",
                         fix="e.g. jobs=2 (rlsim: --jobs 2)")
    if plans:
        check_runs(plans[0].data, plans[0].source, sum(p.n for p in plans), "this design", "limits.max_runs")
    for plan in plans:
        for i in range(plan.n):
            plan.scenario(i)                 # a bad draw or key fails here, before any worker starts
    evaluate = functools.partial(_replica_summary, list(plans), costs)
    keys = [(j, i) for j, plan in enumerate(plans) for i in range(plan.n)]
    out: dict[tuple[int, int], dict[str, Any]] = {}
    if jobs <= 1 or len(keys) == 1 or costs is not None:
        from ..api import shared_plans
        with shared_plans():   # the replicas' one plan made once
            out = {(j, i): evaluate({"plan": j, "replica": i}) for j, i in keys}
    else:
        from ..sweep import LocalExecutor, Point
        points = [Point(k, {"plan": j, "replica": i}, f"{j}-{i}") for k, (j, i) in enumerate(keys)]
        for point, summary, error in LocalExecutor(jobs=jobs).map_unordered(evaluate, points):
            j, i = keys[point.index]
            if error or summary is None:   # the worker's text names the source already: once is enough
                text = str(error).removeprefix(f"{plans[j].source}: ")
                raise RlsimError(f"replica {i} (seed {plans[j].seeds[i]}): {text}", source=plans[j].source)
            out[(j, i)] = summary
    return [[out[(j, i)] for i in range(plan.n)] for j, plan in enumerate(plans)]


def run_replicas(plan: ReplicaPlan, *, jobs: int = 1, costs: Any = None) -> list[dict[str, Any]]:
    """The summary of each replica, in replica order."""
    return run_many([plan], jobs=jobs, costs=costs)[0]


def summarize(plan: ReplicaPlan, summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The median summary plus `seeds`, `ci95` and `replicas` (seeds run, values drawn)."""
    doc, ci95 = aggregate(summaries)
    doc["seeds"] = plan.n
    doc["ci95"] = ci95
    doc["ci_coverage"] = ci_coverage(plan.n)   # below 6 seeds the [min, max] covers less than 95%
    doc["replicas"] = {"seed": list(plan.seeds),
                       "sampled": {d.key: [draw_[d.key] for draw_ in plan.draws] for d in plan.distributions}}
    return doc


def replicate(spec: Scenario | dict | str | Path | None = None, *, seeds: int | None = None, jobs: int = 1,
              costs: Any = None, **keywords: Any) -> dict[str, Any]:
    """Run a scenario over N seeds (and its distribution values): the run summary with every numeric
    figure the median over replicas, plus `seeds`, `ci95` {dotted figure: [low, high]} and `replicas`.
    ``keywords`` are simulate's scenario keywords (overrides, iterations, ...)."""
    from ..api import check_scenario_keywords
    check_scenario_keywords(keywords, "replicate")
    plan = plan_replicas(spec, seeds=seeds, **keywords)
    return summarize(plan, run_replicas(plan, jobs=jobs, costs=costs))


def replicate_point(base: Any, seeds: int, values: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep point function (sweep.BaseScenario, grid values) run as `seeds` replicas."""
    from ..api import topology_prices
    from ..hardware.topology import load_topology
    plan = plan_replicas(base.spec, seeds=seeds, **base.keywords(values))
    summaries = run_replicas(plan)
    doc = summarize(plan, summaries)
    topology = load_topology(plan.scenario(0).topology)
    counts = topology.device_counts()
    doc.setdefault("device_kinds", list(counts))
    if len(counts) > 1:   # as simulate_point: a mixed cluster's cost weighs its kinds
        doc.setdefault("device_counts", counts)
    prices = topology_prices(topology)
    if prices:   # as simulate_point: a --seeds point read past the device entries' price_per_hour
        doc.setdefault("device_prices", prices)
    return doc
