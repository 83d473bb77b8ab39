"""Scenario schema: defaults, presets, overrides and error messages."""
import pytest

from simulator.errors import RlsimError
from simulator.presets import preset_names
from simulator.scenario import load_scenario

REQUIRED = {"grpo-qwen2.5-7b", "dapo-qwen2.5-32b", "grpo-qwen3-30b-a3b", "ppo-llama3.1-70b",
            "grpo-deepseek-v3", "grpo-pangu-ultra-moe"}


def test_default_is_the_seed_scenario():
    sc = load_scenario()
    assert sc.workload.name == "grpo-pangu-ultra-moe"
    assert sc.topology["preset"] == "cloudmatrix384"
    assert sc.schedule.kind == "stalesync"


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_required_preset_loads(name):
    assert name in preset_names("workloads")
    sc = load_scenario(workload=name)
    assert sc.workload.batch_samples > 0


def test_override_merges_into_a_preset_workload():
    sc = load_scenario(overrides=["workload.response_length.max=4096", "schedule.staleness=2"])
    assert sc.workload.response_length["max"] == 4096
    assert sc.workload.response_length["median"] == 2048      # the rest of the preset survives
    assert sc.schedule.effective_staleness == 2


def test_negative_staleness_names_the_field():
    with pytest.raises(RlsimError) as exc:
        load_scenario(overrides=["schedule.staleness=-1"])
    assert "schedule.staleness" in str(exc.value)


def test_unknown_schedule_and_keys_are_rejected():
    with pytest.raises(RlsimError, match="schedule.kind"):
        load_scenario(schedule="sometimes")
    with pytest.raises(RlsimError, match="schedule.stalenes"):
        load_scenario(overrides=["schedule.stalenes=1"])


def test_mini_batch_must_divide_the_step():
    with pytest.raises(RlsimError, match="mini_batch_prompts"):
        load_scenario(overrides=["workload.mini_batch_prompts=100"])


def test_snapshot_round_trips():
    sc = load_scenario(schedule={"kind": "async", "partial_rollout": True, "length_budget": 2048})
    again = load_scenario(sc.to_dict())
    assert again.to_dict() == sc.to_dict()


def test_dapo_preset_keeps_its_dynamic_sampling_and_units_parse():
    sc = load_scenario(workload="dapo-qwen2.5-32b", overrides=["schedule.distqueue.bw_Bps=10GB/s"])
    assert sc.workload.dynamic_sampling is not None     # set explicitly in the preset
    assert sc.workload.reference is False
    assert sc.schedule.distqueue.bw_Bps == 10e9


BARE = {"model": "qwen2.5-7b", "prompts_per_step": 8, "samples_per_prompt": 2}


def test_dynamic_sampling_of_single_sample_groups_is_refused():
    """A group of one sample has no reward spread to filter on (verl's filter keeps it): refused,
    where groups of two load."""
    with pytest.raises(RlsimError, match="no reward spread") as err:
        load_scenario(workload={**BARE, "samples_per_prompt": 1, "dynamic_sampling": {}})
    assert err.value.field == "workload.dynamic_sampling"
    assert load_scenario(workload={**BARE, "dynamic_sampling": {}}).workload.dynamic_sampling is not None


def test_dapo_means_no_reference_and_no_dynamic_sampling_unless_asked():
    dapo = load_scenario(workload={**BARE, "algorithm": "dapo"}).workload
    assert (dapo.reference, dapo.dynamic_sampling) == (False, None)
    asked = load_scenario(workload={**BARE, "algorithm": "dapo", "reference": True, "dynamic_sampling": {}}).workload
    assert asked.reference is True and asked.dynamic_sampling.keep_fraction == 0.5
    for algorithm in ("grpo", "ppo"):
        assert load_scenario(workload={**BARE, "algorithm": algorithm}).workload.reference is True
    grpo_ds = load_scenario(workload={**BARE, "dynamic_sampling": {"keep_fraction": 0.7}}).workload
    assert grpo_ds.dynamic_sampling.keep_fraction == 0.7   # the switch works for any algorithm


def test_resolved_reference_survives_a_round_trip():
    sc = load_scenario(workload={**BARE, "algorithm": "dapo"})
    again = load_scenario(sc.to_dict())
    assert again.workload.reference is False and again.to_dict() == sc.to_dict()


def test_policy_defaults_per_kind():
    assert load_scenario(schedule="colocated").schedule.effective_staleness == 0
    assert load_scenario(schedule="one-step-off").schedule.effective_staleness == 1
    ss = load_scenario(schedule="stalesync").schedule
    assert (ss.effective_placement, ss.effective_threshold) == ("colocated", 0.5)
    with pytest.raises(RlsimError, match="placement"):
        load_scenario(schedule={"kind": "colocated", "placement": "disaggregated"})



@pytest.mark.parametrize("workload", ["grpo-qwen2.5-7b", {"preset": "grpo-qwen2.5-7b", "name": "mine"}])
def test_each_preset_file_is_read_once_per_load(monkeypatch, workload):
    from simulator import presets
    read: list[str] = []
    real = presets.read_text
    monkeypatch.setattr(presets, "read_text", lambda path, **kw: read.append(str(path)) or real(path, **kw))
    load_scenario(workload=workload)
    assert len(read) == 1 and read[0].endswith("grpo-qwen2.5-7b.yaml")


def test_a_shared_reward_pool_is_one_rule_of_two():
    pooled = load_scenario(workload={**BARE, "reward": {"workers": 8}}).workload.reward
    assert (pooled.workers, pooled.workers_per_device) == (8, 1.0)
    with pytest.raises(RlsimError, match="workers_per_device, not both"):
        load_scenario(workload={**BARE, "reward": {"workers": 8, "workers_per_device": 2}})
    with pytest.raises(RlsimError, match="applies to rule rewards"):
        load_scenario(workload={**BARE, "reward": {"kind": "model", "workers": 8}})
    # what the workers are handed; a snapshot leaves it out unless given
    scored = load_scenario(workload={**BARE, "reward": {"workers": 8, "handover": "sample"}})
    assert scored.workload.reward.handover == "sample"
    assert load_scenario(scored.to_dict()).workload.reward.handover == "sample"   # a snapshot reloads
    assert "handover" not in load_scenario(workload={**BARE, "reward": {"workers": 8}}).to_dict()["workload"]["reward"]
    own = load_scenario(workload={**BARE, "reward": {"handover": "sample"}})    # each instance's own workers
    assert own.workload.reward.handover_of(own.schedule) == "sample"
    for kind, handover in (("colocated", "batch"), ("one-step-off", "batch"), ("stalesync", "sample"),
                           ("areal", "sample"), ("nemo-rl-async", "batch"),
                           ({"kind": "nemo-rl-async", "async_engine": True}, "sample")):   # does the rollout stream?
        default = load_scenario(workload=BARE, schedule=kind)
        assert default.workload.reward.handover_of(default.schedule) == handover
    with pytest.raises(RlsimError, match="workload.reward.*handover applies to rule rewards"):
        load_scenario(workload={**BARE, "reward": {"kind": "model", "handover": "sample"}})


def test_tail_consolidation_is_not_a_knob():
    # it was accepted by every kind and read by nothing (StaleSync's consolidation is consolidate_share)
    with pytest.raises(RlsimError) as err:
        load_scenario(overrides=["schedule.tail_consolidation=true"])
    assert err.value.field == "schedule.tail_consolidation"


def test_switching_a_presets_length_law_drops_the_keys_the_new_law_does_not_read(tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("length\n100\n300\n")
    sc = load_scenario(workload="grpo-qwen2.5-7b", overrides=[
        "workload.response_length.dist=empirical", f"workload.response_length.file={lengths}"])
    law = sc.workload.response_length
    assert law["dist"] == "empirical" and "median" not in law and "sigma" not in law
    assert law["max"] == load_scenario(workload="grpo-qwen2.5-7b").workload.response_length["max"]   # the cap stays


@pytest.mark.parametrize("key", ["compute.gemm_ramp_dim=-16", "compute.flash_efficiency_ratio=0",
                                 "compute.activation_bytes=-2", "memory.weight_bytes_per_param=-2",
                                 "memory.hbm_usable_fraction=1.84", "comm.optimizer_traffic_bytes_per_param=-30"])
def test_trainer_constants_outside_their_range_are_errors(key):
    with pytest.raises(RlsimError) as err:
        load_scenario(overrides=[f"workload.train_params.{key}"])
    assert err.value.field == f"workload.train_params.{key.split('=')[0]}"


# --- keys the workload's other settings make inapplicable: refused naming the field and the fix ---

@pytest.mark.parametrize("reward, field, says", [
    ({"model": "llama3.1-70b"}, "workload.reward.model", "remove reward.model, or set reward.kind: model"),
    ({"kind": "model", "cpu_s_per_sample": 0.5}, "workload.reward.cpu_s_per_sample",
     "remove reward.cpu_s_per_sample, or set reward.kind: rule"),
    ({"kind": "model", "workers_per_device": 4}, "workload.reward.workers_per_device",
     "remove reward.workers_per_device, or set reward.kind: rule"),
])
def test_a_reward_key_of_the_other_kind_is_refused(reward, field, says):
    """RewardSpec: the reward model is read for kind: model only, the rule verifier's constants for
    kind: rule only (rl/algorithms.py: a rule reward is a host stage, a model reward a forward)."""
    with pytest.raises(RlsimError) as err:
        load_scenario(workload={**BARE, "reward": reward})
    assert err.value.field == field and says in str(err.value)


def test_reward_keys_at_their_defaults_pass_under_either_kind():
    # the presets give the rule reward at its defaults: switching them to a reward model loads
    model = load_scenario(workload="grpo-qwen2.5-7b", overrides=["workload.reward.kind=model"])
    assert model.workload.reward.kind == "model" and load_scenario(model.to_dict()).workload.reward == model.workload.reward
    assert load_scenario(workload={**BARE, "reward": {"kind": "rule", "model": None}}).workload.reward.model is None
    ppo = load_scenario(workload="ppo-llama3.1-70b").workload.reward
    assert (ppo.kind, ppo.model) == ("model", "llama3.1-70b")


@pytest.mark.parametrize("algorithm", ["grpo", "dapo"])
def test_a_critic_model_without_ppo_is_refused(algorithm):
    with pytest.raises(RlsimError) as err:
        load_scenario(workload={**BARE, "algorithm": algorithm, "critic_model": "qwen2.5-7b"})
    assert err.value.field == "workload.critic_model"
    assert f"{algorithm} has no critic" in str(err.value) and "or set algorithm: ppo" in str(err.value)
    assert load_scenario(workload={**BARE, "algorithm": "ppo", "critic_model": "qwen2.5-7b"}).workload.critic_model


@pytest.mark.parametrize("workload, says", [({**BARE, "reference": False}, "workload.reference is false"),
                                            ({**BARE, "algorithm": "dapo"}, "dapo's default")])
def test_reference_swap_copies_without_a_reference_pass_are_refused(workload, says):
    with pytest.raises(RlsimError) as err:
        load_scenario(workload=workload, schedule={"kind": "colocated", "reference_swap_copies": 3})
    assert err.value.field == "schedule.reference_swap_copies" and says in str(err.value)
    assert "set workload.reference: true" in err.value.fix
    # at the default (0) it passes; with the reference kept (dapo + reference: true, NeMo RL's V6 rows) it applies
    load_scenario(workload=workload, schedule={"kind": "colocated", "reference_swap_copies": 0})
    kept = load_scenario(workload={**workload, "reference": True}, schedule={"kind": "colocated", "reference_swap_copies": 3})
    assert kept.schedule.reference_swap_copies == 3 and load_scenario(kept.to_dict()).schedule == kept.schedule


def test_an_unknown_top_level_key_names_its_section_or_the_file_it_belongs_to():
    with pytest.raises(RlsimError) as info:
        load_scenario({"prompts_per_step": 8})
    assert info.value.field == "prompts_per_step" and info.value.fix == "write workload.prompts_per_step"
    # a topology file where a scenario goes: "write workload.name" sent the user the wrong way (fuzzing)
    with pytest.raises(RlsimError) as info:
        load_scenario(str(__import__("pathlib").Path(__file__).resolve().parents[1] / "topologies" / "dgx-h100.yaml"))
    assert "give it as --topology FILE" in info.value.fix
    # and a workload file where a scenario, a topology goes, a topology file as the workload: "write
    # workload.description", "unknown field 'model'", 11 schema errors (found by a new-user trial)
    from simulator.hardware.topology import load_topology
    root = __import__("pathlib").Path(__file__).resolve().parents[1]
    for load in (load_scenario, load_topology):
        with pytest.raises(RlsimError) as info:
            load(str(root / "workloads" / "grpo-qwen2.5-7b.yaml"))
        assert "this is a workload file" in info.value.fix and "--workload FILE" in info.value.fix
    with pytest.raises(RlsimError, match="this is a topology file, not a workload") as info:
        load_scenario({"workload": str(root / "topologies" / "dgx-h100.yaml")})
    assert "--topology FILE" in info.value.fix


def test_a_top_level_key_one_typo_from_a_section_names_it_and_the_rename():
    """A misspelt section (`topologi:`, `workloads:`) said "unknown scenario key" and listed every key,
    where a misspelt key of a section names the one meant and the rename (errors.py's fold, a review
    2026-12-08); a key that is no typo keeps the list."""
    with pytest.raises(RlsimError) as info:
        load_scenario({"topologi": "dgx-h100", "workload": "grpo-qwen2.5-7b"})
    assert info.value.message == "unknown scenario key 'topologi'; did you mean 'topology'?"
    assert info.value.field == "topologi" and info.value.fix == "rename topologi to topology"
    with pytest.raises(RlsimError) as info:
        load_scenario({"topology": "dgx-h100", "workloads": "grpo-qwen2.5-7b"})
    assert info.value.fix == "rename workloads to workload"
    with pytest.raises(RlsimError) as info:
        load_scenario({"foo": 1})
    assert info.value.message == "unknown scenario key 'foo'" and info.value.fix.startswith("use one of: ")


def test_a_workload_key_written_beside_a_preset_is_blamed_on_its_file(tmp_path):
    # the preset file was named for the user's own `ppo_epochs: 0` (found by fuzzing)
    path = tmp_path / "mine.yaml"
    path.write_text("workload: {preset: grpo-qwen2.5-7b, ppo_epochs: 0}\n")
    with pytest.raises(RlsimError) as info:
        load_scenario(str(path))
    assert info.value.source == str(path) and info.value.field == "workload.ppo_epochs"
    with pytest.raises(RlsimError) as info:
        load_scenario(str(path), overrides=["workload.ppo_epochs=1", "workload.response_length.max=1k"])
    assert info.value.source == str(path) and info.value.field == "workload.response_length.max"


@pytest.mark.parametrize("value", ["1k", "[1]", "{a: 1}", ".nan", "true"])
def test_a_length_laws_number_that_is_not_one_is_refused_when_the_scenario_loads(value):
    # the planner and the costs read the law's caps before the run built the law: tracebacks (fuzzing)
    with pytest.raises(RlsimError, match="expected a finite number") as info:
        load_scenario({"workload": "grpo-qwen2.5-7b"}, overrides=[f"workload.response_length.max={value}"])
    assert info.value.field == "workload.response_length.max"


def test_the_reference_knob_table_says_which_kinds_take_each_knob():
    """docs/scenario-reference.md's knob x kind table against each kind's accepts(): a knob marked
    for a kind that refuses it, or a kind missing from the table, is a wrong reference."""
    from pathlib import Path

    from simulator.scenario import BUILTIN_SCHEDULE_KINDS, SCHEDULE_CLASSES

    text = (Path(__file__).resolve().parents[1] / "docs" / "scenario-reference.md").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("| knob | colocated |")]
    assert len(lines) == 1
    start = text.splitlines().index(lines[0])
    table = []
    for line in text.splitlines()[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split("|")])
    header, rows = table[0], table[2:]
    columns = {"stalesync (colocated placement)": ("stalesync", None),
               "stalesync (`placement: disaggregated`)": ("stalesync", "disaggregated")}
    kinds = [columns.get(title, (title, None)) for title in header[1:]]
    assert {kind for kind, _ in kinds} == set(BUILTIN_SCHEDULE_KINDS)
    for knobs, *marks in rows:
        for knob in (k.strip().split(".")[0] for k in knobs.split(",")):
            for (kind, placement), mark in zip(kinds, marks, strict=True):
                cls = SCHEDULE_CLASSES[kind]
                taken = cls.accepts(placement) if kind == "stalesync" else cls.accepts()
                assert (knob in taken) == (mark == "yes"), (knob, kind, placement, mark)


def test_relative_paths_are_read_next_to_the_file_that_names_them(tmp_path, monkeypatch):
    """A scenario's topology / workload files and a workload's model config are read from its own
    folder, not the working folder (where another topo.yaml was taken without a word)."""
    import json

    from simulator.scenario import load_scenario
    here = tmp_path / "exp"
    (here / "m").mkdir(parents=True)
    (here / "topo.yaml").write_text("preset: dgx-h100\nnodes: 2\n")
    config = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "hidden_act": "silu"}
    (here / "m" / "config.json").write_text(json.dumps(config))
    (here / "wl.yaml").write_text("model: m\nprompts_per_step: 8\nsamples_per_prompt: 4\n")
    (here / "sc.yaml").write_text("topology: topo.yaml\nworkload: wl.yaml\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "topo.yaml").write_text("preset: dgx-h100\nnodes: 1\n")
    monkeypatch.chdir(elsewhere)
    sc = load_scenario(here / "sc.yaml")
    assert sc.topology["preset"] == str((here / "topo.yaml").resolve())
    assert sc.workload.model == str((here / "m").resolve())
    # a path given on the command line stays the working folder's
    assert load_scenario(here / "sc.yaml", overrides=["topology=topo.yaml"]).topology["preset"] == "topo.yaml"


def test_a_workload_mapping_without_a_preset_or_its_required_keys_says_to_name_a_preset():
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario
    with pytest.raises(RlsimError, match="names no preset to take them from") as caught:
        load_scenario({"workload": {"response_length": {"dist": "lognormal", "median": 800, "sigma": 1.0}}})
    assert caught.value.field == "workload.model" and "workload.preset: NAME" in caught.value.fix
    assert load_scenario({"workload": {"preset": "grpo-qwen2.5-7b", "prompts_per_step": 256}}).workload.prompts_per_step == 256


def test_a_misspelt_required_key_is_named_as_the_typo_it_is():
    """`samples_per_promt: 8` said the workload gave no samples_per_prompt and to name a preset (a user
    trial): the typo was the cause. Now every field error is listed, the typo with what it is one
    letter from."""
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario
    workload = {"model": "llama3.1-8b", "prompts_per_step": 64, "samples_per_promt": 8}
    with pytest.raises(RlsimError) as caught:
        load_scenario({"topology": "dgx-h100", "workload": workload})
    assert "workload.samples_per_promt" in caught.value.fields
    assert "did you mean 'samples_per_prompt'?" in caught.value.message
    assert "names no preset" not in caught.value.message


def test_a_misspelt_required_key_is_one_error_with_the_rename_as_its_fix():
    """An audit (2026-12-07): the typo also listed 'workload.samples_per_prompt: Field required' as a
    second error, and two errors took the generic fix (see docs/...). The required key the typo is one
    letter from is the typo's doing: one error, the typo's field, the rename as the fix."""
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario
    workload = {"model": "llama3.1-8b", "prompts_per_step": 64, "samples_per_promt": 8}
    with pytest.raises(RlsimError) as caught:
        load_scenario({"topology": "dgx-h100", "workload": workload})
    assert caught.value.fields == ["workload.samples_per_promt"]
    assert "Field required" not in str(caught.value) and "errors" not in caught.value.message
    assert caught.value.fix == "rename workload.samples_per_promt to workload.samples_per_prompt"
    # a required key left out beside the typo of another stays its own error
    workload = {"model": "llama3.1-8b", "samples_per_promt": 8}
    with pytest.raises(RlsimError) as caught:
        load_scenario({"topology": "dgx-h100", "workload": workload})
    assert set(caught.value.fields) == {"workload.prompts_per_step", "workload.samples_per_promt"}


def test_a_misspelt_required_key_with_a_dot_in_it_is_folded_at_its_own_level():
    """A YAML key written with a dot (``samples.per_prompt: 8``, as --set spells a path) is one key of
    the workload, one typo from samples_per_prompt: the fold took the missing key's path from the typo's
    dotted path split at its last dot (workload.samples.samples_per_prompt) and left two errors and the
    generic fix (a review, 2026-12-08)."""
    from simulator.errors import RlsimError
    from simulator.scenario import load_scenario
    workload = {"model": "llama3.1-8b", "prompts_per_step": 64, "samples.per_prompt": 8}
    with pytest.raises(RlsimError) as caught:
        load_scenario({"topology": "dgx-h100", "workload": workload})
    assert caught.value.fields == ["workload.samples.per_prompt"]
    assert caught.value.fix == "rename workload.samples.per_prompt to workload.samples_per_prompt"


def test_a_misspelt_required_top_level_key_is_folded_too():
    """validation_error without a prefix (a model's own top-level keys): a required key written one typo
    off was left a second 'Field required' (the fold only knew the missing keys of a section)."""
    from pydantic import BaseModel, ConfigDict, ValidationError

    from simulator.errors import validation_error

    class Section(BaseModel):
        model_config = ConfigDict(extra="forbid")
        prompts: int

    try:
        Section.model_validate({"promts": 8})
    except ValidationError as exc:
        error = validation_error(exc, model=Section)
    assert error.field == "promts" and error.fix == "rename promts to prompts"
    assert "Field required" not in str(error)


def test_a_mini_batch_that_does_not_divide_the_step_names_its_field_and_a_divisor():
    """The error named field 'workload' and the generic fix (an idle-time trial)."""
    with pytest.raises(RlsimError) as caught:
        load_scenario(None, workload="grpo-qwen2.5-7b", overrides=["workload.prompts_per_step=64"])
    assert caught.value.field == "workload.mini_batch_prompts"
    assert "divisor of 64, e.g. 64, 32, 16" in caught.value.fix


@pytest.mark.parametrize(("yaml_text", "field", "says"), [
    ("topology: [dgx-h100]\nworkload: grpo-qwen2.5-7b\n", "topology", "got list"),
    ("topology: dgx-h100\nworkload: 3\n", "workload", "got int"),
    ("topology: dgx-h100\nworkload: nonsense\n", "workload", "unknown workload preset 'nonsense'"),
])
def test_a_section_of_the_wrong_type_or_an_unknown_workload_preset_names_the_file_and_a_fix(
        tmp_path, yaml_text, field, says):
    """A list where the topology mapping goes, a number for the workload said neither the scenario file
    nor a fix; an unknown workload preset did not name the file (an unknown topology preset did)."""
    path = tmp_path / "sc.yaml"
    path.write_text(yaml_text)
    with pytest.raises(RlsimError, match=says) as caught:
        load_scenario(path)
    assert caught.value.source == str(path) and caught.value.field == field and caught.value.fix
    with pytest.raises(RlsimError) as caught:
        load_scenario(None, workload="nonsense")
    assert caught.value.source == "<default scenario, workload nonsense>"
