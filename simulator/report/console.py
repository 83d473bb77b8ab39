"""Readable terminal output of run and compare summaries (rich tables).

Every rich table the command line prints goes through this module's ``Console`` (the commands import
it from here), so rich is imported only by a command that prints one, not at start-up.
"""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..llm.inference import first_prefill_tokens
from ..metrics import BUBBLE_CAUSES
from .summary import has_steady_window, notes_of

__all__ = ["Console", "Table", "notes_of", "print_comparison", "print_summary"]


def _on_broken_pipe(self: Console) -> None:
    """rich answers a closed stdout with SystemExit(1) (Console.on_broken_pipe); raise
    BrokenPipeError instead, so cli.main() handles it for every command in one place."""
    self.quiet = True
    raise BrokenPipeError


Console.on_broken_pipe = _on_broken_pipe  # type: ignore[method-assign]


def _share(value: float | None) -> str:
    """A fraction as a percentage; 'not measured' for None (metrics.rollout_utilization)."""
    return "not measured" if value is None else f"{value:.1%}"


def _fmt(v: float, unit: str = "") -> str:
    """Plain decimals, never scientific notation: 123,456 / 1,234.5 / 12.3 / 0.123."""
    if abs(v) >= 1e4:
        return f"{v:,.0f}{unit}"
    if abs(v) >= 10:
        return f"{v:,.1f}{unit}"
    return f"{v:.3f}{unit}"


def _trained(s: dict[str, Any]) -> str:
    samples = s.get("samples") or {}
    if "trained_per_step" not in samples:
        return "-"
    return f"{samples['trained_per_step']:,.0f} of {samples['batch']:,}"


# served models' summary keys (<role>_pool, rl/schedules/context.py _record_served) and their names
SERVED_ROWS = (("reward_model", "reward model"), ("teacher", "teacher"))


def _reward_wait_text(s: dict[str, Any]) -> str:
    """What the critical path's reward wait waited for: rule rewards, a served reward model, a teacher."""
    served = [name for role, name in SERVED_ROWS if f"{role}_pool" in s]
    if not served:
        return "waiting for rule rewards"
    return "for rewards and teacher" if served == ["teacher"] else f"for the {' and '.join(served)}"


RUN_FILES = "scenario.yaml, summary.json, CSVs, trace.json for ui.perfetto.dev, plots, report.html"

# What a generation stage's seconds (summary stage_time_s) are, by the run's placement (summary
# "placement"; docs/internals.md `stage_time_s`): a colocated pool's kinds add each round's wall time
# to its last sequence (colocated.py; verl-sync / verl-colocate-async: to the poll that found the
# batch), a split pool's an instance's busy time over the instances (disaggregated.py, segments.py,
# verl_async.py). One prompt: 9.65 s colocated, 1.21 s split, for the same 9.85 s generation.
GENERATE_MEANING = {"colocated": "round wall time", "disaggregated": "mean instance busy"}
GENERATE_STAGES = ("generate", "tail_generate")


def stage_label(stage: str, placement: str | None) -> str:
    """The run table's label of a stage's seconds a step: a generation stage's says which figure it
    is (GENERATE_MEANING), so a colocated run's and a split run's are not read as one quantity."""
    meaning = GENERATE_MEANING.get(placement or "") if stage in GENERATE_STAGES else None
    return f"  stage: {stage}{', ' + meaning if meaning else ''} (per step, whole run)"


def _count(rollout: dict[str, Any], key: str) -> int:
    """An engine count of summary['rollout'] (metrics.rollout_counts); 0 where not measured (null) or
    not in the summary (an older one)."""
    return rollout.get(key) or 0


def _hit_share(rollout: dict[str, Any]) -> float | None:
    """The prefix cache's hit rate of the tokens first prefilled (a running sibling's prompt pages):
    prompt hits / llm.inference.first_prefill_tokens, so a schedule that prefills a resumed tail again (StaleSync,
    partial rollouts) or a preempted context shows its prompts' hit rate, not a share diluted by its
    re-prefills (StaleSync read 28% beside colocated's 93% for the same prompts on the seed). None
    without hits."""
    hits = _count(rollout, "prompt_hit_tokens")
    return hits / max(hits, first_prefill_tokens(rollout)) if hits else None


def engine_count_rows(rollout: dict[str, Any]) -> list[tuple[str, str]]:
    """The run table's rows of the engines' counts that explain rollout time (docs/schedules.md "Long
    tail and rollout occupancy"), each only where it happened: preemptions with the contexts they
    prefilled again, the prefix cache's hit rate of the tokens first prefilled (_hit_share), multi-turn
    contexts evicted while out on their tools and those prefilled again, the contexts resumed partial
    rollouts prefilled again. Labels within 37 characters
    and values within 36, as the other rows: an 80-column terminal shows each on one line."""
    rows = []
    preempted = _count(rollout, "preemptions")
    if preempted:
        rows.append(("rollout preemptions (re-prefilled)",
                     f"{preempted:,} ({_count(rollout, 'preemption_reprefill_tokens'):,} tokens)"))
    share = _hit_share(rollout)
    if share is not None:
        rows.append(("first prefills hit in prefix cache", f"{share:.1%} of {first_prefill_tokens(rollout):,}"))
    evicted, again = _count(rollout, "evicted_context_tokens"), _count(rollout, "eviction_reprefill_tokens")
    if evicted or again:
        rows.append(("contexts evicted / re-prefilled", f"{evicted:,} / {again:,} tokens"))
    resumed = _count(rollout, "resume_reprefill_tokens")
    if resumed:
        rows.append(("resumed partial rollouts re-prefilled", f"{resumed:,} tokens"))
    return rows


def print_summary(s: dict[str, Any], out_dir: str | None = None, wrote: str = RUN_FILES) -> None:
    console = Console()
    t = Table(title=f"{s['workload']} - {s['schedule']} on {s['devices']} devices", show_header=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    # one iteration has no steady window: its "steady" figures are its one step's (a warm-up where the
    # schedule runs ahead), said so rather than "steady state" (a report audit)
    steady = "steady state" if has_steady_window(s) else "one step only"
    for key, label, unit in (("steady_step_time_s", f"step time ({steady})", " s"),
                             ("steady_tokens_per_s", f"tokens/s ({steady})", ""),
                             ("step_time_s", "step time (whole run)", " s"), ("tokens_per_s", "tokens/s (whole run)", ""),
                             ("tokens_per_s_per_device", "tokens/s per device (whole run)", ""),
                             ("generated_tokens_per_s", "generated tokens/s (whole run)", ""),
                             ("samples_per_s", "samples/s (whole run)", "")):
        t.add_row(label, _fmt(s[key], unit))
    t.add_row("MFU (whole run)", f"{s['mfu']:.1%}")
    t.add_row(f"bubble fraction ({steady})", f"{s['steady_bubble_fraction']:.1%}")
    t.add_row("bubble fraction (whole run)", f"{s['bubble_fraction']:.1%}")
    t.add_row("rollout slot occupancy", _share(s['rollout']['occupancy']))
    t.add_row("rollout time at low batch", _share(s['rollout']['low_batch_fraction']))
    for label, value in engine_count_rows(s["rollout"]):
        t.add_row(label, value)
    t.add_row("trained samples / step (whole run)", _trained(s))
    t.add_row("staleness max / mean", f"{s['staleness']['max']:.0f} / {s['staleness']['mean']:.2f}")
    phases = s.get("peak_memory_by_phase") or {}
    by_phase = ", ".join(f"{phase} {v / 1e9:.1f}" for phase, v in phases.items())
    t.add_row("peak memory per device", f"{s['peak_memory_bytes'] / 1e9:.1f} GB" + (f" ({by_phase})" if by_phase else ""))
    if "reward_pool" in s:
        pool = s["reward_pool"]
        t.add_row(f"reward pool busy ({pool['workers']} workers)", f"{pool['utilization']:.1%}")
    for role, name in SERVED_ROWS:      # workload.reward.served, workload.distillation: their engines
        if f"{role}_pool" in s:
            pool = s[f"{role}_pool"]
            t.add_row(f"{name} pool busy ({pool['engines']} engines)", f"{pool['utilization']:.1%}")
    for cause, frac in s["bubbles_by_cause"].items():
        if frac > 0:
            t.add_row(f"  bubble: {cause} (whole run)", f"{frac:.1%}")
            if cause == "dependency" and s.get("reward_wait_fraction", 0.0) > 0:   # the critical path's "reward"
                waited = _reward_wait_text(s)
                t.add_row(f"    of which {waited}", f"{s['reward_wait_fraction']:.1%}")
    for stage, sec in s["stage_time_s"].items():   # metrics: a stage's seconds over the run / iterations
        t.add_row(stage_label(stage, s.get("placement")), _fmt(sec, " s"))
    if "nemo_rl_timing_s" in s:   # output.timers: nemo-rl (an imported NeMo RL recipe)
        timers = [(f"  nemo-rl timing/train/{name}", sec) for name, sec in s["nemo_rl_timing_s"].items()]
    elif "openrlhf_timing_s" in s:   # output.timers: openrlhf (an imported OpenRLHF hybrid-engine script)
        timers = [(f"  openrlhf {'other' if name == 'other' else 'timing/' + name}", sec)
                  for name, sec in s["openrlhf_timing_s"].items()]
    elif "areal" in s:            # kind areal: AReaL's stats_tracker.record_timing names, a step's mean
        timers = [(f"  areal {'step' if name == 'step' else 'timeperf/' + name}", sec)
                  for name, sec in s["areal"]["timing_s"].items()]
    else:
        timers = [(f"  verl timing_s/{phase}", sec) for phase, sec in (s.get("verl_timing_s") or {}).items()]
    for label, sec in timers:
        t.add_row(label, _fmt(sec, " s"))
    console.print(t)
    for note in notes_of(s):
        console.print(f"note: {note}", markup=False)
    if out_dir:
        console.print(f"wrote {out_dir}/ ({wrote})")


def shown_causes(rows: list[dict[str, Any]]) -> list[str]:
    """The bubble causes above zero in any row (metrics.BUBBLE_CAUSES' order, then others such as planning
    or failure by name), so the rows add up to the bubble fraction; a fixed list left out placement,
    data, planning and failure."""
    causes = {cause for r in rows for cause, share in r["bubbles_by_cause"].items() if share > 0}
    rank = {cause: i for i, cause in enumerate(BUBBLE_CAUSES)}
    return sorted(causes, key=lambda cause: (rank.get(cause, len(rank)), cause))


def _add_engine_count_rows(t: Table, rollouts: list[dict[str, Any]]) -> None:
    """The comparison's rows of the engines' counts (engine_count_rows), each where any run has it:
    preemptions, the prefix cache's hit rate of the tokens first prefilled, multi-turn tokens re-prefilled after
    an eviction, resumed partial rollouts' re-prefill; '-' where a run has no hit, or the count is not
    measured."""
    def counted(key: str) -> list[str]:
        return ["-" if r.get(key) is None else f"{r[key]:,}" for r in rollouts]

    if any(_count(r, "preemptions") for r in rollouts):
        t.add_row("rollout preemptions", *counted("preemptions"))
    shares = [_hit_share(r) for r in rollouts]
    if any(share is not None for share in shares):
        t.add_row("first prefills hit in prefix cache", *["-" if share is None else f"{share:.1%}" for share in shares])
    if any(_count(r, "evicted_context_tokens") or _count(r, "eviction_reprefill_tokens") for r in rollouts):
        t.add_row("contexts re-prefilled (tokens)", *counted("eviction_reprefill_tokens"))
    if any(_count(r, "resume_reprefill_tokens") for r in rollouts):
        t.add_row("resumed re-prefilled (tokens)", *counted("resume_reprefill_tokens"))


def print_comparison(rows: list[dict[str, Any]]) -> None:
    console = Console()
    if not rows:
        return
    t = Table(title=f"{rows[0]['workload']} on {rows[0]['devices']} devices")
    t.add_column("metric")
    for r in rows:
        t.add_column(r["schedule"] + (f" ({r['placement']})" if r["schedule"] == "stalesync" else ""), justify="right")
    # steady state (after the first iteration) first: step time and tokens/s tell the same story
    # there; whole-run figures include the pipelined schedules' warm-up step
    base = rows[0]["steady_tokens_per_s"] or 1.0
    t.add_row("step time, steady (s)", *[_fmt(r["steady_step_time_s"]) for r in rows])
    t.add_row("tokens/s, steady", *[_fmt(r["steady_tokens_per_s"]) for r in rows])
    t.add_row(f"vs {rows[0]['schedule']}, steady", *[f"{r['steady_tokens_per_s'] / base:.2f}x" for r in rows])
    t.add_row("step time, whole run (s)", *[_fmt(r["step_time_s"]) for r in rows])
    t.add_row("tokens/s, whole run", *[_fmt(r["tokens_per_s"]) for r in rows])
    t.add_row("tokens/s per device, whole run", *[_fmt(r["tokens_per_s_per_device"]) for r in rows])
    t.add_row("generated tokens/s", *[_fmt(r["generated_tokens_per_s"]) for r in rows])
    t.add_row("bubble fraction, steady", *[f"{r['steady_bubble_fraction']:.1%}" for r in rows])
    t.add_row("bubble fraction, whole run", *[f"{r['bubble_fraction']:.1%}" for r in rows])
    for cause in shown_causes(rows):
        t.add_row(f"  {cause}, whole run", *[f"{r['bubbles_by_cause'].get(cause, 0.0):.1%}" for r in rows])
    t.add_row("rollout slot occupancy", *[_share(r['rollout']['occupancy']) for r in rows])
    t.add_row("rollout at low batch", *[_share(r['rollout']['low_batch_fraction']) for r in rows])
    _add_engine_count_rows(t, [r["rollout"] for r in rows])
    t.add_row("MFU (whole run)", *[f"{r['mfu']:.1%}" for r in rows])
    for role, name in SERVED_ROWS:   # workload.reward.served, workload.distillation: how busy they keep
        if any(f"{role}_pool" in r for r in rows):
            t.add_row(f"{name} pool busy", *[_share(r[f"{role}_pool"]["utilization"]) if f"{role}_pool" in r else "-"
                                             for r in rows])
    # the deciding constraint of a pool split: the highest of the run's phases per device
    t.add_row("peak memory (GB)", *[f"{r['peak_memory_bytes'] / 1e9:.1f}" for r in rows])
    t.add_row("staleness max", *[f"{r['staleness']['max']:.0f}" for r in rows])
    t.add_row("pools", *[", ".join(f"{k} {v}" for k, v in r["pools"].items()) for r in rows])
    t.add_row("trained samples / step (whole run)", *[_trained(r) for r in rows])
    console.print(t)
    # a note is one kind's (its own default or knob), unless every kind gave it
    notes: dict[str, list[str]] = {}
    for r in rows:
        for note in notes_of(r):
            notes.setdefault(note, []).append(r["schedule"])
    for note, kinds in notes.items():
        whose = "" if len(kinds) == len(rows) else f" ({', '.join(dict.fromkeys(kinds))})"
        console.print(f"note{whose}: {note}", markup=False)
