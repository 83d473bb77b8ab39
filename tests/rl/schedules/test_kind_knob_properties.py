"""Every schedule kind under a random valid combination of the knobs it takes (hypothesis): the
conservation laws the project promises hold whatever the knobs.

A case names a kind (each kind by name: pytest parametrize), then draws for each knob the kind accepts
(ScheduleConfig.accepts on its placement) a value or nothing, workload knobs (algorithm, dynamic
sampling, mini-batches, epochs, multi-turn rollouts, a distillation teacher, a reward model on the
trainer or served, the reward hand-over) and, where the kind models them, failures. It runs on
FakeCosts (many cost shapes: instance and replica sizes, sync, switch, prefill and reward costs) and
on the LLM cost models (the fuzz harness's tiny one-node scenario), where each kind also runs with each
of multi-turn rollouts, a distillation teacher, a served reward model and dynamic sampling under the
engine's and the trainer's knobs (engine_and_trainer_knobs: speculative decoding, the engine, rollout and training TP,
the training stack and its ZeRO stage with the DeepSpeed keys OpenRLHF's importer writes, LoRA, the
full-tensor refit, the colocated switch). A combination the scenario
refuses when it loads, or the run as it starts, is an RlsimError naming a field and a fix: that is
the contract for it (tests/fuzz judges the messages); any other exception is a finding. A run that
goes checks:

- device time: each device's recorded intervals tile the makespan, whole run and steady window
  (busy + bubbles by cause = devices x wall time, within round-off), the causes sum to the bubble
  fraction, the steady busy share + steady bubble = 1;
- samples: each sample recorded once, consumed or dropped (with a reason), never both; generated =
  consumed + dropped (the in-flight ones are in no count: samples_in_flight); the steps' sample
  counts = the consumed; a prompt group never over n samples;
- staleness: never above the summary's bound where the kind bounds it (staleness.bound not None);
- throughput: tokens/s (whole run and steady) never above roofline_tokens_per_s; on FakeCosts, which
  train at the roofline's rate, the trained tokens fit in the device time spent training;
- the critical path: shares sum to 1, each step's causes to its length;
- determinism: the same scenario and seed give the same summary, byte for byte.

RLSIM_FUZZ_EXAMPLES=N draws N fresh random examples per kind and test (a long hunt; by default a few
derandomized ones, ~13 s on one core). The cases it found are plain regression tests at the end.
"""
from __future__ import annotations

import copy
import json
import math
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import simulator
from simulator import metrics
from simulator.engine_software import ENGINE_SOFTWARE
from simulator.errors import RlsimError
from simulator.frameworks.deepspeed_zero import zero_train_params
from simulator.rl import critical_path
from simulator.rl.fake_costs import FakeCosts
from simulator.rl.schedules import SameLayoutReplanner, run_schedule
from simulator.rl.schedules.registry import kinds as registry_kinds
from simulator.scenario import SCHEDULE_CLASSES, load_scenario
from tests.fuzz.harness import TINY_SCENARIO

PROMPTS, N = 8, 4      # a step's prompts and samples a prompt, most often

# A value strategy per schedule knob (None: left out); the knobs a kind takes are read from its class.
KNOB_VALUES: dict[str, st.SearchStrategy] = {
    "overprovision": st.sampled_from([0.0, 0.25, 0.5]),
    "micro_batching": st.sampled_from(["balanced", "sequence"]),
    "fuse": st.sampled_from(["full", "actor"]),
    "rollout_fraction": st.sampled_from([0.25, 0.5, 0.75]),
    "rollout_devices": st.sampled_from([2, 4, 6]),
    "tail_threshold": st.sampled_from([0.5, 0.9]),
    "staleness": st.sampled_from([0, 1, 2, 3]),
    "partial_rollout": st.booleans(),
    "length_budget": st.sampled_from([50, 300, 2000]),
    "placement": st.sampled_from(["colocated", "disaggregated"]),
    "stream_threshold": st.sampled_from([0.25, 0.5, 1.0]),
    "consolidate_share": st.sampled_from([0.25, 0.5, 0.75]),
    "reward_during_forwards": st.booleans(),
    "between_gen_batches": st.sampled_from(["stay", "sleep", "reshard"]),
    "recompute_logprob": st.booleans(),
    "round_batches": st.booleans(),
    "aux_devices": st.sampled_from([2, {"reference": 2}]),
    "require_batches": st.sampled_from([1, 2]),
    "trigger_parameter_sync_step": st.sampled_from([1, 2, 3]),
    "staleness_threshold": st.sampled_from([0.0, 0.5, 1.0, 2.0]),
    "max_inflight_prompts_per_server": st.sampled_from([1, 4, 16]),
    "request_routing": st.booleans(),
    "dynamic_resources": st.sampled_from([{}, {"policy": "fixed_ratio", "switch_cost_s": 0.1},
                                          {"policy": "static_fully_async"}]),
    "max_trajectory_age_steps": st.sampled_from([1, 2, 3]),
    "in_flight_weight_updates": st.booleans(),
    "async_engine": st.booleans(),
    "recompute_kv_after_update": st.booleans(),
    "max_head_offpolicyness": st.sampled_from([0, 1, 2, 4]),
    "interruptible": st.booleans(),
    "interrupt_keeps_kv": st.booleans(),
    "max_concurrent_rollouts": st.sampled_from([1, 4, 16]),
    "consumer_batch_size": st.sampled_from([4, 8]),
    "num_warmup_batches": st.sampled_from([0, 0.5, 1, 2]),
    "max_off_policy_threshold": st.sampled_from([None, 1, 2, 8]),
    "max_off_policy_strategy": st.sampled_from(["drop", "wait"]),
    "poll_interval_s": st.sampled_from([0.5, 2.0]),
    "parameter_sync_step": st.sampled_from([1, 2, 4]),
    "hybrid_rollout": st.sampled_from([{}, {"switch_threshold_release_steps": 1}]),
    "max_inflight_gen_batches": st.sampled_from([1, 2]),
    "distqueue": st.sampled_from([{"packed": False}, {"bw_Bps": 1e8}]),
}


@st.composite
def schedules(draw: st.DrawFn, dynamic_sampling: bool, kind: str | None = None) -> dict[str, Any]:
    """A kind and a value or nothing for each knob it takes; the pairs its class refuses on sight
    (a budget without partial rollouts, overprovision beside dynamic sampling, ...) drawn seldom."""
    kind = kind or draw(st.sampled_from(registry_kinds()))
    cls = SCHEDULE_CLASSES[kind]
    sched: dict[str, Any] = {"kind": kind}
    if "placement" in cls.ACCEPTS:
        sched["placement"] = draw(KNOB_VALUES["placement"])
    for knob in sorted(cls.accepts(sched.get("placement")) & set(KNOB_VALUES) - {"placement", "length_budget"}):
        if draw(st.booleans()):
            sched[knob] = draw(KNOB_VALUES[knob])
    if sched.get("partial_rollout") and "length_budget" in cls.accepts(sched.get("placement")):
        sched["length_budget"] = draw(KNOB_VALUES["length_budget"])
    if dynamic_sampling or sched.get("partial_rollout"):
        sched.pop("overprovision", None)
    if not dynamic_sampling:
        sched.pop("between_gen_batches", None)
    if "dynamic_resources" in sched:
        sched["request_routing"] = True
    if sched.get("max_off_policy_threshold", 8) is None:
        sched.pop("max_off_policy_strategy", None)
    if not sched.get("interruptible", True):
        sched.pop("interrupt_keeps_kv", None)
    if not sched.get("in_flight_weight_updates"):
        sched.pop("recompute_kv_after_update", None)
    return sched


@st.composite
def cases(draw: st.DrawFn, kind: str | None = None, force: str | None = None) -> dict[str, Any]:
    """A case of `kind` (any where None); `force`, a WORKLOAD_FEATURES name, is always in its workload."""
    workload: dict[str, Any] = {"algorithm": draw(st.sampled_from(["grpo", "dapo", "ppo"])),
                                "prompts_per_step": draw(st.sampled_from([PROMPTS, 4, 12])),
                                "samples_per_prompt": draw(st.sampled_from([N, 2, 8]))}
    if force == "dynamic_sampling" or draw(st.booleans()):
        workload["dynamic_sampling"] = {"keep_fraction": draw(st.sampled_from([0.4, 0.7, 1.0]))}
    sched = draw(schedules("dynamic_sampling" in workload, kind))
    takes_batches = sched["kind"] in ("colocated", "disaggregated", "one-step-off", "stalesync", "async",
                                      "nemo-rl-async")
    if "dynamic_sampling" in workload and takes_batches:
        workload["dynamic_sampling"].update({k: v for k, v in {
            "gen_prompts": draw(st.sampled_from([None, 4, 8])),
            "max_gen_batches": draw(st.sampled_from([None, 8]))}.items() if v is not None})
    if "dynamic_sampling" not in workload:
        sched.pop("max_inflight_gen_batches", None)
    workload["mini_batch_prompts"] = draw(st.sampled_from([None, 2, 4]))
    workload["ppo_epochs"] = draw(st.sampled_from([1, 2]))
    if "aux_devices" in sched:
        workload["reference"] = True
        if sched["kind"] == "colocated":   # its one aux pool: verl's reward_pool
            sched["aux_devices"] = {"reward": 2}
            sched.pop("fuse", None)
            workload["reward"] = {"kind": "model"}
    workload.update(draw(workload_extras(force)))
    if sched["kind"] in ("colocated", "disaggregated") or sched.get("placement") == "colocated" or (
            sched["kind"] == "stalesync" and "placement" not in sched):
        if draw(st.integers(0, 3)) == 0:   # failures: on colocated placements and synchronous split pools
            sched["failures"] = [{"at_s": draw(st.sampled_from([0.5, 3.0, 8.0])),
                                  "fail": draw(st.sampled_from(["devices:0-1", "devices:2-3", "4"]))}]
            sched["recovery"] = {"lose_to": draw(st.sampled_from(["step", "checkpoint"])),
                                 "restart_s": draw(st.sampled_from([0.0, 1.0])), "drop_whole_node": False}
    if "consumer_batch_size" in sched:
        sched["consumer_batch_size"] = max(sched["consumer_batch_size"], workload["prompts_per_step"])
    costs = {"instance_devices": draw(st.sampled_from([1, 2, 4])), "train_group_devices": draw(st.sampled_from([1, 2, 4])),
             "sync_s": draw(st.sampled_from([0.0, 0.3])), "switch_s": draw(st.sampled_from([0.0, 0.1])),
             "prefill_s_per_token": draw(st.sampled_from([0.0, 1e-5])),
             "reward_s_per_sample": draw(st.sampled_from([0.0, 0.01])),
             "instance_max_seqs": draw(st.sampled_from([2, 8, 1000]))}
    return {"schedule": sched, "workload": {k: v for k, v in workload.items() if v is not None},
            "seed": draw(st.integers(0, 10_000)), "devices": draw(st.sampled_from([8, 12, 16])),
            "costs": costs, "iterations": draw(st.sampled_from([2, 3, 4]))}


@st.composite
def workload_extras(draw: st.DrawFn, force: str | None = None) -> dict[str, Any]:
    """Multi-turn rollouts, a distillation teacher, a reward model (on the trainer or served apart) or
    the rule reward's hand-over, each drawn now and then; `force` (a WORKLOAD_FEATURES name) always."""
    out: dict[str, Any] = {}
    if force == "multi_turn" or draw(st.integers(0, 3)) == 0:
        out["multi_turn"] = {"max_turns": draw(st.sampled_from([2, 3])), "observation_tokens": 20,
                             "tool_latency_s": draw(st.sampled_from([0.0, 0.5])), "lockstep": draw(st.booleans())}
    if force == "distillation" or draw(st.integers(0, 3)) == 0:   # on-policy distillation: a teacher served apart
        out["distillation"] = {"teacher": "fake", "devices": 2, "handover": draw(st.sampled_from(["sample", "step"]))}
    reward = {"kind": "model", "served": {"devices": draw(st.sampled_from([1, 2]))}} if force == "served_reward" else \
        draw(st.sampled_from([None, {"kind": "model"}, {"kind": "model", "served": {"devices": 2}},
                              {"handover": "sample"}, {"handover": "batch"}]))
    if reward is not None:
        out["reward"] = reward
    return out


def lognormal(median: float, sigma: float, cap: int):
    def sample(rng, n_prompts, n, step):
        return np.clip(np.round(rng.lognormal(np.log(median), sigma, size=(n_prompts, n))), 1, cap).astype(int)
    return sample


def costs_of(case: dict[str, Any]) -> FakeCosts:
    # training at the devices' peak (the roofline's FLOP per token and rate), so the roofline checks
    # are tight
    flops_per_token, peak_flops = 1e11, 1e15
    return FakeCosts(flops_per_token=flops_per_token, peak_flops=peak_flops,
                     train_device_s_per_token=flops_per_token / peak_flops, **case["costs"])


def load(case: dict[str, Any]):
    workload = {"model": "fake", **case["workload"],
                "prompt_length": {"dist": "lognormal", "median": 60, "sigma": 0.3, "max": 200},
                "response_length": {"dist": "lognormal", "median": 200, "sigma": 1.0, "max": 2000}}
    return load_scenario({"topology": "fake", "workload": workload, "schedule": case["schedule"],
                          "iterations": case["iterations"], "seed": case["seed"]})


def simulate(case: dict[str, Any], on_refusal=note):
    """(scenario, costs, record, timeline, samples, summary with its critical_path), or None where
    refused by name (the refusal handed to ``on_refusal``)."""
    try:
        sc = load(case)
        costs = costs_of(case)
        rec = run_schedule(sc, costs, case["devices"], lognormal(60, 0.3, 200), lognormal(200, 1.0, 2000),
                           replanner=SameLayoutReplanner(cost_s=0.2))
    except RlsimError as exc:   # refused: the message must name what to change
        assert exc.field and exc.fix, exc   # names what to change and how
        on_refusal(f"refused: {exc}")
        return None
    tl, sm = rec.timeline.to_frame(), rec.samples.to_frame()
    summary = metrics.summary(rec, tl, sm)
    summary["critical_path"] = critical_path.of_run(rec, tl)
    return sc, costs, rec, tl, sm, summary


def check_device_time(rec, tl, s) -> None:
    T, devices = rec.makespan_s, rec.n_devices
    assert np.allclose(metrics.per_device_time(tl, devices), T, rtol=1e-9, atol=1e-9)
    window = metrics.steady_window(rec, tl)
    low = float(rec.iterations[0]["end"]) if len(rec.iterations) >= 2 else 0.0
    high = float(rec.iterations[-1]["end"]) if len(rec.iterations) >= 2 else T
    assert np.allclose(metrics.per_device_time(window, devices), high - low, rtol=1e-9, atol=1e-9)
    for frac, causes in ((s["bubble_fraction"], s["bubbles_by_cause"]),
                         (s["steady_bubble_fraction"], s["steady_bubbles_by_cause"])):
        assert -1e-12 <= frac <= 1 + 1e-12
        assert math.isclose(sum(causes.values()), frac, rel_tol=1e-9, abs_tol=1e-12)
    # the pools' busy shares weighted by their devices, plus the steady bubble, cover the window
    seconds = metrics.device_seconds(window)
    busy = float(seconds[window["state"].isin(metrics.BUSY_STATES)].sum())
    assert math.isclose(busy / max(seconds.sum(), 1e-300) + s["steady_bubble_fraction"], 1.0, rel_tol=1e-9,
                        abs_tol=1e-9) or seconds.sum() == 0


def check_samples(sc, rec, sm, s) -> None:
    assert sm["sample"].is_unique
    consumed = sm["consumed_iteration"] >= 0
    assert (consumed ^ sm["dropped"]).all()
    assert (sm.loc[sm["dropped"], "drop_reason"] != "").all()
    assert consumed.sum() == sum(it["samples"] for it in rec.iterations)
    counts = s["samples"]
    assert counts["generated"] == len(sm) == counts["consumed"] + sum(counts["dropped"].values())
    assert (sm.groupby(["round", "group"]).size() <= sc.workload.samples_per_prompt).all()
    assert (sm.loc[consumed, "consumed_iteration"] < len(rec.iterations)).all()


def check_staleness(sc, sm, s) -> None:
    consumed = sm["consumed_iteration"] >= 0
    assert (sm.loc[consumed, "staleness"] >= 0).all()
    bound = s["staleness"]["bound"]
    if bound is not None and consumed.any():
        assert sm.loc[consumed, "staleness"].max() <= math.floor(bound) + 1e-9, bound


def check_roofline(s) -> None:
    assert s["tokens_per_s"] <= s["roofline_tokens_per_s"] * (1 + 1e-9)
    assert s["steady_tokens_per_s"] <= s["roofline_tokens_per_s"] * (1 + 1e-9)


def check_throughput(sc, costs, rec, tl, s) -> None:
    check_roofline(s)
    train_device_s = metrics.device_seconds(tl)[tl["state"] == "train"].sum()
    trained = s["tokens_per_s"] * rec.makespan_s * costs.flops_per_token * sc.workload.ppo_epochs
    assert trained / costs.peak_flops <= train_device_s * (1 + 1e-9)


def check_critical_path(s) -> None:
    crit = s["critical_path"]
    if crit["step_time_s"] > 0:
        assert math.isclose(sum(crit["share"].values()), 1.0, rel_tol=1e-9)
    for step in crit["steps"]:
        assert math.isclose(sum(step["s_by_cause"].values()), step["length_s"], rel_tol=1e-9, abs_tol=1e-9)
    if "steady" in crit and crit["steady"]["step_time_s"] > 0:
        assert math.isclose(sum(crit["steady"]["share"].values()), 1.0, rel_tol=1e-9)


def examples(default: int) -> settings:
    """``default`` derandomized examples (the same every run); RLSIM_FUZZ_EXAMPLES=N (as tests/fuzz): N
    fresh random ones, a long hunt."""
    hunt = int(os.environ.get("RLSIM_FUZZ_EXAMPLES", "0"))
    return settings(max_examples=hunt or default, deadline=None, database=None, derandomize=not hunt,
                    suppress_health_check=list(HealthCheck))


# every kind by name, so that each is drawn whatever hypothesis picks (about half the draws are refused)
@pytest.mark.parametrize("kind", registry_kinds())
@examples(8)
@given(data=st.data())
def test_every_kind_keeps_its_promises_under_random_knobs(kind, data):
    case = data.draw(cases(kind))
    note(json.dumps(case, sort_keys=True))
    out = simulate(case)
    event("refused" if out is None else f"ran: {case['schedule']['kind']}")   # --hypothesis-show-statistics
    if out is None:
        return
    sc, costs, rec, tl, sm, s = out
    check_device_time(rec, tl, s)
    check_samples(sc, rec, sm, s)
    check_staleness(sc, sm, s)
    check_throughput(sc, costs, rec, tl, s)
    check_critical_path(s)
    again = simulate(case)
    assert json.dumps(again[-1], sort_keys=True, default=str) == json.dumps(s, sort_keys=True, default=str)



def tiny_llm_scenario(case: dict[str, Any]) -> dict[str, Any]:
    """The case on the fuzz harness's tiny scenario (one DGX-H100 node, Qwen2.5-7B): the LLM cost
    models instead of FakeCosts (layouts, memory, refits, the served pools' engines)."""
    scenario = copy.deepcopy(TINY_SCENARIO)
    workload = dict(case["workload"])
    if "distillation" in workload:
        workload["distillation"] = {**workload["distillation"], "teacher": "qwen2.5-0.5b"}
    scenario["workload"].update(workload)
    scenario.update(schedule=case["schedule"], iterations=case["iterations"], seed=case["seed"])
    scenario["limits"] = {**scenario["limits"], "max_work": 200_000, "max_segments_per_sample": 64}
    return scenario


def check_llm_run(scenario: dict[str, Any], kind: str) -> simulator.SimulationResult | None:
    """The laws on one scenario through simulator.simulate (no FLOP-rate closed form: the roofline
    bound only), run twice (determinism); None where refused by name."""
    note(json.dumps(scenario, sort_keys=True))
    try:
        result = simulator.simulate(scenario=copy.deepcopy(scenario))
    except RlsimError as exc:
        assert exc.field and exc.fix, exc
        note(f"refused: {exc}")
        event("refused")
        return None
    event(f"ran: {kind}")
    check_llm_result(scenario, result)
    return result


def check_llm_result(scenario: dict[str, Any], result: simulator.SimulationResult) -> None:
    """The laws on `result`, the run of `scenario`, and the same summary from a second run."""
    rec, tl, sm, s = result.record, result.timeline, result.samples, result.summary
    check_device_time(rec, tl, s)
    check_samples(result.scenario, rec, sm, s)
    check_staleness(result.scenario, sm, s)
    check_roofline(s)
    check_critical_path(s)
    again = simulator.simulate(scenario=copy.deepcopy(scenario)).summary
    assert json.dumps(again, sort_keys=True, default=str) == json.dumps(s, sort_keys=True, default=str)


@pytest.mark.parametrize("kind", registry_kinds())
@examples(4)
@given(data=st.data())
def test_every_kind_keeps_its_promises_on_the_llm_costs(kind, data):
    """The same laws through simulator.simulate on the LLM cost models."""
    case = data.draw(cases(kind))
    check_llm_run(tiny_llm_scenario(case), kind)


# ---- the engine's and the trainer's knobs on the LLM costs -------------------------------------------

# The trainer stacks drawn (None: the preset's megatron-core), each with the ZeRO stages it is drawn at: verl-fsdp's 1
# and the FSDP2 stacks' 2 (nemo-rl-dtensor, areal-fsdp, areal-archon, skyrl-fsdp shard as ZeRO 3 only), which their
# trainers have not, refused by field (TrainSoftware.bounded) as a TP above 1 where it has none, and as selective
# recompute on the transformers stacks; megatron-2022's 1 a what-if that runs. PIPELINE_STACKS are drawn with PP 2 now
# and then (areal-archon: torchtitan's pipeline stages under FSDP2, ZeRO 3 with pipelines).
TRAIN_STACKS: dict[str | None, tuple[int, ...]] = {None: (1, 0, 3), "megatron-2022": (0, 1), "hf-transformers": (0, 1, 2, 3),
                                                   "verl-fsdp": (1, 2, 3), "skyrl-fsdp": (3, 3, 2), "trl": (0, 2, 3),
                                                   "nemo-rl-dtensor": (3, 3, 2), "areal-fsdp": (3, 3, 2),
                                                   "areal-archon": (3, 3, 2)}
PIPELINE_STACKS = (None, "megatron-2022", "areal-archon")
WORKLOAD_FEATURES = ("multi_turn", "distillation", "served_reward", "dynamic_sampling")


@st.composite
def speculative_decoding(draw: st.DrawFn) -> dict[str, Any]:
    """workload.inference's speculative keys (mtp, drawn seldom: Qwen2.5 has no MTP layers, refused by name)."""
    method = draw(st.sampled_from(["eagle", "eagle3", "draft_model", "eagle", "eagle3", "draft_model", "mtp"]))
    out: dict[str, Any] = {"speculative_method": method, "num_speculative_tokens": draw(st.sampled_from([1, 2, 4])),
                           "speculative_acceptance_rate": draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))}
    if method == "draft_model":
        out["speculative_draft_model"] = "qwen2.5-0.5b"
    return out


@st.composite
def trainer_knobs(draw: st.DrawFn) -> dict[str, Any]:
    """workload keys of the trainer: a stack, its TP (PP on PIPELINE_STACKS), ZeRO stage and recompute mode;
    on the DeepSpeed stacks (hf-transformers, trl) now and then the ZeRO keys OpenRLHF's and TRL's importers
    write (frameworks/deepspeed_zero.py zero_train_params) with their ZeRO-Offload (ds.adam_offload; at ZeRO-3
    the parameters too, fsdp_cpu_offload) and fp32 accumulation beside bf16 or fp16 weights; LoRA."""
    stack = draw(st.sampled_from(list(TRAIN_STACKS)))
    megatron = stack in (None, "megatron-2022")
    layout: dict[str, Any] = {"zero": draw(st.sampled_from(TRAIN_STACKS[stack])),
                              "tp": draw(st.sampled_from([1, 2, 4] if megatron else [1, 1, 1, 2]))}
    if stack in PIPELINE_STACKS and draw(st.integers(0, 3)) == 0:
        layout["pp"] = 2
    if draw(st.booleans()):
        layout["recompute"] = draw(st.sampled_from(["full", "none", "selective"]))
    out: dict[str, Any] = {"train_layout": layout}
    if stack is not None:
        out["train_software"] = stack
    if stack in ("hf-transformers", "trl") and draw(st.booleans()):
        out.update(deepspeed_keys(draw, layout["zero"]))
    if draw(st.integers(0, 3)) == 0:
        out["lora"] = {"rank": draw(st.sampled_from([8, 16])),
                       "targets": draw(st.sampled_from(["all-linear", ["qkv", "o"]]))}
    return out


def deepspeed_keys(draw: st.DrawFn, stage: int) -> dict[str, Any]:
    """workload keys of DeepSpeed ZeRO `stage` as the importers write them (openrlhf.py _deepspeed_zero, trl.py
    _offload): train_params from zero_train_params, the optimizer (ZeRO-3: and the parameters) on the host,
    fp32 gradient accumulation (ZeRO 1-3) beside bf16 or fp16 weights."""
    offload = draw(st.sampled_from(["none", "optimizer", "params"] if stage == 3 else ["none", "optimizer"]))
    fp32_accum = stage > 0 and draw(st.booleans())
    bf16 = not fp32_accum or draw(st.booleans())
    params = zero_train_params(stage, overlap_comm=draw(st.booleans()), optimizer_on_host=offload != "none",
                               fp32_grad_accum=fp32_accum, params_on_host=offload == "params", bf16_weights=bf16)
    if offload != "none":
        params["offload"] = {"optimizer": True, "scope": "optimizer_step"} if offload == "optimizer" else {
            "fsdp_cpu_offload": True, "host_param_bytes_per_param": 2.0}
    return {"train_params": params, "dtype": "bf16" if bf16 else "fp16"}


@st.composite
def switch_knobs(draw: st.DrawFn) -> dict[str, Any]:
    """schedule.switch: the colocated switch's offloads and the engine's sleep or residence."""
    sleep = draw(st.booleans())
    out: dict[str, Any] = {"offload_weights": draw(st.booleans()), "engine_sleep": sleep,
                           "offload_optimizer": draw(st.booleans()), "free_gradients": draw(st.booleans())}
    if sleep:
        out["engine_sleep_level"] = draw(st.sampled_from([1, 2]))
    elif draw(st.booleans()):
        out["engine_resident"] = True
    return out


@st.composite
def engine_and_trainer_knobs(draw: st.DrawFn, case: dict[str, Any]) -> dict[str, Any]:
    """The tiny scenario of `case` with the engine's and the trainer's knobs drawn over it: speculative
    decoding, the rollout TP, a named engine, the trainer (trainer_knobs), the full-tensor refit (and LoRA's refit of the
    whole weights), the colocated switch where the kind has one."""
    scenario = tiny_llm_scenario(case)
    workload, sched = scenario["workload"], scenario["schedule"]
    accepts = SCHEDULE_CLASSES[sched["kind"]].accepts(sched.get("placement"))
    if draw(st.booleans()):
        workload["inference"] = draw(speculative_decoding())
    if draw(st.booleans()):
        workload["rollout_layout"] = {"tp": draw(st.sampled_from([1, 2, 4]))}
    if draw(st.integers(0, 3)) == 0:
        workload["engine"] = draw(st.sampled_from(sorted(ENGINE_SOFTWARE)))
    if draw(st.booleans()):
        workload.update(draw(trainer_knobs()))
    if "refit" in accepts and draw(st.booleans()):
        sched["refit"] = "full-tensors"
    if "lora" in workload and draw(st.booleans()):
        sched["lora_refit"] = "full"
    if "switch" in accepts and draw(st.booleans()):
        sched["switch"] = draw(switch_knobs())
    return scenario


@pytest.mark.parametrize("force", WORKLOAD_FEATURES)
@pytest.mark.parametrize("kind", registry_kinds())
@examples(3)
@given(data=st.data())
def test_every_kind_keeps_its_promises_under_the_engine_and_trainer_knobs(kind, force, data):
    """Each kind with each of multi-turn rollouts, a distillation teacher, a served reward model and dynamic
    sampling, under random engine and trainer knobs (engine_and_trainer_knobs): the same laws, or a refusal
    naming a field."""
    case = data.draw(cases(kind, force))
    check_llm_run(data.draw(engine_and_trainer_knobs(case)), kind)


def test_verl_fsdp_at_tp_2_is_refused_by_field():
    """verl's FSDP workers have no tensor parallelism: tp 2 on its stack is refused naming
    workload.train_layout.tp and verl's Megatron backend; tp 1 runs."""
    case = _case({"kind": "colocated"})
    scenario = tiny_llm_scenario(case)
    scenario["workload"].update(train_software="verl-fsdp", train_layout={"tp": 2, "zero": 3})
    with pytest.raises(RlsimError, match="verl-fsdp has no tensor parallelism") as err:
        simulator.simulate(scenario=copy.deepcopy(scenario))
    assert err.value.field == "workload.train_layout.tp" and "strategy=megatron" in str(err.value)
    scenario["workload"]["train_layout"]["tp"] = 1
    check_llm_result(scenario, simulator.simulate(scenario=copy.deepcopy(scenario)))


# ---- the shrunk cases the property found, each a plain regression test ---------------------------

def _case(schedule: dict[str, Any], workload: dict[str, Any] | None = None, costs: dict[str, Any] | None = None,
          devices: int = 8, iterations: int = 2, seed: int = 1) -> dict[str, Any]:
    return {"schedule": schedule, "workload": {"prompts_per_step": PROMPTS, "samples_per_prompt": N, **(workload or {})},
            "costs": costs or {}, "devices": devices, "iterations": iterations, "seed": seed}


def test_devices_between_the_actor_and_verls_reward_pool_idle_as_placement():
    """8 devices, a reward pool of 2 at ranks 6-7, the actor rounded down to one instance of 4: ranks
    4-5 belong to no pool. They went unrecorded (their time 0, the device time short of 8 x the
    makespan by a quarter); they idle the whole run as `placement`, 2 of 8 devices."""
    case = _case({"kind": "colocated", "aux_devices": {"reward": 2}}, {"reward": {"kind": "model"}},
                 {"instance_devices": 4, "train_group_devices": 2})
    sc, costs, rec, tl, sm, s = simulate(case)
    assert {name: (p.start, p.count) for name, p in rec.pools.items()} == {"actor": (0, 4), "aux-reward": (6, 2)}
    assert np.allclose(metrics.per_device_time(tl, 8), rec.makespan_s, rtol=1e-12)
    assert math.isclose(s["bubbles_by_cause"]["placement"], 2 / 8, rel_tol=1e-12)
    unused = tl[tl["pool"] == "unused"]
    assert unused[["rank_start", "rank_count"]].values.tolist() == [[4, 2]]


@pytest.mark.parametrize("schedule", [{"kind": "stalesync", "stream_threshold": 1.0},
                                      {"kind": "stalesync", "placement": "disaggregated"},
                                      {"kind": "async"}, {"kind": "one-step-off"}])
def test_overprovision_beside_partial_rollouts_is_refused_when_the_scenario_loads(schedule):
    """Over-provisioning's cut applied to each length_budget segment: it aborted sequences only at
    their budget (colocated StaleSync, seed 4058: a round short of its batch, an internal
    AssertionError) or aborted none (async: 117 generated, none dropped as overprovision: the knob
    unread). The two are refused together, naming overprovision and the fix."""
    case = _case({**schedule, "overprovision": 0.25, "partial_rollout": True, "length_budget": 50}, seed=4058,
                 costs={"instance_devices": 4, "prefill_s_per_token": 1e-5})
    with pytest.raises(RlsimError, match="overprovision cannot apply with partial_rollout") as err:
        load(case)
    assert err.value.field == "schedule.overprovision" and "remove schedule.overprovision" in err.value.fix


def test_hybrid_rollout_on_a_trainer_without_a_whole_rollout_instance_is_refused():
    """verl-separate-async, 8 devices, instances of 4, rollout_devices 6: the rollout pool rounds to
    one instance (ranks 0-3), the trainer gets ranks 4-5, which hold no instance of 4. hybrid_rollout
    lent them anyway: nothing generated on them, they idled as `placement` while lent, each step paid
    the switch back (0.1 s) for nothing, and the critical path carried that wait under a cause its
    step's s_by_cause left out (3.12 s of a 5.12 s step). Refused as dynamic_resources is on
    verl-fully-async, naming the knob and the fix."""
    case = _case({"kind": "verl-separate-async", "hybrid_rollout": {}, "rollout_devices": 6}, seed=286,
                 costs={"instance_devices": 4, "train_group_devices": 1, "switch_s": 0.1})
    refusals: list[str] = []
    assert simulate(case, on_refusal=refusals.append) is None
    assert "field 'schedule.hybrid_rollout'" in refusals[0] and "no rollout instance of 4" in refusals[0]
    case["schedule"]["rollout_devices"] = 4    # the trainer's 4 devices: one instance to lend
    assert simulate(case) is not None


def test_a_failure_mid_step_makes_the_aux_pools_wait_lost_too():
    """Colocated StaleSync, fuse: actor (an aux pool of 1 device, rank 7), dynamic sampling, devices
    2-3 failing at 0.5 s inside step 0: the actor's record up to the failure became `lost`, but the
    aux pool's wait for the batch, not yet written, was skipped when its clock jumped to the failure:
    rank 7 short by 0.5 s of the makespan. It is lost as the actor's is."""
    case = _case({"kind": "stalesync", "fuse": "actor", "failures": [{"at_s": 0.5, "fail": "devices:2-3"}]},
                 {"dynamic_sampling": {"keep_fraction": 1.0, "gen_prompts": 4, "max_gen_batches": 8}}, seed=9999)
    sc, costs, rec, tl, sm, s = simulate(case)
    assert rec.pools["aux"].start == 7 and rec.pools["aux"].count == 1
    assert np.allclose(metrics.per_device_time(tl, 8), rec.makespan_s, rtol=1e-12)
    lost = tl[(tl["state"] == "lost") & (tl["pool"] == "aux")]
    assert lost[["start", "end"]].values.tolist() == [[0.0, 0.5]]


def test_an_instance_spanning_two_survivor_ranges_is_recorded_generating():
    """Colocated StaleSync on 8 devices, instances of 4, devices 2-3 failing at 8 s: the survivors
    0-1 and 4-5 hold one instance of 4 (the runner deals ranks[0:4] = 0, 1, 4, 5), which generated
    step 1's round; the record filled each range with instances of its own, found none in 2 ranks and
    wrote both as `placement` idle through the round (128.2 - 130.288 s), so the critical path held
    2.09 s of placement and no generation. Each range now records its part of the instance."""
    case = _case({"kind": "stalesync", "failures": [{"at_s": 8.0, "fail": "devices:2-3"}]},
                 {"dynamic_sampling": {"keep_fraction": 0.4, "gen_prompts": 8, "max_gen_batches": 8}},
                 {"instance_devices": 4}, seed=5427)
    sc, costs, rec, tl, sm, s = simulate(case)
    after = tl[(tl["iteration"] == 1) & (tl["start"] >= rec.failures[0]["at_s"]) & (tl["state"] != "failed")]
    assert not (after["cause"] == "placement").any()
    generating = after[after["state"] == "generate"]
    assert sorted(set(zip(generating["rank_start"], generating["rank_count"], strict=True))) == [(0, 2), (4, 2)]
    step = s["critical_path"]["steps"][1]
    assert "placement" not in step["s_by_cause"] and step["s_by_cause"]["generate"] > 0
