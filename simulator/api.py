"""The public Python API: ``simulate`` one scenario, ``compare`` schedules on it.

    >>> import simulator
    >>> r = simulator.simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 4})
    >>> r.summary["tokens_per_s"], r.timeline.head()
"""
from __future__ import annotations

import contextvars
import copy
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .engine_software import stage_forced_notes
from .errors import ReadPastError, RlsimError, blamed_on_set, raised_from
from .hardware.topology import load_topology
from .json_text import json_text
from .llm.lengths import LengthDistribution, cap_notes
from .overrides import parse_assignment, string_items
from .rl.pools import served_devices, split_warning
from .rl.schedules import RunRecord, run_schedule
from .rl.timeline import expand_devices
from .scenario import (
    SCHEDULE_CLASSES,
    Scenario,
    check_work,
    compared_schedules,
    load_scenario,
    scenario_data,
    schedule_left_out_notes,
    validate_scenario,
    validated_reading_past,
)
from .units import whole_number

if TYPE_CHECKING:
    # pandas (and metrics and the trace writer, which need it) are imported once a run has
    # finished: `rlsim run` reaches its first simulated event without them (benchmarks/bench_startup.py).
    import pandas as pd

DEFAULT_COMPARE = ("colocated", "disaggregated", "stalesync")


@dataclass
class SimulationResult:
    scenario: Scenario
    summary: dict[str, Any]
    timeline: pd.DataFrame          # group records: des.INTERVAL_COLUMNS + rank_start, rank_count
    iterations: pd.DataFrame
    samples: pd.DataFrame | None    # one row per sample (the last rows only under output.keep_sample_rows);
                                    # None: simulate(keep_samples=False)
    record: RunRecord = field(repr=False)
    # The device kinds of the run's topology (a sweep prices a point per device-hour from them);
    # empty when the costs were given (no topology was built).
    device_kinds: list[str] = field(default_factory=list)
    device_counts: dict[str, int] = field(default_factory=dict)   # devices of each kind (the same source)
    # a kind's price per device-hour where its device entry gives one (price_per_hour), for the cost
    # of a capacity answer beside --price (capacity.price_per_device_hour)
    device_prices: dict[str, float] = field(default_factory=dict)

    def device_timeline(self) -> pd.DataFrame:
        """One row per device and interval (des.INTERVAL_COLUMNS); large at scale."""
        return expand_devices(self.timeline)

    def time_in_states(self) -> pd.DataFrame:
        from . import metrics

        return metrics.time_in_states(self.timeline)

    def write(self, out_dir: str | Path) -> list[Path]:
        from .report.trace import chrome_trace

        out = Path(out_dir)
        if out.exists() and not out.is_dir():   # a FileExistsError from mkdir before
            raise RlsimError(f"{out} is a file; write() takes a folder", field="out_dir",
                             fix="give a folder (new or existing)")
        out.mkdir(parents=True, exist_ok=True)
        files = {
            "scenario.yaml": scenario_snapshot(self.scenario.to_dict(), self.scenario.source),
            # as --json writes it: a non-finite figure (no JSON number) as null, not Infinity
            "summary.json": json_text(self.summary, indent=2, sort_keys=False) + "\n",
            "trace.json": json.dumps(chrome_trace(self.timeline, self.summary), separators=(",", ":")),
        }
        written = []
        for name, text in files.items():
            (out / name).write_text(text)
            written.append(out / name)
        for name, frame in (("timeline.csv", self.timeline), ("iterations.csv", self.iterations),
                            ("samples.csv", self.samples), ("states.csv", self.time_in_states())):
            if frame is None:       # simulate(keep_samples=False): no per-sample table to write
                continue
            frame.to_csv(out / name, index=False)
            written.append(out / name)
        return written


def _sampler(dist: LengthDistribution):
    def sample(rng, n_prompts, n, step):
        return dist.sample(rng, n_prompts, n, step)
    return sample


def _auto_plan(sc: Scenario, topology: Any, trained: Sequence[Any] = ()) -> Any:
    """autoplan.auto_layouts (an AutoPlan), or None when no layout is ``auto`` and no ``planner:``
    settings are given (the defaults are valid): then the planner is not even imported. Inside
    ``shared_plans()`` a plan of the same inputs made earlier in it is reused (a fresh copy)."""
    w = sc.workload
    if w.train_layout != "auto" and w.rollout_layout != "auto" and not sc.planner:
        return None
    from .autoplan import auto_layouts
    kept = _SHARED_PLANS.get()
    if kept is None or trained:
        return auto_layouts(sc, topology, trained)
    key = json.dumps(sc.to_dict(), sort_keys=True, default=str)
    if key not in kept:
        kept[key] = auto_layouts(sc, topology)
    return copy.deepcopy(kept[key])   # a run writes into its plan (auto_layout.replanned, the faster of two)


# The plans `shared_plans()` keeps while it is open (None: none kept, every run plans)
_SHARED_PLANS: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("shared_plans", default=None)


@contextmanager
def shared_plans() -> Iterator[None]:
    """While open, runs whose `layout: auto` inputs are the same (the scenario's every key, its seed
    or ``plan_seed`` included) share one plan, made once: the replicas of a scenario, which plan on
    its first seed (uncertainty.replicas). Scoped, so a file edited between two calls is read again."""
    token = _SHARED_PLANS.set({})
    try:
        yield
    finally:
        _SHARED_PLANS.reset(token)


# Plans `layout: auto` may make for one run: a run whose trained batch is heavier than the drawn
# batches the planner judged memory on (colocated StaleSync trains its consolidated tail, long
# samples together) plans again with that batch, and runs again; each plan judges every batch
# that broke an earlier one, so the layout that ran fits every batch the run trained.
AUTO_LAYOUT_PLANS = 4


def simulate(scenario: Scenario | dict | str | Path | None = None, *, costs: Any = None,
             progress: Any = None, keep_samples: bool = True, plan_seed: int | None = None,
             **keywords: Any) -> SimulationResult:
    """Run one scenario. ``keywords`` are load_scenario's (topology, workload, schedule, overrides,
    iterations, seed). ``costs`` replaces the cost models (tests: rl.fake_costs.FakeCosts). A run past
    limits.max_work is refused before it starts. ``progress``: an object with ``estimate(WorkEstimate)``
    (called once, before the run) and ``__call__(done, total)`` (each iteration), e.g. a terminal bar.

    ``keep_samples``: return the per-sample table ``samples`` (one row per generated sample: about
    96 bytes a row, 8,192 rows a step in the seed scenario, so ~0.75 MiB per step that the result
    holds). False: ``samples`` is None, and the rows fold into exact counts during the run once the
    critical path has walked their steps, so memory stays flat over iterations; the summary is the
    same, figure for figure (`rlsim run` does this unless --out writes the table). With
    schedule.failures every row is kept either way (a roll-back rewrites recorded rows).

    ``plan_seed``: the seed `layout: auto` plans with (the planner's memory check draws its batches
    from it; default the scenario's): the replicas of a scenario plan on its first seed, so they
    share one layout and differ by their runs."""
    _check_hooks(costs, progress)
    check_scenario_keywords(keywords, "simulate")
    plan_on = None if plan_seed is None else whole_number(plan_seed)   # np.int64(0) is 0
    if plan_seed is not None and (plan_on is None or plan_on < 0):
        raise RlsimError(f"plan_seed must be a whole number >= 0 or None, got {plan_seed!r}", field="plan_seed",
                         fix="e.g. plan_seed=0")
    if not isinstance(keep_samples, bool):   # "no" kept the samples
        raise RlsimError(f"keep_samples must be True or False, got {keep_samples!r}", field="keep_samples",
                         fix="keep_samples=False drops the per-sample table")
    given = keywords.get("overrides")   # load_scenario checks its form: only a list's items are blamed here
    overrides = [str(item) for item in given] if isinstance(given, (list, tuple)) else []
    try:
        sc = scenario if isinstance(scenario, Scenario) and not keywords else load_scenario(scenario, **keywords)
    except RlsimError as exc:   # a value an override gave is the override's, as the CLI's --set says
        raise _on_override(exc, overrides) from None
    if sc.replicas > 1:   # one run would read it past (a distribution value is refused likewise)
        raise RlsimError(f"replicas: {sc.replicas} asks for {sc.replicas} runs over seeds, and simulate runs one",
                         source=sc.source, field="replicas",
                         fix="run them with simulator.uncertainty.replicate (rlsim run runs them), or drop replicas")
    try:
        with _blamed_on_its_file(sc.source, sc.workload.name):   # a model's check names the field; the scenario the file
            return _simulate(sc, costs, progress, keep_samples, plan_on)
    except RlsimError as exc:
        raise _on_override(exc, overrides) from None


def _on_override(exc: RlsimError, overrides: list[str]) -> RlsimError:
    """``exc`` naming the override that gave its field (errors.blamed_on_set); a kind callers catch by
    type (HeavierBatchThanPlanned) stays that kind, unchanged."""
    return blamed_on_set(exc, overrides) if type(exc) is RlsimError else exc


@contextmanager
def _blamed_on_its_file(source: str, workload_name: str) -> Iterator[None]:
    """raised_from(source), but an error on a key the scenario's workload file gave names that file
    (scenario.error_source), also when the model named the scenario."""
    from .scenario import error_source
    try:
        with raised_from(source):
            yield
    except RlsimError as exc:
        if exc.source != source:
            raise
        where = error_source(exc.fields, source, workload_name)
        if where == source:
            raise
        raise exc.with_source(where) from None


SCENARIO_KEYWORDS = ("topology", "workload", "schedule", "overrides", "iterations", "seed")   # load_scenario's


def check_scenario_keywords(keywords: Mapping[str, Any], function: str) -> None:
    """Keyword arguments are load_scenario's: another (a typo such as iteratons=2) raised a TypeError
    naming an internal function. A key given twice in ``overrides`` is refused as the CLI refuses a
    --set key given twice (overrides=["schedule=async", "schedule=stalesync"]: the last won without a
    word); load_scenario itself keeps applying them in order, which the package's own callers compose
    (calibrate's --predict items over its --set items, a fit's values over the scenario's)."""
    import difflib

    from .overrides import refuse_a_key_given_twice
    given = keywords.get("overrides")
    if isinstance(given, (list, tuple)) and all(isinstance(item, str) for item in given):   # else load_scenario's
        refuse_a_key_given_twice([item for item in given if "=" in item], flag="overrides")   # error on its form
    for name in keywords:
        if name not in SCENARIO_KEYWORDS:
            close = difflib.get_close_matches(name, SCENARIO_KEYWORDS, n=1)
            raise RlsimError(f"{function}() takes no argument {name!r}" + (f"; did you mean {close[0]!r}?" if close
                                                                            else ""),
                             field=name, fix=f"give the scenario's keys as {', '.join(SCENARIO_KEYWORDS)}, or as "
                                             "overrides=['KEY=VALUE']")


def _pack_note(sc: Scenario, prompt: Any, resp: Any) -> list[str]:
    """A packed row (schedule.pack_tokens) shorter than the longest sample the laws can draw: such a
    sample runs as a micro-batch of its own, sequence mode in effect (it went unsaid; a trial)."""
    pack = sc.schedule.pack_tokens
    if pack is None or prompt.max is None or resp.max is None or pack >= prompt.max + resp.max:
        return []
    return [f"schedule.pack_tokens {pack:,} is below the longest sample the length laws can draw "
            f"({prompt.max + resp.max:,} tokens: prompt max + response max): a sample longer than a row runs as "
            "a micro-batch of its own (verl refuses a token budget below that width)"]


def _pool_kinds_note(rec: Any, topology: Any, instance_devices: int = 0) -> list[str]:
    """Split pools on a mixed cluster: which kind each pool holds (pools take ranks in order, so the
    order of the topology's groups decides which kind generates: 1.74x apart on H100 + H20), and
    rollout instances (of `instance_devices`) that span kinds."""
    pools = {name: pool for name, pool in rec.pools.items() if pool.count}
    if topology is None or len(topology.device_kinds()) < 2:
        return []
    notes = []
    if len(pools) > 1:
        held = "; ".join(f"{name} on {', '.join(f'{count} {kind}' for kind, count in _kinds_of(topology, pool.ranks))}"
                         for name, pool in pools.items())
        notes.append(f"split pools on a mixed cluster take the ranks in order: {held}; to give the other kind the "
                     "other pool, list the topology's groups in the other order (or size the pools: "
                     "schedule.rollout_devices)")
    trainer = pools.get("train") or pools.get("actor")
    kinds = _kinds_of(topology, trainer.ranks) if trainer is not None else []
    if len(kinds) > 1:   # 8 H20s beside 8 H100s made a step 31% slower, unsaid
        notes.append(f"the trainer spans {' and '.join(kind for kind, _ in kinds)} and runs an even split at the pace "
                     "of its slowest kind: the faster devices wait; rlsim plan --balance prices a speed-proportional "
                     "split, which a run does not take")
    rollout = pools.get("rollout") or pools.get("actor")
    if rollout is not None and instance_devices > 0:
        notes += _spanning_instances_note(topology, list(rollout.ranks), instance_devices)
    return notes


def _spanning_instances_note(topology: Any, ranks: list[int], per_instance: int) -> list[str]:
    """A note where rollout instances span device kinds: each is costed on the worst case of its
    kinds at every rate (llm/inference.instance_device), which is easy to miss (an H100 + H20 TP-16
    engine was priced as all H100s)."""
    chunks = [ranks[i:i + per_instance] for i in range(0, len(ranks) - per_instance + 1, per_instance)]
    spanning = [chunk for chunk in chunks if len(_kinds_of(topology, chunk)) > 1]
    if not spanning:
        return []
    kinds = " and ".join(dict.fromkeys(kind for chunk in spanning for kind, _ in _kinds_of(topology, chunk)))
    return [f"{len(spanning)} of {len(chunks)} rollout instances ({per_instance} devices each) span {kinds}: each "
            "runs at the slowest of its kinds at every rate (prefill FLOPs, decode HBM bandwidth, the smallest HBM), "
            "no faster than on its slowest kind alone; an instance size that divides each group's devices keeps "
            "instances on one kind"]


def _kinds_of(topology: Any, ranks: Any) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for rank in ranks:
        kind = topology.kind_of(rank)
        counts[kind] = counts.get(kind, 0) + 1
    return list(counts.items())


def _check_hooks(costs: Any, progress: Any) -> None:
    """simulate's ``costs`` and ``progress`` arguments have what the run calls on them (an error
    naming the argument and the missing members, not an AttributeError mid-run)."""
    if costs is not None:
        from .rl.costs import Costs

        wanted = [*Costs.__annotations__, *(name for name in vars(Costs) if not name.startswith("_"))]
        missing = [name for name in dict.fromkeys(wanted) if not hasattr(costs, name)]
        if missing:
            raise RlsimError(f"costs: a {type(costs).__name__} lacks {', '.join(missing)} of the cost protocol",
                             field="costs", fix="pass an object with every member of simulator.rl.costs.Costs "
                                                "(e.g. simulator.rl.fake_costs.FakeCosts()), or leave costs out")
    if progress is not None and not (callable(progress) and callable(getattr(progress, "estimate", None))):
        raise RlsimError(f"progress: a {type(progress).__name__} is not a progress hook",
                         field="progress", fix="pass an object with estimate(WorkEstimate) and __call__(done, total), "
                                               "or leave progress out")


def topology_prices(topology: Any) -> dict[str, float]:
    """Each device kind's price per device-hour where its device entry gives one (price_per_hour): what
    a run's ``device_prices`` and a sweep point's (capacity.price_per_device_hour) read."""
    return {kind: float(spec.price_per_hour) for kind, spec in topology.kind_specs().items()
            if spec.price_per_hour is not None}


def _simulate(sc: Scenario, costs: Any, progress: Any, keep_samples: bool,
              plan_seed: int | None = None) -> SimulationResult:
    w = sc.workload
    # the length laws first: the planner and the costs read their caps (a bad one is its own error)
    prompt = LengthDistribution.from_mapping(w.prompt_length, sc.source, "workload.prompt_length")
    resp = LengthDistribution.from_mapping(w.response_length, sc.source, "workload.response_length")
    plan = None
    replanner = None
    device_kinds: list[str] = []
    device_counts: dict[str, int] = {}
    device_prices: dict[str, float] = {}
    topology = None   # given costs (tests' fakes) run on no topology
    if costs is None:
        topology = load_topology(sc.topology, max_devices=sc.limits.max_devices, spec_source=sc.source)
        estimate = check_work(sc, topology.num_devices)
        if progress is not None:
            progress.estimate(estimate)
        n_devices = topology.num_devices
        device_counts = topology.device_counts()
        device_kinds = list(device_counts)
        device_prices = topology_prices(topology)
        rec, costs, plan = _run_planned(sc, topology, prompt, resp, progress, keep_samples, plan_seed)
    else:
        n_devices = int(getattr(costs, "n_devices", 0)) or 8
        if sc.schedule.failures:
            from .rl.schedules import SameLayoutReplanner
            replanner = SameLayoutReplanner(int(getattr(costs, "devices_per_node", 0) or 0))
        rec = run_schedule(sc, costs, n_devices, _sampler(prompt), _sampler(resp), replanner=replanner,
                           progress=progress, keep_samples=keep_samples)
    from . import metrics

    timeline = rec.timeline.to_frame()
    if keep_samples:
        samples = rec.samples.to_frame()
    else:                   # no frame that the result does not hold; the store's spare room given back
        samples = None
        rec.samples.trim()
    # the figures from the store's columns, which the samples frame holds as they are (the same
    # arrays): a third of the summary's time went to reading them back through pandas
    summary = metrics.summary(rec, timeline, None)
    if hasattr(costs, "effective_layouts"):
        train_pool = rec.pools.get("train") or rec.pools["actor"]
        rollout_pool = rec.pools.get("rollout") or rec.pools["actor"]
        if rec.failures and rec.failures[-1].get("train_layout_after"):
            # the layout the run ended on (each failure entry keeps the layout it re-planned to)
            rollout = costs.rollout_layout_used(rollout_pool.count)
            rollout["instances"] = rec.failures[-1].get("rollout_instances_after", rollout["instances"])
            summary["layouts"] = {"train": dict(rec.failures[-1]["train_layout_after"]), "rollout": rollout}
        else:
            summary["layouts"] = costs.effective_layouts(train_pool.count, rollout_pool.count)
    if plan is not None and plan.detail:
        summary["auto_layout"] = plan.detail
    # the chain of intervals that set each step's length (rl/critical_path.py), from the record
    from .rl import critical_path  # pandas: after the run (see the TYPE_CHECKING note above)
    summary["critical_path"] = critical_path.of_run(rec, timeline)
    # what a reader of the figures must know (the console prints them as notes; --json and the API carry them)
    summary["notes"] = (metrics.summary_notes(summary) + cap_notes(prompt, resp) + _pool_kinds_note(rec, topology, costs.instance_devices)
                        + _pack_note(sc, prompt, resp) + list(getattr(costs, "engine_notes", ()))
                        + stage_forced_notes(sc.workload.engine, summary.get("layouts", {}).get("rollout", {}).get("pp"))
                        + schedule_left_out_notes(sc))
    summary["warnings"] = []   # always there, as the notes (a notebook read it with .get)
    idle = n_devices - sum(pool.count for pool in rec.pools.values())
    if idle > 0:   # issue 14: said, not only shown as the placement bubble
        summary["warnings"].append(
            f"{idle} of {n_devices} devices idle the whole run: the pools hold whole training replicas of "
            f"{costs.train_group_devices} and rollout instances of {costs.instance_devices} devices (bubble: "
            "placement); give a device count or layouts (tp x pp x cp) that divide it evenly")
    moved = split_warning(sc.schedule, n_devices - sum(served_devices(sc.workload).values()), rec.pools)
    if moved:   # the split the user asked is not the one that ran: said, not only shown in `pools`
        summary["warnings"].append(moved)
    step_prompts = sc.schedule.step_prompts(sc.workload)
    if step_prompts != sc.workload.prompts_per_step:   # a kind whose step is set by its own knobs
        summary["warnings"].append(
            f"kind {sc.schedule.kind} trains {step_prompts:,} prompts a step (trigger_parameter_sync_step x "
            f"require_batches x mini_batch_prompts), not workload.prompts_per_step {sc.workload.prompts_per_step:,}, "
            f"which it does not read: set prompts_per_step to {step_prompts:,}, or those knobs to your batch")
    end = float(summary.get("makespan_s", 0.0))
    late = [f"schedule.failures.{i} (at_s {ev.at_s:g})" for i, ev in enumerate(sc.schedule.failures)
            if ev.at_s >= end]
    deferred = [f"a failure of {f['fail']} due at {f['due_s']:g} s" for f in rec.failures if "due_s" in f]
    if deferred:   # inside an earlier failure's recovery: taken at its end (the record's at_s)
        summary["warnings"].append(
            f"{', '.join(deferred)} fell inside an earlier failure's recovery (re-plan and restart), which rlsim "
            "does not interrupt: taken when that recovery ended (failures[].at_s; due_s is when it was due)")
    if late:   # a failure the run never reached: said, not dropped (the end is known only now)
        summary["warnings"].append(
            f"{', '.join(late)} came at or after the run's end ({end:g} s): no failure happened there; "
            "give an earlier at_s or more iterations")
    return SimulationResult(sc, summary, timeline, metrics.iterations_frame(rec), samples, rec, device_kinds,
                            device_counts, device_prices)


def _run_planned(sc: Scenario, topology: Any, prompt: LengthDistribution, resp: LengthDistribution, progress: Any,
                 keep_samples: bool, plan_seed: int | None = None) -> tuple[Any, Any, Any]:
    """(record, costs, plan) of a run on the scenario's own cost models, its `layout: auto` sides
    planned (the planning cost in simulated time) and planned again while a trained batch does not
    fit the training layout planned (AUTO_LAYOUT_PLANS)."""
    from .rl.llm_costs import HeavierBatchThanPlanned, LlmCosts
    trained: list[Any] = []
    tried: list[dict[str, Any]] = []
    planned = sc if plan_seed is None else sc.model_copy(update={"seed": plan_seed})   # what the planner draws with
    while True:
        plan = _auto_plan(planned, topology, trained)       # layout: auto -> the planner
        costs = LlmCosts(sc, topology, auto_layouts=plan.layouts if plan else None)
        replanner = None
        if sc.schedule.failures:   # its re-plans judge the batches that broke an earlier run too
            from .autoplan import PlannerReplanner
            replanner = PlannerReplanner(sc, topology, trained)
        try:
            rec = run_schedule(sc, costs, topology.num_devices, _sampler(prompt), _sampler(resp),
                               start_s=plan.planning_cost_s if plan else 0.0, replanner=replanner, progress=progress,
                               keep_samples=keep_samples)
        except HeavierBatchThanPlanned as exc:
            layout = plan.layouts["train"] if plan else {}
            # a layout planned again that a batch already broke would break again; a failure's re-plan
            # (its refused layout not the plan's) judges the batch in the next run and may change
            refused_planned = exc.layout is None or exc.layout == layout
            if len(tried) + 1 >= AUTO_LAYOUT_PLANS or (refused_planned and any(t["layout"] == layout for t in tried)):
                raise
            tried.append({"layout": dict(layout), "did_not_fit": exc.memory_message,
                          **({} if refused_planned else {"refused_replanned_layout": dict(exc.layout)})})
            trained.append(exc.batch)
            continue
        if tried:   # said in the summary (auto_layout.replanned) and its notes
            plan.detail["replanned"] = tried
        if plan is not None and plan.consolidating_train:
            return _faster_of_two(sc, topology, prompt, resp, progress, keep_samples, (rec, costs, plan), replanner,
                                  (planned, trained))
        return rec, costs, plan


def _faster_of_two(sc: Scenario, topology: Any, prompt: LengthDistribution, resp: LengthDistribution, progress: Any,
                   keep_samples: bool, first: tuple[Any, Any, Any], replanner: Any,
                   planning: tuple[Scenario, list[Any]]) -> tuple[Any, Any, Any]:
    """Colocated StaleSync under `layout: auto` whose fastest training layout leaves no room beside
    the tail (it runs synchronous) against the fastest that does (it consolidates, training on
    fewer devices): both run, the one with the higher steady tokens/s is kept and both are said in
    auto_layout.train.compared. The planner ranks training alone: it took 384-device groups on the
    default scenario (58.1k tokens/s, synchronous; 70.9k consolidating), and a consolidating layout
    can also lose (dapo-qwen2.5-32b on 2 DGX H100 nodes: 14.2k s against 11.9k s a step). A trained
    batch the consolidating layout does not fit plans it again with that batch, as _run_planned does
    (``planning``: the scenario it plans with and the batches judged so far), up to AUTO_LAYOUT_PLANS;
    the layouts it broke are said in auto_layout.train.consolidating_replanned."""
    from . import metrics  # pandas: after the run (see the TYPE_CHECKING note)
    rec, costs, plan = first
    ran = _consolidating_run(sc, topology, prompt, resp, progress, keep_samples, plan, replanner, planning)
    if ran is None:
        return first
    other, other_costs, layouts = ran
    rates = [metrics.steady_state(rec)[1], metrics.steady_state(other)[1]]
    plan.detail["train"]["compared"] = [
        {"layout": dict(plan.layouts["train"]), "consolidates": False, "steady_tokens_per_s": rates[0]},
        {"layout": dict(plan.consolidating_train), "consolidates": True, "steady_tokens_per_s": rates[1]}]
    if rates[1] <= rates[0]:
        return first
    plan.layouts = layouts
    plan.detail["train"]["layout"] = dict(plan.consolidating_train)
    return other, other_costs, plan


def _consolidating_run(sc: Scenario, topology: Any, prompt: LengthDistribution, resp: LengthDistribution,
                       progress: Any, keep_samples: bool, plan: Any, replanner: Any,
                       planning: tuple[Scenario, list[Any]]) -> tuple[Any, Any, dict[str, Any]] | None:
    """(record, costs, layouts) of _faster_of_two's run on ``plan``'s consolidating training layout,
    planned again with each trained batch it did not fit (its planning cost the latest plan's, as
    _run_planned charges it); None where a plan repeats a layout that broke or AUTO_LAYOUT_PLANS ran
    out. Where it ran after a plan again, ``plan`` takes that plan's consolidating layout and planning cost
    (what the run charged); else ``plan`` is left as it was (the first run, which it describes, is kept)."""
    from .rl.llm_costs import HeavierBatchThanPlanned, LlmCosts
    planned, trained = planning[0], list(planning[1])
    layout, again, broke = plan.consolidating_train, None, []
    while True:
        layouts = {**plan.layouts, "train": layout}
        costs = LlmCosts(sc, topology, auto_layouts=layouts)
        try:
            record = run_schedule(sc, costs, topology.num_devices, _sampler(prompt), _sampler(resp),
                                  start_s=plan.planning_cost_s if again is None else again.planning_cost_s,
                                  replanner=replanner, progress=progress, keep_samples=keep_samples)
        except HeavierBatchThanPlanned as exc:
            broke.append({"layout": dict(layout), "did_not_fit": exc.memory_message})
            trained.append(exc.batch)
            again = _auto_plan(planned, topology, trained) if len(broke) < AUTO_LAYOUT_PLANS else None
            layout = again.consolidating_train if again is not None else None
            if not layout or any(b["layout"] == layout for b in broke):
                return None
            if replanner is not None:   # the failures' re-plans judge the batches too
                replanner = type(replanner)(sc, topology, trained)
            continue
        if again is not None:   # the run charged the latest plan: the summary says it
            plan.consolidating_train = layout
            plan.planning_cost_s = plan.detail["planning_cost_s"] = again.planning_cost_s
            plan.detail["train"].update({key: again.detail["train"][key] for key in ("evaluated", "planning_cost_s")})
            plan.detail["train"]["consolidating_replanned"] = broke
        return record, costs, layouts


def scenario_snapshot(data: Mapping[str, Any], source: str | None) -> str:
    """scenario.yaml's text: the scenario mapping, its relative paths made absolute (_with_absolute_paths)."""
    return yaml.safe_dump(_with_absolute_paths(dict(data), source), sort_keys=False)


def _with_absolute_paths(data: Any, source: str | None) -> Any:
    """The snapshot with every relative path that names an existing file or folder (from the working
    folder, else the scenario file's folder) made absolute, so `rlsim run OUT/scenario.yaml` reads the
    same files from any folder (it read OUT-relative, or the caller's folder's, files before)."""
    from .paths import folder_of, with_paths_from
    return with_paths_from(data, [Path.cwd(), *folder_of(source)])


@dataclass
class ComparisonResult:
    table: pd.DataFrame
    results: dict[str, SimulationResult]

    def rows(self) -> list[dict[str, Any]]:
        return [r.summary for r in self.results.values()]


def compare(scenario: Scenario | dict | str | Path | None = None, schedules: Iterable[str] = DEFAULT_COMPARE,
            *, costs: Any = None, keep_samples: bool = True, **keywords: Any) -> ComparisonResult:
    """The same scenario under several schedule kinds (other schedule keys kept where they apply).

    `schedules` is one kind ("stalesync") or several, each once; none is an error. ``keep_samples``:
    as in `simulate` (False: no per-sample tables, the same summaries, memory flat over iterations)."""
    kinds = schedule_list(schedules)
    check_scenario_keywords(keywords, "compare")
    check_no_single_kind(keywords)
    results: dict[str, SimulationResult] = {}
    dropped: dict[str, list[tuple[str, str]]] = {}
    for kind, sc in compared_scenarios(scenario, kinds, keywords, dropped).items():
        with _naming_kind(kind, kinds):
            results[kind] = simulate(sc, costs=costs, keep_samples=keep_samples)
        for knob, why in dropped.get(kind, ()):
            results[kind].summary["notes"].append(f"schedule.{knob} is not read under {kind} ({why}): this "
                                                  "column runs without it")
    return ComparisonResult(comparison_table([r.summary for r in results.values()]), results)


def check_no_single_kind(keywords: Mapping[str, Any]) -> None:
    """A comparison's keywords name no one kind (schedule='async', {'kind': ...} or an override of
    schedule.kind): each compared kind would replace it. Shared by compare and the replicas'
    compare_replica_runs (`rlsim compare --seeds N` ran the compared kinds without a word)."""
    given = keywords.get("schedule")
    if isinstance(given, str) or (isinstance(given, Mapping) and "kind" in given):   # replaced by each kind
        raise RlsimError("a comparison runs each of its kinds: schedule= names one, which they would replace",
                         field="schedule", fix="name the kinds in the schedules argument; give other schedule "
                                                "knobs as overrides=['schedule.KEY=VALUE']")
    overrides = [parse_assignment(o) for o in string_items(keywords.get("overrides") or (), field="overrides",
                                                            what="'KEY=VALUE' strings",
                                                            example="overrides=['iterations=2']")]
    for key, value in overrides:   # the compared kinds replace it: schedule.kind, or schedule=KIND / {kind: ...}
        if key == "schedule.kind" or (key == "schedule" and (isinstance(value, str) or
                                                             (isinstance(value, Mapping) and "kind" in value))):
            raise RlsimError(f"a comparison runs each of its kinds: --set {key} names one, which they would replace",
                             field=key, fix="name the kinds with --schedules (rlsim compare) or the kinds argument; "
                                            "give other schedule knobs as --set schedule.KEY=VALUE")


def compared_scenarios(scenario: Any, kinds: list[str], keywords: dict[str, Any],
                       dropped: dict[str, list[tuple[str, str]]] | None = None) -> dict[str, Scenario]:
    """The scenario under each kind, with the schedule knobs given that the kind takes. A knob only
    some of the kinds take (`--set schedule.rollout_devices=4` in a colocated-vs-split comparison)
    goes to those; one that none of them takes is the scenario's own error. A knob another kind takes
    only beside a knob not given (a verl import's colocated `switch` under verl-fully-async without
    dynamic_resources) is left out of that kind, listed in ``dropped[kind]`` as (knob, why)."""
    dropped = {} if dropped is None else dropped
    if isinstance(scenario, Scenario) and not keywords:
        base = scenario
        return {kind: _for_kind(load_scenario, base.to_dict(), base.schedule.applicable_fields(kind),
                                dropped.setdefault(kind, []) if kind != base.schedule.kind else None)
                .model_copy(update={"source": base.source}) for kind in kinds}
    check_no_single_kind({"overrides": keywords.get("overrides")})
    data, source = scenario_data(scenario, **keywords)
    if not isinstance(data.get("schedule") or {}, Mapping):   # --set schedule=true: the schema's error names
        validate_scenario(data, source)                       # it (the kinds' sections raised a TypeError)
    per_kind, unused = compared_schedules(data.get("schedule") or {}, kinds)
    if unused:   # a knob given here that no compared kind takes is named as such first (the scenario's
        # own kind may be none of the compared ones, so its error would send the user to schedule.kind)
        _refuse_knobs_none_takes(unused, kinds, keywords.get("overrides") or ())
        # raises: the knob's error names it and the kinds that take it. The knobs that only compared
        # kinds take are theirs (checked per kind below): a colocated import compared as
        # disaggregated with --set schedule.rollout_fraction was refused "for kind colocated"
        validate_scenario({**data, "schedule": _own_and_unused(data.get("schedule") or {}, unused)}, source)
    own_kind = (data.get("schedule") or {}).get("kind", "colocated")
    given = {key.split(".")[0] for key in _set_schedule_keys(keywords.get("overrides") or ())}
    out = {}
    for kind in kinds:
        with _naming_kind(kind, kinds):
            out[kind] = _for_kind(lambda data: validate_scenario(data, source), data, per_kind[kind],
                                  dropped.setdefault(kind, []) if kind != own_kind else None, given)
    _refuse_timers_none_keeps(data, out, keywords.get("overrides") or ())
    return out


def _refuse_timers_none_keeps(data: Mapping[str, Any], scenarios: Mapping[str, Scenario], overrides: Iterable[str]) -> None:
    """Timers this command's --set gives (output.timers) that every compared kind left out, having not
    their phases, would change nothing in the comparison: an error, as a --set schedule knob none of
    them takes (_refuse_knobs_none_takes). An import's timers are still left out where they do not apply."""
    wanted = (data.get("output") or {}).get("timers") if isinstance(data.get("output"), Mapping) else None
    keys = {parse_assignment(o)[0] for o in overrides}
    if wanted is None or not keys & {"output", "output.timers"}:
        return
    if all(sc.output.timers != wanted for sc in scenarios.values()):
        raise RlsimError(f"output.timers {wanted} names phases none of the compared kinds ({', '.join(scenarios)}) "
                         "has", field="output.timers",
                         fix="compare a colocated (fuse: full) or one-step-off kind (openrlhf: also disaggregated), "
                             "or drop the --set")


def _for_kind(validate: Callable[[dict[str, Any]], Scenario], data: Mapping[str, Any],
              schedule: Mapping[str, Any], dropped: list[tuple[str, str]] | None = None,
              given: Iterable[str] = ()) -> Scenario:
    """The scenario under one compared kind. A framework's timer names (output.timers, set by its
    importer) are kept only where the kind has those phases: they name figures and change none, so a
    kind without them runs with rlsim's own (a NeMo RL import compared as stalesync was refused).
    ``dropped`` (a kind other than the scenario's own): a schedule knob of the scenario (not one of
    the ``given`` --set knobs: the kind's refusal names those) the kind reads past is left out and
    listed there; the scenario's own kind refuses it: it is the user's to remove."""
    droppable = set(schedule) - {"kind", "placement", *given} if dropped is not None else ()
    return validated_reading_past(lambda kept: _with_own_timers(validate, data, kept), schedule, droppable,
                                  [] if dropped is None else dropped)


def _with_own_timers(validate: Callable[[dict[str, Any]], Scenario], data: Mapping[str, Any],
                     schedule: Mapping[str, Any]) -> Scenario:
    """validate, the framework timer names left out where the kind has not their phases (_for_kind)."""
    try:
        return validate({**data, "schedule": dict(schedule)})
    except ReadPastError as exc:   # timers the kind has not the phases of (a value they may not take: its error)
        output = data.get("output")
        if exc.field != "output.timers" or not isinstance(output, Mapping) or "timers" not in output:
            raise
    return validate({**data, "schedule": dict(schedule), "output": {k: v for k, v in output.items() if k != "timers"}})


def _own_and_unused(schedule: Mapping[str, Any], unused: list[str]) -> dict[str, Any]:
    """The scenario's schedule less the knobs its own kind does not take but a compared kind does
    (an unknown kind: as given, for the schema to refuse)."""
    kind = schedule.get("kind", "colocated")
    if kind not in SCHEDULE_CLASSES:
        return dict(schedule)
    own = SCHEDULE_CLASSES[kind].accepts(schedule.get("placement"))
    return {k: v for k, v in schedule.items() if k in own or k in unused or k in ("kind", "placement")}


@contextmanager
def _naming_kind(kind: str, kinds: list[str]) -> Iterator[None]:
    """An RlsimError of one of several compared kinds says which kind refused it."""
    try:
        yield
    except RlsimError as exc:
        if len(kinds) < 2 or exc.message.startswith("under kind "):
            raise
        raise exc.reworded(f"under kind {kind}: {exc.message}", exc.fix) from None


def _set_schedule_keys(overrides: Iterable[str]) -> set[str]:
    """The keys under schedule given as `--set schedule.KEY=...` (dotted below it: switch.engine_sleep)."""
    keys = [parse_assignment(o)[0] for o in overrides or ()]
    return {key.removeprefix("schedule.") for key in keys if key.startswith("schedule.")}


def _takers(knob: str, kinds: Iterable[str]) -> list[str]:
    """The kinds of ``kinds`` that take ``knob`` (on their default placement)."""
    return [k for k in kinds if knob in SCHEDULE_CLASSES[k].accepts(None)]


def knobs_kept_out(overrides: Iterable[str], kinds: list[str]) -> list[tuple[str, list[str], list[str]]]:
    """(knob, the compared kinds that take it, those that run without it) for each `--set schedule`
    knob only some of ``kinds`` take (compared_scenarios gives it to those; `rlsim compare` says so)."""
    out = []
    for knob in sorted({key.split(".")[0] for key in _set_schedule_keys(overrides)}):
        takers = _takers(knob, kinds)
        others = [k for k in kinds if k not in takers]
        if takers and others:
            out.append((knob, takers, others))
    return out


def _refuse_knobs_none_takes(unused: list[str], kinds: list[str], overrides: Iterable[str]) -> None:
    """A schedule knob given on this command (`--set schedule.KEY=...`) that none of the compared
    kinds takes would change nothing in the comparison: an error, not a silent drop. (A knob the
    scenario's own file sets for its own kind is kept out of the kinds that do not take it.)"""
    takers_of = {knob: _takers(knob, SCHEDULE_CLASSES) for knob in set(unused) & _set_schedule_keys(overrides)}
    dropped = sorted(knob for knob, takers in takers_of.items() if takers)   # unknown keys: the schema's error
    if dropped:
        takers = takers_of[dropped[0]]
        raise RlsimError(f"schedule.{dropped[0]} applies to none of the compared kinds ({', '.join(kinds)})",
                         field=f"schedule.{dropped[0]}",
                         fix=f"compare a kind that takes it ({', '.join(takers) or 'none'}) or drop the --set")


def schedule_list(schedules: Iterable[str] | str) -> list[str]:
    """'colocated' -> ['colocated'] (a string is one schedule, not its letters); an empty list, a
    repeated kind or a non-string is an RlsimError."""
    if isinstance(schedules, (set, frozenset)):   # the first kind is the baseline: a set's order is the hash seed's
        raise RlsimError("schedules is an unordered set: the first kind is the baseline of the comparison",
                         field="schedules", fix="give a list, e.g. ['colocated', 'stalesync']")
    kinds = string_items(schedules, field="schedules", what="schedule kinds",
                         example="compare(None, ['colocated', 'stalesync'])")
    if not kinds:
        raise RlsimError("no schedule to compare", field="schedules",
                         fix=f"give one or more kinds, e.g. {list(DEFAULT_COMPARE)}")
    unknown = [k for k in kinds if k not in SCHEDULE_CLASSES]
    if unknown:
        joined = " (one kind per item: a list, not a comma-joined string)" if "," in unknown[0] else ""
        raise RlsimError(f"unknown schedule kind {unknown[0]!r}{joined}", field="schedules",
                         fix=f"use one of: {', '.join(SCHEDULE_CLASSES)}")
    repeated = sorted({k for k in kinds if kinds.count(k) > 1})
    if repeated:
        raise RlsimError(f"schedule(s) {', '.join(repeated)} given more than once (each kind is one column)",
                         field="schedules", fix="list each kind once")
    return kinds


def comparison_table(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    cols = ["schedule", "devices", "steady_step_time_s", "steady_tokens_per_s", "step_time_s", "tokens_per_s",
            "tokens_per_s_per_device",
            "generated_tokens_per_s", "bubble_fraction", "mfu"]
    import pandas as pd

    frame = pd.DataFrame([{c: r[c] for c in cols} for r in rows])
    frame["staleness_max"] = [r["staleness"]["max"] for r in rows]
    if len(frame):
        frame["speedup"] = frame["steady_tokens_per_s"] / frame["steady_tokens_per_s"].iloc[0]
    return frame
