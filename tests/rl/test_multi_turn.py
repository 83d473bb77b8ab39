"""workload.multi_turn in runs: one turn is the single-turn run, tool calls lengthen generation, prefix
caching spares the re-prefill, and the kinds that cannot run turns refuse them by name."""
import json

import pytest

import simulator
from simulator.errors import RlsimError

SMALL = dict(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 1}, iterations=2,
             overrides=["workload.prompts_per_step=32", "workload.samples_per_prompt=4",
                        "workload.mini_batch_prompts=16", "workload.train_layout.tp=2"])


def _turns(max_turns: int, latency: float, observation: float = 0, **more: str) -> list[str]:
    extra = [f"workload.multi_turn.{key}={value}" for key, value in more.items()]
    return [f"workload.multi_turn.max_turns={max_turns}", f"workload.multi_turn.tool_latency_s={latency}",
            f"workload.multi_turn.observation_tokens={observation}", *extra]


def _run(*overrides: str, schedule: str = "colocated") -> dict:
    small = {**SMALL, "overrides": SMALL["overrides"] + list(overrides)}
    return simulator.simulate(schedule=schedule, keep_samples=False, **small).summary


def test_one_turn_is_the_single_turn_run():
    plain = _run()
    assert json.dumps(_run(*_turns(1, 30.0, 500)), sort_keys=True) == json.dumps(plain, sort_keys=True)


@pytest.mark.parametrize("schedule", ["colocated", "one-step-off"])
def test_tool_calls_lengthen_generation_by_at_least_their_chain(schedule):
    # every sample takes 3 turns: two 60 s tool calls in each chain, so generation outlasts them; all
    # start together and wait alike, so the engine idles through the calls (lock-step): about their sum
    def generate(latency: float) -> float:
        return _run(*_turns(3, latency, 100), schedule=schedule)["stage_time_s"]["generate"]
    instant, slow = generate(0.0), generate(60.0)
    assert slow > 120.0 and slow > instant
    assert slow == pytest.approx(instant + 120.0, rel=0.05)


def test_an_engine_waiting_on_its_samples_tools_idles_as_tool_wait():
    # all samples start together and call 60 s tools after their first and second turns: the engine
    # idles while they are out, which the timeline records as tool_wait (device time still tiles the
    # run) and the critical path carries
    small = {**SMALL, "overrides": SMALL["overrides"] + _turns(3, 60.0, 100)}
    result = simulator.simulate(schedule="colocated", **small)
    summary, timeline = result.summary, result.timeline
    waits = timeline[timeline["cause"] == "tool_wait"]
    assert (waits["state"] == "idle").all() and len(waits)
    device_s = ((timeline["end"] - timeline["start"]) * timeline["rank_count"]).sum()
    assert device_s == pytest.approx(summary["devices"] * summary["makespan_s"], rel=1e-9)
    assert summary["bubbles_by_cause"]["tool_wait"] > 0.3
    assert summary["critical_path"]["share"]["tool_wait"] > 0.2
    assert _run()["bubbles_by_cause"]["tool_wait"] == 0.0


def test_lockstep_turns_wait_for_the_batch():
    # NeMo RL's synchronous multi-turn loop: each turn ends on the slowest instance and the slowest
    # tool; the instances that finish a turn early wait (long_tail), then all wait on the tools
    turns = _turns(3, 5.0, 100, tool_latency_sigma=1.0)
    small = {**SMALL, "overrides": SMALL["overrides"] + turns + ["workload.multi_turn.lockstep=true"]}
    result = simulator.simulate(schedule="colocated", **small)
    timeline, summary = result.timeline, result.summary
    device_s = ((timeline["end"] - timeline["start"]) * timeline["rank_count"]).sum()
    assert device_s == pytest.approx(summary["devices"] * summary["makespan_s"], rel=1e-9)
    assert summary["bubbles_by_cause"]["tool_wait"] > 0
    free = _run(*turns)
    assert summary["stage_time_s"]["generate"] > free["stage_time_s"]["generate"]
    assert summary["bubbles_by_cause"]["long_tail"] > free["bubbles_by_cause"]["long_tail"]


def test_prefix_caching_spares_the_re_prefill_of_the_earlier_turns():
    cached = _run(*_turns(4, 1.0, 800))["stage_time_s"]["generate"]
    recomputed = _run(*_turns(4, 1.0, 800), "workload.inference.enable_prefix_caching=false")
    assert recomputed["stage_time_s"]["generate"] > cached


def test_a_tight_kv_pool_evicts_contexts_out_on_their_tools_and_a_roomy_one_changes_nothing():
    # workload.multi_turn.cache_eviction reaches the engines: in a pool of ~30k tokens an instance's
    # 16 samples of long contexts evict each other's while out on their tools (their turns re-prefill
    # what went: longer generation); with the default pool every context stays, the same bytes
    tight = "workload.rollout_layout.gpu_memory_utilization=0.21"
    def generate(cache_eviction: str) -> float:
        return _run(*_turns(4, 2.0, 300, cache_eviction=cache_eviction), tight)["stage_time_s"]["generate"]
    assert generate("true") > generate("false")
    roomy = [json.dumps(_run(*_turns(4, 2.0, 300, cache_eviction=value)), sort_keys=True) for value in ("true", "false")]
    assert roomy[0] == roomy[1]


def test_the_summary_counts_the_evicted_contexts_and_their_re_prefill():
    # the tight pool above: contexts out on their tools are kept evictable (retained), some evicted,
    # and the returning turns prefill evicted tokens again; with cache_eviction false nothing is kept
    # evictable (every context stays: 0 each), and the turns prefill fewer tokens in all
    tight = "workload.rollout_layout.gpu_memory_utilization=0.21"
    evicting, kept = (_run(*_turns(4, 2.0, 300, cache_eviction=value), tight)["rollout"] for value in ("true", "false"))
    assert evicting["eviction_reprefill_tokens"] > 0
    assert evicting["retained_context_tokens"] >= evicting["evicted_context_tokens"] >= evicting["eviction_reprefill_tokens"]
    assert kept["retained_context_tokens"] == kept["evicted_context_tokens"] == kept["eviction_reprefill_tokens"] == 0
    assert evicting["prefilled_tokens"] > kept["prefilled_tokens"]


def test_cache_eviction_without_a_prefix_cache_is_refused_by_name():
    with pytest.raises(RlsimError) as refused:
        _run(*_turns(4, 2.0, 300, cache_eviction="false"), "workload.inference.enable_prefix_caching=false")
    assert "workload.multi_turn.cache_eviction" in str(refused.value)
    assert "enable_prefix_caching" in str(refused.value)


def test_the_same_input_gives_the_same_bytes():
    turns = _turns(4, 2.0, 300, mean_turns=2.5, tool_latency_sigma=1.0, observation_sigma=0.5)
    assert json.dumps(_run(*turns), sort_keys=True) == json.dumps(_run(*turns), sort_keys=True)


@pytest.mark.parametrize("schedule", ["areal", "verl-fully-async", "verl-sync", "verl-colocate-async"])
def test_request_fed_kinds_run_each_trajectorys_turns_through_their_servers(schedule):
    # AReaL's and verl's fully async agent loops: a trajectory's turns go to its server one by one and
    # a weight sync cuts them; with 30 s tools the engines idle (tool_wait), every sample is generated
    # once and each step trains its batch (two nodes: AReaL's 4 training devices of one cannot hold the
    # actor's update beside the resident reference's weights)
    two_nodes = "topology.nodes=2"
    small = {**SMALL, "iterations": 3, "overrides": [*SMALL["overrides"], two_nodes, *_turns(3, 30.0, 100)]}
    result = simulator.simulate(schedule=schedule, **small)
    summary, timeline, samples = result.summary, result.timeline, result.samples
    assert summary["bubbles_by_cause"]["tool_wait"] > 0.02
    device_s = ((timeline["end"] - timeline["start"]) * timeline["rank_count"]).sum()
    assert device_s == pytest.approx(summary["devices"] * summary["makespan_s"], rel=1e-9)
    single = _run(two_nodes, schedule=schedule)
    assert samples["sample"].is_unique
    assert summary["samples"]["trained_per_step"] == single["samples"]["trained_per_step"]
    if schedule in ("areal", "verl-fully-async"):   # (the v1 kinds carry cut trajectories into later steps)
        assert summary["steady_step_time_s"] > single["steady_step_time_s"] + 2 * 30.0 * 0.5


@pytest.mark.parametrize("schedule, knobs", [
    ("areal", ["workload.multi_turn.lockstep=true"]),
    ("verl-fully-async", ["workload.multi_turn.lockstep=true"]),
])
def test_kinds_that_cannot_take_lockstep_turns_refuse_them_by_name(schedule, knobs):
    with pytest.raises(RlsimError) as refused:
        _run(*_turns(2, 1.0), *knobs, schedule=schedule)
    assert refused.value.field == "workload.multi_turn"
    assert "colocated" in refused.value.fix and "areal" in refused.value.fix


@pytest.mark.parametrize("schedule, knobs, field, undo", [
    ("stalesync", [], "schedule.stream_threshold", "set schedule.stream_threshold: 1"),   # its default 0.5
    ("colocated", ["schedule.overprovision=0.2"], "schedule.overprovision", "set schedule.overprovision: 0"),
    ("disaggregated", ["schedule.failures=[{at_s: 150, fail: 'node:0'}]"], "schedule.failures",
     "remove schedule.failures"),
])
def test_runs_that_cut_generation_refuse_turns_naming_the_knob_in_force(schedule, knobs, field, undo):
    """The refusal listed six possible knobs and named none: StaleSync's default stream_threshold,
    which the user never set, was the one (a guides trial)."""
    with pytest.raises(RlsimError) as refused:
        _run(*_turns(2, 1.0), *knobs, schedule=schedule)
    assert refused.value.field == field and "workload.multi_turn" in refused.value.related
    assert refused.value.fix.startswith(undo) and refused.value.fix.endswith("or remove workload.multi_turn")


@pytest.mark.parametrize("key, value, word", [("max_turns", 0, "greater than 0"), ("mean_turns", 5, "above max_turns"),
                                              ("tool_latency_s", -1, "greater than or equal"),
                                              ("max_turn_tokens", 100, "does not fit")])
def test_a_bad_turn_law_names_its_field(key, value, word):
    turns = {"max_turns": 4, "tool_latency_s": 1, "observation_tokens": 10, key: value}
    with pytest.raises(RlsimError) as refused:
        _run(*[f"workload.multi_turn.{k}={v}" for k, v in turns.items()])
    assert "workload.multi_turn" in str(refused.value) and word in str(refused.value)


def test_a_turn_law_without_its_tools_names_what_is_missing_and_only_that():
    # 'give observation_tokens, tool_latency_s: the turn cap, ...' listed the cap that was given
    from simulator.scenario import load_scenario
    with pytest.raises(RlsimError) as refused:
        load_scenario(None, overrides=["workload.multi_turn.max_turns=4"])
    message, fix = refused.value.message, refused.value.fix
    assert "observation_tokens, tool_latency_s not given: the tokens a tool's answer appends" in message
    assert "turn cap" not in message and "--set workload.multi_turn.max_turns" not in fix
    assert fix.startswith("give observation_tokens, tool_latency_s, e.g. --set workload.multi_turn.observation_tokens=200")
