"""`rlsim plan`: search parallel layouts for training or rollout and print the best K."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import RlsimError, counted
from ..overrides import parse_assignment, section
from . import common

HELP = "search training / rollout parallel layouts on a topology and rank them by step time"
# loaded during the CLI's start-up (cli._start_up); run() needs them first
PRELOAD = ("simulator.autoplan", "simulator.planner", "simulator.planner.evaluate", "simulator.report.console")
EXAMPLES = """examples:
  rlsim plan --topology dgx-h100 --set topology.nodes=4 --model llama3.1-8b --global-batch 256 --seq-len 4096
  rlsim plan --topology dgx-a100 --set topology.nodes=192 --model gpt-145.6b --global-batch 2304 --seq-len 2048 --top 3
  rlsim plan --topology dgx-h100 --model qwen2.5-7b --stage rollout --json
  rlsim plan scenario.yaml --target-tokens-per-s 50000
  rlsim plan --topology dgx-h100 --set topology.nodes=16 --model gpt-18.4b --set planner.space.tp=[16]   # force TP16
  rlsim plan --topology hetero-a100-h100 --model llama3.1-8b --global-batch 256 --seq-len 4096 --balance
  rlsim plan --from-verl workloads/frameworks/verl-grpo-qwen2.5-7b.yaml trainer.nnodes=2   # the job's model, batch, pools
trainer constants (--stage train): --set workload.train_params.compute.flash_attention=false,
  workload.train_software=megatron-2021; engine constants (--stage rollout): --set
  workload.inference.step_overhead_s=0.004 (unknown keys, keys of the other stage, or iterations /
  schedule.* / seed without a distribution value, which only a simulated run reads: exit 2; a
  scenario's training step reads the schedule's pools, micro-batching, packing, StaleSync tail and
  switch.engine_resident, which --set may give then)
planner keys (the scenario's planner: section, then --set planner.KEY=VALUE):
  space.tp|pp|vpp|cp|ep|etp|zero|zero_shard_size|recompute|recompute_method|micro_batch|sequence_parallel (lists),
  space.max_pp|max_ep|uneven_pp|exact_batch|expert_tp_folding, refine_top, dominance_prune, eval_cost_s,
  refused_cost_fraction, fixed_cost_s, recompute_step_share_max;
  rollout.tp|ep|pp|max_num_seqs (lists), rollout.max_ep|gpu_memory_utilization|sequences|prompt_len|response_len.
--from-verl (--from-nemo-rl, --from-areal, --from-openrlhf, --from-trl, --from-skyrl) CONFIG [key=value ...]:
  plan the scenario the config imports to (its model, batch, lengths, topology, the schedule's pools), as
  a scenario file is planned; the config's own keys go right after its path, --set takes rlsim's keys."""

_DEFAULT_TOPOLOGY = "dgx-h100"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", help="scenario YAML (topology and workload defaults)")
    parser.add_argument("--topology", help=f"topology preset or file (default: the scenario's, else {_DEFAULT_TOPOLOGY}; "
                                           "with --from-*: sized from the config)")
    common.add_framework_import(parser, print_scenario=False)
    parser.add_argument("--model", help="model preset or config.json (default: the scenario's workload model)")
    parser.add_argument("--global-batch", type=common.positive_int, help="sequences per optimizer step (default: the scenario's)")
    parser.add_argument("--seq-len", type=common.positive_int, help="tokens per sequence (default: prompt max + response max)")
    parser.add_argument("--stage", choices=("train", "rollout"), default="train",
                        help="the side to plan: the trainer's layouts (default) or the rollout engine's")
    parser.add_argument("--target-tokens-per-s", type=common.positive_number,
                        help="find the fewest nodes reaching this throughput (tokens trained or generated per s)")
    parser.add_argument("--top", type=int, default=5, help="candidates to print (default 5)")
    parser.add_argument("--balance", action="store_true",
                        help="on a topology of several device kinds (--stage train): also split the layers over "
                             "pipeline stages and the micro-batches over DP replicas in proportion to each "
                             "device's speed (planner/hetero.py), searching the planner space's TP, PP, micro-batch, "
                             "recompute and ZeRO (up to 2), against the same model's best even split; and on each "
                             "subset of the kinds, naming the fastest (a kind may be best left idle, its idle "
                             "device-hours the price)")
    common.add_common(parser)
    from .replicas import add_replica_arguments
    add_replica_arguments(parser, jobs=False)   # --seeds N: medians over replicas' distribution draws (issue 13)


def plans_the_scenarios_step(args: argparse.Namespace) -> bool:
    """Whether the training plan's batch is a scenario's optimizer step (given or the default one):
    no --global-batch / --seq-len, and no --model without a scenario."""
    return args.stage == "train" and not (args.global_batch or args.seq_len) and bool(args.scenario or not args.model)


def _inputs(args: argparse.Namespace, scn: Any = None) -> dict[str, Any]:
    """Topology, model, batch and sequence length from flags, falling back to the scenario
    (`scn`: a replica's scenario, issue 13; else loaded from the arguments)."""
    from ..autoplan import (
        consolidated_train_devices,
        heaviest_micro_batch_of,
        micro_batch_counts_of,
        params_beside_engine,
        planning_ranks,
        step_packing,
        step_sequences_of,
        train_batch,
    )
    from ..llm.lengths import MAX_TOKENS
    from ..planner import planner_settings
    from ..scenario import LIMITS_FIX, load_scenario

    _refuse_other_stage(args)
    # The scenario (given, else the default one) is always loaded: every --set key is checked there
    # (an unknown one is an error), and its workload's train_software, train_params and inference
    # constants are the planner's. The flags below replace its model, batch and length.
    scn = scn if scn is not None else load_scenario(args.scenario, overrides=scenario_overrides(args))
    # model, batch and length fall back to the workload of a given scenario, or of the default one
    # when no --model is given
    workload = scn.workload if (args.scenario or args.model is None) else None
    topo_spec: Any = args.topology
    if topo_spec is None:
        # the workload's own topology whenever the workload is the scenario's (given or default):
        # the default scenario's pangu-ultra-moe on one dgx-h100 node (8 devices) fits nowhere
        topo_spec = scn.topology if workload is not None else _DEFAULT_TOPOLOGY
    from ..llm.architecture import load_model
    if args.model is not None:   # its errors name the flag, not the planner's argument (`model`)
        load_model(args.model, field="--model")
    elif workload is not None and not workload.model:   # the scenario's emptied (--set workload.model=): its field
        load_model(workload.model, field="workload.model")
    model = args.model or (workload.model if workload else None)
    batch, seq = args.global_batch, args.seq_len
    # what `rlsim run` trains (autoplan.train_batch): one optimizer step (the mini-batch, not the
    # whole RL step), packed into rows of the run's pack width; with --model and no scenario, the
    # shape of the default scenario's step (shape_note says so on stderr)
    rows, row_len = train_batch(scn)
    batch, seq = batch or rows, seq or row_len
    missing = [n for n, v in (("--model", model), ("--global-batch", batch), ("--seq-len", seq)) if not v]
    if missing and args.stage == "train":
        raise RlsimError(f"missing {', '.join(missing)}", field=missing[0], fix="give it or a SCENARIO.yaml")
    if args.top < 1:
        raise RlsimError("--top must be at least 1", field="--top", fix="e.g. --top 5")
    for name, value in (("--global-batch", batch), ("--seq-len", seq)):
        if value is not None and value < 1:
            raise RlsimError(f"{name} must be positive, got {value}", field=name)
    if batch is not None and batch > scn.limits.max_global_batch:
        raise RlsimError(f"{batch:,} sequences is past limits.max_global_batch={scn.limits.max_global_batch:,}",
                         field="--global-batch", fix=LIMITS_FIX.format(name="max_global_batch"))
    if seq is not None and seq > MAX_TOKENS:
        raise RlsimError(f"{seq:,} tokens is not a sequence length", field="--seq-len",
                         fix=f"give at most {MAX_TOKENS:.0e} tokens")
    # the batch is the scenario's optimizer step: memory judged on the run's heaviest micro-batch,
    # as `rlsim run`'s planner judges it (autoplan.heaviest_micro_batch_of)
    from_step = plans_the_scenarios_step(args)
    return {"topology": topo_spec, "topology_source": scn.source if topo_spec is scn.topology else None,
            "model": model, "global_batch": batch, "seq_len": seq, "workload": scn.workload, "scenario": scn,
            "max_devices": scn.limits.max_devices, "max_global_batch": scn.limits.max_global_batch,
            "heaviest": heaviest_micro_batch_of(scn, row_len) if from_step else None,
            # and times it on an optimizer step of drawn lengths in the run's micro-batches
            "step_sequences": step_sequences_of(scn, row_len) if from_step else None,
            "step_packing": step_packing(scn) if from_step else None,
            # and an interleaved pipeline on the micro-batch counts the run forms
            "micro_batch_counts": micro_batch_counts_of(scn, row_len) if from_step else None,
            # the usable HBM beside a resident engine (schedule.switch.engine_resident), as the run judges it
            # (the scenario's planner.rollout share for a planned engine, as layout: auto takes it)
            "params": params_beside_engine(scn, planner_settings(scn.planner).rollout) if from_step else None,
            # the devices the run trains on (a split placement's training pool), as layout: auto plans
            "train_ranks": (lambda n: planning_ranks(scn, n)[1]) if from_step else None,
            # and the fewest it may also train on (colocated StaleSync beside its consolidated tail)
            "also_trains_on": (lambda n: consolidated_train_devices(scn, n)) if from_step else None}


# What only one stage reads: the training planner the batch, the sequence length, the search space and
# the trainer's constants; the rollout planner its space and the engine's constants
_STAGE_ONLY = {"train": ("planner.space.", "workload.train_params.", "workload.train_software"),
               "rollout": ("planner.rollout.", "workload.inference.", "workload.engine")}


# What only a simulated run reads: the planner prices one step of each layout analytically.
_RUN_ONLY = ("iterations", "schedule", "workload.reward")
# The schedule keys the training plan does read when the batch is the scenario's step: the pools it
# trains on, how the run forms and pads its micro-batches (the forward passes' too: an interleaved
# pipeline's counts, autoplan.micro_batch_counts_of), the devices colocated StaleSync also trains on, the
# switch's resident state and a resident engine's share of HBM
_PLAN_READS = ("schedule.kind", "schedule.placement", "schedule.rollout_fraction", "schedule.rollout_devices",
               "schedule.aux_devices",
               "schedule.fuse", "schedule.aux_fraction", "schedule.distqueue.packed", "schedule.micro_batching",
               "schedule.pack_tokens", "schedule.forward_micro_batch", "schedule.staleness",
               "schedule.stream_threshold", "schedule.consolidate_share", "schedule.switch.engine_resident")
# The workload's batch and its length laws: the batch shape of the training plan unless a flag gives it
# (--global-batch, --seq-len); the rollout plan prices planner.rollout's fixed batch instead
_BATCH_KEYS = ("workload.prompts_per_step", "workload.samples_per_prompt", "workload.mini_batch_prompts")
_LENGTH_KEYS = ("workload.prompt_length", "workload.response_length")
# The layouts plan searches (a given one is not its input), with the planner section that narrows each
_SEARCHED = {"train_layout": "space", "rollout_layout": "rollout"}


# What a training plan leaves its scenario's train layout to: the planner (plan searches the layouts).
PLANNED_TRAIN_LAYOUT = "workload.train_layout=auto"


def scenario_overrides(args: argparse.Namespace) -> list[str]:
    """The --set items the plan's scenario loads with: all but planner.* (the planner's settings,
    _planner_keys), and for a training plan the train layout left to the planner, last: plan replaces
    it with the layouts it searches (they keep to the stack's limits), so the given one is not held to
    the stack (--set workload.train_software=verl-fsdp on a scenario trained at tp 8 was refused by that
    tp, and --set workload.train_layout.* is refused: a dead end). `rlsim run` still checks it. A
    --set item of that layout is left to _refuse_other_stage, which names it."""
    rest = [o for o in args.overrides if not parse_assignment(o)[0].startswith("planner.")]
    if args.stage != "train":
        return rest
    layout = PLANNED_TRAIN_LAYOUT.split("=")[0]
    key_of = {item: parse_assignment(item)[0] for item in rest}
    return [*(o for o in rest if key_of[o] != layout and not key_of[o].startswith(layout + ".")), PLANNED_TRAIN_LAYOUT]


def _shape_read_past(args: argparse.Namespace) -> dict[str, str]:
    """The workload keys the plan does not read, by prefix, with why: the batch under
    --global-batch, the length laws under both flags (alone, --seq-len leaves the medians read for
    packing), all of them in the rollout plan."""
    if args.stage == "rollout":
        why = "the rollout plan prices planner.rollout's batch (sequences, prompt_len, response_len)"
        return {key: why for key in (*_BATCH_KEYS, *_LENGTH_KEYS)}
    out = {key: "--global-batch gives the training batch" for key in _BATCH_KEYS} if args.global_batch else {}
    if args.global_batch and args.seq_len:
        out.update({key: "--global-batch and --seq-len give the batch shape" for key in _LENGTH_KEYS})
    return out


def _refuse_other_stage(args: argparse.Namespace) -> None:
    """A flag or --set key of the stage not planned, or one only a run reads, was read past: an
    error naming it."""
    shape = _shape_read_past(args)
    for item in args.overrides:
        key, value = parse_assignment(item)
        why = next((text for prefix, text in shape.items() if key == prefix or key.startswith(prefix + ".")), None)
        if why is not None:
            raise RlsimError(f"{key} is read past: {why}", source="--set", field=key,
                             fix=f"drop --set {key}" + (", or drop the flag that gives the shape"
                                                        if args.stage == "train" else
                                                        " and give planner.rollout.sequences / prompt_len / response_len"))
        # schedule=KIND is the kind named alone (its pools read as schedule.kind's), as --schedule KIND is
        read = plans_the_scenarios_step(args) and (any(key == p or key.startswith(p + ".") for p in _PLAN_READS)
                                                   or (key == "schedule" and isinstance(value, str)))
        if not read and any(key == prefix or key.startswith(prefix + ".") for prefix in _RUN_ONLY):
            whole = key == "schedule" and plans_the_scenarios_step(args)   # a section, of which plan reads some keys
            raise RlsimError(f"{key} is read by a simulated run (rlsim run / compare / sweep); plan prices each "
                             "layout's step analytically and does not read it", source="--set", field=key,
                             fix="give the kind alone (--set schedule=KIND) and the keys plan reads as --set "
                                 "schedule.KEY=VALUE" if whole else
                             f"drop --set {key}, or simulate the chosen layout with rlsim run")
        side = next((s for s in _SEARCHED if key == f"workload.{s}" or key.startswith(f"workload.{s}.")), None)
        # a training plan of the scenario's step reads its rollout layout (a resident engine's HBM
        # share), and a user makes it one the run can take (it was refused as searched; a planner audit)
        if side == "rollout_layout" and plans_the_scenarios_step(args):
            side = None
        if side is not None:   # the planner searches the layouts: a given one is not an input to it
            from ..planner import RolloutSpace, SearchSpace
            name = key.split(".")[2] if key.count(".") >= 2 else ""
            fields = (SearchSpace if side == "train_layout" else RolloutSpace).model_fields
            narrow = f"planner.{_SEARCHED[side]}.{name}=..." if name in fields else f"planner.{_SEARCHED[side]}.*"
            raise RlsimError(f"{key} is a layout, which plan searches rather than reads", source="--set", field=key,
                             fix=f"narrow the search instead (--set {narrow}), or run the layout with rlsim run")
    if args.stage == "rollout":
        for flag, value in (("--global-batch", args.global_batch), ("--seq-len", args.seq_len)):
            if value is not None:
                raise RlsimError(f"{flag} applies to --stage train", field=flag,
                                 fix=f"drop {flag}, or plan the trainer with --stage train")
    other = "rollout" if args.stage == "train" else "train"
    for item in args.overrides:
        key = parse_assignment(item)[0]
        if key.startswith(_STAGE_ONLY[other]):
            raise RlsimError(f"{key} applies to --stage {other}; this plans the {args.stage} stage", source="--set",
                             field=key, fix=f"drop --set {key}, or give --stage {other}")


def run(args: argparse.Namespace) -> int:
    imported = common.framework_import(args)
    if imported is not None and args.model is not None:   # said before config_named, which names the config
        raise RlsimError(f"--model cannot be combined with --from-{imported.framework} (the config names the model)",
                         field="--model", fix=f"drop --model; change the config's model key right after its path "
                                              f"(--from-{imported.framework} CONFIG KEY=VALUE), or --set workload.model=PRESET")
    with common.config_named(imported):
        if imported is not None:
            _take_import(args, imported)
        return _plan(args)


def _take_import(args: argparse.Namespace, imported: Any) -> None:
    """--from-verl ...: the imported scenario is planned as a scenario file is (its model, batch,
    lengths, topology and pools); --topology went into the import (sized from the config)."""
    common.print_framework_listing(imported)
    args.scenario, args.topology = imported.scenario, None


def _plan(args: argparse.Namespace) -> int:
    from .replicas import plan_replicated
    _check_balance_flags(args)
    code = plan_replicated(args, lambda scn: plan_rows(args, scn)[0], scenario_overrides(args))   # --seeds N (issue 13)
    if code is not None:
        return code
    with common.Progress("layout") as progress:
        rows, model, topology, plan = plan_rows(args, progress=progress)
    for note in (shape_note(args), rollout_note(args, topology)):
        if note:
            print(note, file=sys.stderr)
    _say_schedule_left_out(args)
    balanced = balanced_plan(args, model, topology) if args.balance else None
    if args.json:
        refused = {"candidates_refused": plan.refused} if isinstance(plan, _NoEvenSplit) else {}
        common.print_json(rows if balanced is None else {"candidates": rows, **refused, "balance": balanced})
        return 0
    if rows:
        _print_table(args.stage, model, topology, plan, rows)
        for note in dict.fromkeys(note for row in rows for note in row.get("notes", ())):
            print(f"note: {note}")
    else:   # --balance on a topology no even split fits: plan_rows kept the refusal
        print(f"no even-split candidate: {plan.refused}")
    if balanced is not None:
        _print_balance(balanced)
    if args.target_tokens_per_s:  # the answer in one line (no candidate reaching it is an error above)
        what = "training tokens/s" if args.stage == "train" else "generated tokens/s"
        print(f"answer: {rows[0]['devices']} devices reach {args.target_tokens_per_s:,.0f} {what} "
              f"({rows[0]['tokens_per_s']:,.0f} with the layout ranked #1): the {args.stage} stage alone; "
              "for the whole RL step use rlsim sweep --target-tokens-per-s")
    return 0


def _say_schedule_left_out(args: argparse.Namespace) -> None:
    """--set schedule=KIND keeps the knobs of the scenario's schedule section that KIND takes (as
    `rlsim run --schedule KIND`); the ones left out are said on stderr, as sweep and sensitivity say them."""
    from ..scenario import kind_set_alone, load_scenario
    if kind_set_alone(args.overrides)[0] is not None:
        common.say_schedule_left_out(load_scenario(args.scenario, overrides=scenario_overrides(args)))


def shape_note(args: argparse.Namespace) -> str | None:
    """A note naming the batch shape the planner took when --model is given without a scenario and
    --global-batch or --seq-len is left out: the default scenario's optimizer step."""
    if args.stage != "train" or args.scenario or not args.model or (args.global_batch and args.seq_len):
        return None
    from ..autoplan import train_batch
    from ..scenario import load_scenario

    scn = load_scenario(None, overrides=scenario_overrides(args))
    rows, row_len = train_batch(scn)
    taken = [f"{flag} {value}" for flag, value, given in (("--global-batch", rows, args.global_batch),
                                                            ("--seq-len", row_len, args.seq_len)) if not given]
    return (f"note: {' and '.join(taken)} taken from the default scenario's optimizer step "
            f"({scn.workload.name}: one mini-batch packed into rows of its prompt max + response max); "
            f"give --global-batch / --seq-len (or a SCENARIO.yaml) to plan another shape")


# The fields of a refusal that is the rollout side's own (the engine's layout, constants or preset)
_ROLLOUT_FIELDS = ("workload.rollout_layout", "workload.inference", "workload.engine")


def rollout_note(args: argparse.Namespace, topology: Any) -> str | None:
    """A note when the training plan is a given scenario's step and `rlsim run` would refuse that
    scenario's own rollout side on the topology planned (an engine that does not fit, a TP that does
    not divide the heads): the plan ranks trainers only, so it would otherwise be met after it."""
    if not (args.scenario and plans_the_scenarios_step(args)):
        return None
    from ..rl.llm_costs import LlmCosts
    from ..scenario import load_scenario

    scn = load_scenario(args.scenario, overrides=scenario_overrides(args))
    if scn.workload.rollout_layout == "auto":   # the run plans it
        return None
    try:
        LlmCosts(scn, topology)
    except RlsimError as exc:
        if not any(field.startswith(_ROLLOUT_FIELDS) for field in exc.fields):
            return None   # not the rollout side's: the layout planned here replaces what it was about
        return (f"note: `rlsim run` would refuse this scenario's rollout side on this topology: {exc.message} "
                f"(field {exc.fields[0]}{'; fix: ' + exc.fix if exc.fix else ''}); `rlsim plan --stage rollout` "
                "ranks engine layouts")
    return None


class _Counted:
    """An evaluator that reports each layout it costs or judges to ``progress(done, total)`` (a terminal
    bar); the rest of what a search reads of it (its params, micro_batch_counts, judge, checks_timed) is
    the wrapped evaluator's, so `rlsim plan` searches and charges as `layout: auto` does (without
    ``judge`` the block-recompute probes were timed and charged as timed evaluations)."""

    def __init__(self, evaluator: Any, progress: Any) -> None:
        self.evaluator, self.progress, self.done = evaluator, progress, 0

    def _tick(self) -> None:
        self.done += 1
        self.progress(self.done, None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._tick()
        return self.evaluator(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "evaluator":   # not set yet (a copy): no recursion
            raise AttributeError(name)
        found = getattr(self.evaluator, name)   # AttributeError where it has none: the search's getattr default
        if name != "judge":
            return found

        def judge(*args: Any, **kwargs: Any) -> Any:
            self._tick()
            return found(*args, **kwargs)
        return judge


def _counted(evaluator: Any, progress: Any) -> Any:
    return evaluator if progress is None else _Counted(evaluator, progress)


def _planner_keys(args: argparse.Namespace, scn: Any) -> dict[str, Any]:
    """The planner settings: the scenario's `planner:` section (what `layout: auto` plans with)
    under the --set planner.* items."""
    from ..scenario import deep_merge

    return deep_merge(dict(scn.planner or {}), section(args.overrides, "planner"))


def plan_rows(args: argparse.Namespace, scn: Any = None, progress: Any = None
              ) -> tuple[list[dict[str, Any]], Any, Any, Any]:
    """The candidate rows (and model, topology, plan) of the arguments, on `scn` when given;
    ``progress(done, None)`` hears of each layout evaluated."""
    from ..autoplan import aux_pool_check, engine_named, rollout_phase_check, train_space, updates_beside
    from ..hardware.topology import load_topology
    from ..llm.architecture import load_model
    from ..llm.layer_costs import with_lora
    from ..planner import plan_rollout, plan_to_target, plan_training, planner_settings
    from ..planner.evaluate import RolloutEvaluator, TrainingEvaluator

    inp = _inputs(args, scn)
    topo_over = section(args.overrides, "topology")
    topology = load_topology(inp["topology"], topo_over or None, max_devices=inp["max_devices"],
                             spec_source=inp["topology_source"])
    # the model as the workload trains it (LoRA adapters beside its frozen base, workload.lora)
    base = load_model(inp["model"], field="--model" if args.model else "workload.model")   # named as given
    model = with_lora(base, inp["workload"].lora, inp["scenario"].source)
    planner_keys = _planner_keys(args, inp["scenario"])
    settings = planner_settings(planner_keys, source=inp["scenario"].source or "--set planner")
    w = inp["workload"]   # its train_software, train_params and inference constants
    if args.stage == "train":
        _check_train_constants(w, model)
        ranks = inp["train_ranks"](topology.num_devices) if inp["train_ranks"] else None
        # also_trains_on: a function of the candidate's devices (--target searches device counts too)
        evaluator = TrainingEvaluator.for_workload(model, topology, inp["global_batch"], inp["seq_len"], w,
                                                   params=inp["params"], heaviest=inp["heaviest"],
                                                   also_trains_on=inp["also_trains_on"],
                                                   step_sequences=inp["step_sequences"],
                                                   packing=inp["step_packing"] or "none",
                                                   micro_batch_counts=inp["micro_batch_counts"],
                                                   # a colocated engine's share beside the resident state, as the run
                                                   rollout_phase=rollout_phase_check(inp["scenario"], model, inp["params"])
                                                   if inp["params"] is not None else None,
                                                   # fuse: actor's aux pool runs the layout too (not on --target's
                                                   # prefixes of nodes, whose pools the run does not cut)
                                                   pools_check=aux_pool_check(inp["scenario"], topology, base)
                                                   if inp["params"] is not None and not args.target_tokens_per_s
                                                   else None,
                                                   # what sits beside the update: a scenario's step only
                                                   beside=updates_beside(inp["scenario"] if inp["params"] is not None
                                                                         else None, inp["params"], base))
        kwargs = {"space": train_space(settings.space, w.train_software, planner_keys, model=model,
                                       packed_step=inp["step_sequences"] is not None, scenario=inp["scenario"]),
                  "params": settings.params, "evaluator": _counted(evaluator, progress)}
        with engine_named(inp["scenario"] if inp["params"] is not None else None):
            if args.target_tokens_per_s:
                plan = plan_to_target(model, topology, inp["global_batch"], inp["seq_len"], args.target_tokens_per_s,
                                      top=args.top, **kwargs)
            else:
                plan = _train_plan_or_refusal(args, lambda: plan_training(
                    model, topology, inp["global_batch"], inp["seq_len"], top=args.top, ranks=ranks, **kwargs))
    else:
        from ..autoplan import engine_rollout
        from ..llm.kv_pool import kv_pages_matter, mixes_windows
        from ..llm.sglang_pool import sglang_pool_knobs
        from ..params import engine_constants_read_past

        _refuse_found(engine_constants_read_past(w.inference, mla=model.is_mla, moe=model.is_moe,
                                                 paged=kv_pages_matter(model, w.inference.hybrid_kv_chunked_attention,
                                                                       w.inference.hybrid_kv_cache_manager),
                                                 chunked=model.chunked_attention, mixed_windows=mixes_windows(model),
                                                 engine_tp=None, engine_ep=None,
                                                 pool_knobs=sglang_pool_knobs([model], w.inference)))

        _check_rollout_batch(settings.rollout, inp["max_global_batch"])
        given = set((section(args.overrides, "planner").get("rollout") or {}).keys())
        space, inference, at_layout = engine_rollout(w, model, topology, range(topology.num_devices), settings.rollout, given,
                                                     inp["scenario"].source)
        plan = plan_rollout(model, topology, space=space, params=settings.params, top=args.top,
                            target_tokens_per_s=args.target_tokens_per_s,
                            evaluator=_counted(RolloutEvaluator(model, topology, space, params=inference,
                                                                params_for_layout=at_layout), progress))
    rows = [c.to_json() for c in plan.candidates[: args.top]]
    if args.stage == "rollout":   # what the engine forces on each candidate, as `rlsim run`'s notes
        from ..autoplan import engine_rollout_notes
        for row in rows:
            row["notes"] = engine_rollout_notes(w, model, topology, range(topology.num_devices), row["layout"].get("pp", 1))
    return rows, model, topology, plan


@dataclass(frozen=True)
class _NoEvenSplit:
    """The even-split search's refusal, kept where --balance still plans (a balanced split, which
    bounds each stage's layers by its memory, may fit where no even one does)."""

    refused: str
    candidates: tuple = ()


def _train_plan_or_refusal(args: argparse.Namespace, search: Callable[[], Any]) -> Any:
    try:
        return search()
    except RlsimError as err:
        if not args.balance or not err.message.startswith("no training layout"):
            raise
        return _NoEvenSplit(err.message)


def _check_rollout_batch(space: Any, max_batch: int) -> None:
    """The rollout planner's judging batch within the limits a training batch has: its sequences
    (a 10M-sequence batch ran past minutes) and one sequence's length."""
    from ..llm.lengths import MAX_TOKENS
    from ..scenario import LIMITS_FIX

    if space.sequences > max_batch:
        raise RlsimError(f"{space.sequences:,} sequences is past limits.max_global_batch={max_batch:,}",
                         source="--set", field="planner.rollout.sequences",
                         fix=LIMITS_FIX.format(name="max_global_batch"))
    if space.prompt_len + space.response_len > MAX_TOKENS:
        raise RlsimError(f"{space.prompt_len + space.response_len:,} tokens is not a sequence length",
                         source="--set", field="planner.rollout.response_len",
                         fix=f"give prompt_len + response_len of at most {MAX_TOKENS:.0e} tokens")


def _check_train_constants(workload: Any, model: Any) -> None:
    """Training constants given where the planned model's layers never read them
    (params.train_constants_read_past), as a run refuses them."""
    from ..llm.training import trained_shapes
    from ..params import TRAIN_SOFTWARE, train_constants_read_past

    _refuse_found(train_constants_read_past(workload.train_params, TRAIN_SOFTWARE[workload.train_software].params,
                                            trained_shapes([model])))


def _refuse_found(found: list[tuple[str, str, str]]) -> None:
    """The first of (field, why, fix) read-past findings as the command line's error."""
    for field, message, fix in found:
        raise RlsimError(message, source="--set", field=field, fix=fix)


def _check_balance_flags(args: argparse.Namespace) -> None:
    """--balance plans the train stage of one run; planner.hetero.* is its step model's: without it
    they were read past."""
    if not args.balance:
        for item in args.overrides:
            key = parse_assignment(item)[0]
            if key.startswith("planner.hetero"):
                raise RlsimError(f"{key} sets the heterogeneous step model, which only --balance runs", source="--set",
                                 field=key, fix="add --balance (on a topology of several device kinds), or drop it")
        return
    for flag, given in (("--stage rollout", args.stage != "train"), ("--target-tokens-per-s", args.target_tokens_per_s)):
        if given:
            raise RlsimError(f"--balance splits one trainer's layers and micro-batches, not with {flag}",
                             field="--balance", fix=f"drop --balance or {flag}")


def balanced_plan(args: argparse.Namespace, model: Any, topology: Any) -> dict[str, Any]:
    """The speed-proportional split (planner.plan_hetero) of a topology of several device kinds over
    the planner space's TP, PP, micro-batch, recompute and ZeRO values (at most 2: the step model
    has no ZeRO-3), at CP 1 and VPP 1 (which the space must hold), on every kind and on the subsets
    of kinds (planner.plan_kind_subsets: a kind may be best left idle). The JSON document of
    `plan --balance`."""
    from ..autoplan import train_space
    from ..planner import plan_kind_subsets, planner_settings

    kinds = topology.device_kinds()   # by their specs: an H100 group with its own HBM rate is a kind
    if len(kinds) < 2:
        raise RlsimError(f"--balance splits work over device kinds, and {topology.name} has one ({kinds[0]})",
                         field="--balance", fix="drop --balance, or give a topology of several kinds "
                                                "(e.g. hetero-a100-h100)")
    if model.is_moe:
        raise RlsimError(f"{model.name} has experts, and the heterogeneous step model splits dense layers (no EP)",
                         field="--balance", fix="drop --balance for an MoE model")
    if model.adapter_rank:   # its state bytes and ZeRO-Offload's buffer are every parameter's, trained
        raise RlsimError(f"workload.lora trains adapters beside {model.name}'s frozen base, and the heterogeneous step "
                         "model trains every parameter (their gradients and optimizer states)", field="--balance",
                         fix="drop --balance, or workload.lora for a full fine-tune's split")
    inp = _inputs(args)
    planner_keys = _planner_keys(args, inp["scenario"])
    settings = planner_settings(planner_keys, source=inp["scenario"].source or "--set planner")
    space = train_space(settings.space, inp["workload"].train_software, planner_keys,
                        packed_step=inp["step_sequences"] is not None, model=model, scenario=inp["scenario"])
    zeros = [z for z in space.zero if z <= 2]
    if not zeros:
        raise RlsimError(f"the heterogeneous step model takes ZeRO 0-2, and planner.space.zero is {space.zero}",
                         field="planner.space.zero", fix="add 0, 1 or 2 to planner.space.zero, or drop --balance")
    for key in ("cp", "vpp"):   # the balanced split runs neither: a space without 1 would be read past there
        if 1 not in getattr(space, key):
            raise RlsimError(f"the heterogeneous step model runs {key} 1 (no context parallelism, no interleaved "
                             f"chunks), and planner.space.{key} is {getattr(space, key)}", field=f"planner.space.{key}",
                             fix=f"add 1 to planner.space.{key} (the even rows keep the others), or drop --balance")
    result = plan_kind_subsets(model, topology, inp["global_batch"], inp["seq_len"], tp_values=space.tp,
                               pp_values=space.pp, micro_batch_values=space.micro_batch,
                               recompute_values=space.recompute, zero_values=zeros, params=settings.hetero,
                               train_params=inp["workload"].train_params)
    return {"devices": topology.device_counts(), **result.to_json()}


def _print_balance(doc: dict[str, Any]) -> None:
    devices = ", ".join(f"{n} x {k}" for k, n in doc["devices"].items())
    print(f"\n--balance ({devices}): the rows above split layers and micro-batches evenly, paced by the slowest "
          "device; split in proportion to each device's speed (the heterogeneous step model, over the planner "
          "space's TP, PP, micro-batch, recompute and ZeRO 0-2):")
    for name in ("balanced", "uniform"):
        part = doc[name]
        if part is None:
            print(f"  {name + ':':10} no even split fits ({doc['uniform_refused']})")
            continue
        print(f"  {name + ':':10} {_split_text(part)}")
    if doc["speedup"] is not None:
        print(f"  speedup of the balanced split over the even one: {doc['speedup']:.2f}x")
    _print_kind_subsets(doc)


def _split_text(part: dict[str, Any]) -> str:
    lay = part["layout"]
    return (f"tp {lay['tp']} pp {lay['pp']} dp {lay['dp']} zero {lay['zero']}, recompute {lay['recompute']}, "
            f"micro-batch {lay['micro_batch']}, layers per stage {part['layers_per_stage']}, micro-batches per "
            f"replica {part['microbatches_per_replica']}: step {part['step_time_s']:.3f} s, utilization "
            f"{part['utilization']:.3f}")


def _print_kind_subsets(doc: dict[str, Any]) -> None:
    """Each subset of kinds planned (its balanced split), then the best and the kinds it leaves idle."""
    print(f"  the kinds planned on ({doc['subsets_tried']}), each with its best split:")
    for n, part in enumerate(doc["subsets"]):   # every kind first: the balanced split above
        what = "the balanced split above" if n == 0 else part["refused"] if "refused" in part else _split_text(part)
        print(f"    {' + '.join(part['kinds'])} ({counted(part['devices'], 'device')}): {what}")
    best = doc["best"]
    if not best["idle"]:
        fewer = [part for part in doc["subsets"][1:] if "refused" not in part]
        runner_up = min(fewer, key=lambda part: part["step_time_s"], default=None)
        print("  best: every kind (the balanced split); leaving a kind idle is slower" + (
            "" if runner_up is None else f" (the fastest without one, {' + '.join(runner_up['kinds'])}: step "
                                         f"{runner_up['step_time_s']:.3f} s)"))
        return
    print(f"  best: {' + '.join(best['kinds'])} only ({counted(best['devices'], 'device')}), step {best['step_time_s']:.3f} s, "
          f"{best['speedup_over_every_kind']:.2f}x faster than the balanced split on every kind:")
    for idle in best["idle"]:
        with_it = idle["step_time_with_it_s"]
        why = (f"with it the best split steps in {with_it:.3f} s" if with_it is not None else
               f"with it: {idle['with_it_refused']}" if "with_it_refused" in idle else
               f"the kinds with it were not planned on ({doc['subsets_tried']})")
        print(f"    {idle['kind']} left idle ({why}): the price, {counted(idle['devices'], 'device')} idle, "
              f"{idle['idle_device_hours_per_1000_steps']:.2f} device-hours per 1000 steps")




def _layout_cell(layout: dict[str, Any], key: str) -> str:
    """A plan table's cell of a layout key: full recompute with its Megatron method where it is not uniform 1
    ("full block 5"), a key the layout leaves out at its default."""
    if key == "recompute" and "recompute_method" in layout:
        return f"{layout['recompute']} {layout['recompute_method']} {layout['recompute_num_layers']}"
    return str(layout.get(key, {"zero_shard_size": "all", "pp": 1}.get(key, "")))


# The plan table's column of a layout's step_time_s, by stage: what that time is (a training layout's is
# one optimizer step of the batch planned, not an RL step; a rollout layout's the batch's generation).
STEP_COLUMN = {"train": "optimizer step s", "rollout": "rollout s"}


def _print_table(stage: str, model: Any, topology: Any, plan: Any, rows: list[dict[str, Any]]) -> None:
    from ..report.console import Console, Table

    title = (f"{stage} layouts of {model.name} on {topology.name} ({rows[0]['devices']} devices): "
             f"{plan.evaluated} evaluated, planning cost {plan.planning_cost_s:.2f} s (modelled)")
    table = Table(title=title)
    keys = (["tp", "pp", "vpp", "dp", "ep", "cp", "zero", "recompute", "micro_batch"] if stage == "train"
            else ["tp", "ep", "instances", "max_num_seqs"])
    if stage != "train" and any("pp" in r["layout"] for r in rows):   # pipeline-parallel engines searched
        keys.insert(keys.index("ep") + 1, "pp")
    if stage == "train" and any("etp" in r["layout"] for r in rows):   # an MoE model: its expert TP
        keys.insert(keys.index("ep") + 1, "etp")
    if stage == "train" and any("zero_shard_size" in r["layout"] for r in rows):   # HSDP candidates searched
        keys.insert(keys.index("zero") + 1, "zero_shard_size")
    aux = any("aux_pool_memory_per_device_bytes" in r for r in rows)   # fuse: actor's aux pool: its peak too
    # the placement's columns where a row has them (training layouts; a rollout layout has no placement)
    placed = any(r.get("naive_step_time_s") is not None or r.get("tp_level") for r in rows)
    for k in ["#", *keys, STEP_COLUMN[stage], "TFLOP/s/dev", "MFU", "mem GB", *(["aux mem GB"] if aux else []),
              "comm", "tokens/s", *(["naive s", "TP level"] if placed else [])]:
        table.add_column(k, justify="right")
    for i, r in enumerate(rows, 1):
        lay = r["layout"]
        naive = r.get("naive_step_time_s")
        aux_gb = [f"{r['aux_pool_memory_per_device_bytes'] / 1e9:.1f}" if "aux_pool_memory_per_device_bytes" in r
                  else ""] if aux else []
        table.add_row(str(i), *[_layout_cell(lay, k) for k in keys], f"{r['step_time_s']:.3f}",
                      f"{r['tflops_per_device']:.1f}", f"{r['mfu']:.3f}", f"{r['memory_per_device_bytes'] / 1e9:.1f}",
                      *aux_gb, f"{r['comm_fraction']:.2f}", f"{r['tokens_per_s']:.0f}",
                      *(["" if naive is None else f"{naive:.3f}", str(r.get("tp_level", ""))] if placed else []))
    Console(width=200).print(table)
    if plan.pruned:
        print("pruned: " + ", ".join(f"{k} {v}" for k, v in plan.pruned.items()))
