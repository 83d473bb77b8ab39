"""SkyRL (NovaSky-AI/SkyRL) configs -> rlsim scenarios: `rlsim run --from-skyrl CONFIG [key=value ...]`.

CONFIG is a launch script (the ``key=value`` arguments of its ``python -m skyrl.train.entrypoints.main_base``
command, or of another entry point's; the script's ``NAME=value`` lines resolve ``$NAME``) or a YAML
of the same tree (SkyRLTrainConfig: data, trainer, generator, environment; the YAML SkyRL prints at
start-up); a ``key=value`` after it sets a key as SkyRL's command line does (no ``+``: SkyRL refuses
it). Key names and defaults: skyrl_rules.py. How skyrl 0.3.0 runs a step (skyrl/train/trainer.py,
fully_async_trainer.py, backends/skyrl_train/workers/worker_dispatch.py, fsdp_strategy.py,
inference_servers/remote_inference_client.py, read in its wheel):

- ``trainer.placement.colocate_all`` (the default) -> ``colocated``: the vLLM servers and every model
  share the policy's GPUs; after generating, the engines sleep (level 2: weights and KV cache
  discarded), the models' forwards run (critic, reference, policy's old log-probs), then the
  updates; at the weight sync the engines' weights wake, the weights go in tensor by tensor, the
  policy's model and optimizer go to the host (``offload_after_step``), the KV cache wakes. Models
  sharing GPUs are swapped by the dispatch: the reference's weights come in for its forward and go
  out for the policy's (``reference_swap_copies: 2``).
- ``colocate_all: false`` -> split pools, synchronous (``disaggregated``): the servers on GPUs of
  their own (num_engines x tensor x data parallel), the trainer on the policy's; with a
  reference sharing the policy's GPUs (``colocate_policy_ref``, the default) the dispatch moves the
  policy's weights and optimizer out for the reference's forward and back, the reference's in and
  out (``reference_swap_copies: 4`` of the weight shard, the optimizer as a per-update offload);
  otherwise the reference (and a critic) on GPUs of their own (``aux_devices``).
- ``trainer.fully_async.enabled`` -> ``areal``: SkyRL's staleness manager is AReaL's (groups start
  while running < num_parallel_generation_workers and accepted + running < (max_staleness_steps +
  step) x the mini-batch); the trainer takes a mini-batch of finished groups, trains one step and
  syncs the weights with generation paused in place (the requests keep their KV cache:
  ``interrupt_keeps_kv``, unless ``clear_kv_cache_on_weight_sync``).
- The old log-prob pass is skipped for the losses trained on the rollout's log-probs (rollout_is,
  dppo) without the KL reward penalty and off-policy correction (RayPPOTrainer._skip_policy_forward).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import RlsimError
from .common import (
    FrameworkImport,
    Status,
    Values,
    begin_import,
    classify,
    in_table,
    size_topology,
    table_status,
    world_divides,
)
from .shell import note_assignment, python_command_arguments, script_lines
from .skyrl_mapping import gpus_of, mode_of, rollout_gpus, schedule_of, strategy_of, workload
from .skyrl_rules import DEFAULTS, DEFAULTS_SOURCE, MEGATRON_SIZES, RULES

_SECTIONS = ("data.", "trainer.", "generator.", "environment.")


def import_skyrl(path: str | Path, overrides: Iterable[str] = (), *, topology: str | None = None,
                 schedule: str | None = None, user_sets: Iterable[str] = ()) -> FrameworkImport:
    """A SkyRL launch script or YAML plus ``key=value`` overrides -> FrameworkImport (the placement
    and fully_async say the schedule)."""
    flat, result, v = _begin(path, list(overrides), schedule)
    _read_deprecated_aliases(v)
    user_sets = set(user_sets)
    decided: dict[str, tuple[Status, str]] = {}
    _refuse_keys_skyrl_refuses(flat, result.source, decided)
    mode = mode_of(v)
    policy_gpus, engine_gpus = gpus_of(v, "policy"), rollout_gpus(v)
    w = workload(v, policy_gpus, mode, "workload.model" in user_sets, decided)
    sched = schedule_of(v, mode, w, policy_gpus, engine_gpus, decided)
    aux = sched.get("aux_devices", {})
    total = policy_gpus if mode == "colocated" else policy_gpus + engine_gpus + sum(aux.values())
    # colocated, the job is the policy's nodes (their GPUs a node: part of a server's); split, Ray places
    # the engines and the models where GPUs are free: whole nodes
    per_node = v.count("trainer.placement.policy_num_gpus_per_node") if mode == "colocated" else None
    topo, note = size_topology(topology, total, "the policy's GPUs" + ("" if mode == "colocated" else
                               ", the engines' and any model's own"), result.source,
                               any(k.startswith("topology.") for k in user_sets), per_node)
    result.notes.append(note)
    if not any(k.startswith("topology.") for k in user_sets):
        world_divides(v, policy_gpus, w["train_layout"], [f"trainer.policy.megatron_config.{key}" for key in
                      MEGATRON_SIZES] + ["trainer.policy.sequence_parallel_size"], f"SkyRL's {strategy_of(v)} policy",
                      "trainer.placement.policy_num_gpus_per_node")
    result.scenario = {"topology": topo, "workload": w, "schedule": sched}
    classify(result, flat, RULES, decided)
    cap = ("min(max_turns x max_generate_length, max_input_length - 1 + max_generate_length) (multi-turn)"
           if "multi_turn" in w else "generator.sampling_params.max_generate_length")
    result.notes.append(f"response-length law: not in a config; rlsim's default law capped at {cap} (set --set "
                        "workload.response_length.median / .sigma to refine)")
    return result


# ---- reading --------------------------------------------------------------------------------------
# skyrl 0.3.0 SkyRLTrainConfig.from_cli_overrides (train/config/config.py:1323-1344) remaps a
# deprecated key to its new name before the strict key check, refusing both at once
DEPRECATED_ALIASES = {"trainer.use_sample_packing": "trainer.remove_microbatch_padding"}


# skyrl_train 0.3.x's flat generator keys (skyrl_train/config/ppo_base_config.yaml, read in the 0.3.1
# wheel), which skyrl 0.3.0 refuses: their 0.3.0 names under generator.inference_engine
RENAMED_IN_SKYRL_0_3_0 = {
    "generator.num_inference_engines": "generator.inference_engine.num_engines",
    **{f"generator.inference_engine_{size}": f"generator.inference_engine.{size}"
       for size in ("tensor_parallel_size", "pipeline_parallel_size", "expert_parallel_size", "data_parallel_size")},
    **{f"generator.{key}": f"generator.inference_engine.{key}" for key in (
        "model_dtype", "run_engines_locally", "backend", "weight_sync_backend", "enable_prefix_caching",
        "enable_chunked_prefill", "max_num_batched_tokens", "enforce_eager", "fully_sharded_loras",
        "gpu_memory_utilization", "max_num_seqs", "engine_init_kwargs")},
}


def _refuse_keys_skyrl_refuses(flat: dict[str, Any], source: str, decided: dict[str, tuple[Status, str]]) -> None:
    """skyrl 0.3.0 builds its config dataclasses strictly (train/config/config.py
    validate_dict_keys_against_dataclass): a key none has is an error there, and here, naming its
    0.3.0 name where skyrl_train's flat key has one. An entry of a dict field (engine_init_kwargs.x)
    is the field's."""
    for key in sorted(flat):
        if in_table(key, RULES) or key.rpartition(".")[2] == "_target_":
            continue
        parent = next((key.rsplit(".", n)[0] for n in range(1, key.count(".")) if key.rsplit(".", n)[0] in RULES),
                      None)
        if parent is not None:   # a dict-valued field (engine_init_kwargs, model_config_kwargs, ...)
            status, reason = table_status(parent, flat[key], RULES)
            decided[key] = (status, f"an entry of {parent}: {reason}")
            continue
        raise _refused(key, source)


def _refuse_renamed_items(items: Iterable[str], source: str) -> None:
    """A script's argument or a command-line override naming a skyrl_train flat key: refused naming its
    0.3.0 name, as a YAML's key is (before the override reader's error for a key no config has)."""
    for item in items:
        key = item.strip().lstrip("~").partition("=")[0].strip()
        if _renamed(key) is not None:
            raise _refused(key, source)


def _refused(key: str, source: str) -> RlsimError:
    """The error for a key skyrl 0.3.0's config lacks, naming its 0.3.0 name where it has one."""
    new = _renamed(key)
    return RlsimError(f"{key} is not a key of skyrl 0.3.0's config: SkyRL refuses it (its dataclasses are built "
                      "strictly, train/config/config.py validate_dict_keys_against_dataclass)", source=source,
                      field=key, fix=f"write it as {new} (skyrl 0.3.0's name of skyrl_train's flat key)" if new else
                      "remove it, or check the name against skyrl 0.3.0's SkyRLTrainConfig")


def _renamed(key: str) -> str | None:
    """skyrl 0.3.0's name of a skyrl_train flat key (or of an entry of its engine_init_kwargs)."""
    if key in RENAMED_IN_SKYRL_0_3_0:
        return RENAMED_IN_SKYRL_0_3_0[key]
    head, _, entry = key.rpartition(".")
    return f"{RENAMED_IN_SKYRL_0_3_0[head]}.{entry}" if head in RENAMED_IN_SKYRL_0_3_0 else None


def _read_deprecated_aliases(v: Values) -> None:
    """The values are read under the new name (the config's keys, `v.flat`'s source, stay as written)."""
    for old, new in DEPRECATED_ALIASES.items():
        if old not in v.flat:
            continue
        if new in v.flat:
            raise RlsimError(f"both {old} (deprecated) and {new} given: SkyRL refuses it", source=v.result.source,
                             field=old, fix=f"give only {new}")
        v.flat = {**v.flat, new: v.flat[old]}
        v.result.notes.append(f"{old}: SkyRL's deprecated alias of {new}, read as it")
def _begin(path: str | Path, overrides: list[str], schedule: str | None) -> tuple[dict[str, Any], FrameworkImport,
                                                                                 Values]:
    """The config as a flat dict (a YAML, or a script's arguments), SkyRL's command-line overrides on it."""
    source = str(path)
    plus = next((item for item in overrides if item.strip().startswith("+")), None)
    if plus is not None:
        raise RlsimError(f"SkyRL refuses the '+' prefix ({plus!r}): its config is a fixed dataclass tree",
                         source=source, field=plus.strip().lstrip("+").partition("=")[0],
                         fix="write key=value with one of SkyRL's keys")
    script = Path(path).suffix.lower() not in (".yaml", ".yml", ".json")
    base = read_script(path) if script else None
    _refuse_renamed_items([*(base or []), *overrides], source)
    return begin_import("skyrl", path, overrides, what="SkyRL config", rules=RULES, defaults=DEFAULTS,
                        defaults_source=DEFAULTS_SOURCE, schedule=schedule,
                        schedule_fix="set trainer.placement.colocate_all or trainer.fully_async.enabled in the config",
                        base=base, refuses="SkyRL's config (a fixed dataclass tree)")


def read_script(path: str | Path) -> list[str]:
    """The ``key=value`` arguments of the script's training command (the first command with arguments
    under data. / trainer. / generator. / environment.), its variables resolved (shell.py)."""
    source = str(path)
    variables: dict[str, str] = {}
    for line in script_lines(path, "SkyRL script", "give a shell script that runs python -m "
                             "skyrl.train.entrypoints.main_base key=value ... (or a YAML of SkyRL's config)"):
        items = _arguments(line, variables, source)
        if items:
            return items
        note_assignment(line, variables)
    raise RlsimError("no SkyRL training command in the script (no key=value argument under data. / trainer. / "
                     "generator. / environment.)", source=source,
                     fix="give a script that runs python -m skyrl.train.entrypoints.main_base trainer.... generator...."
                         " (or a YAML of SkyRL's config)")


def _arguments(line: str, variables: Mapping[str, str], source: str) -> list[str]:
    """The SkyRL key=value arguments of the line's Python command (``-m MODULE`` or ``SCRIPT.py``), up
    to the end of that command; none where the line runs no Python entry point."""
    if not any(section in line for section in _SECTIONS):
        return []
    return [token for token in python_command_arguments(line, variables, source)
            if "=" in token and token.startswith(_SECTIONS)]
