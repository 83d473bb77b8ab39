"""The parallel layout of a training job (Megatron-LM naming: TP, PP, virtual stages, DP, EP, CP, ZeRO)."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import RlsimError

RECOMPUTE_MODES = ("none", "selective", "full")
# Megatron-Core's --recompute-method under --recompute-granularity full (megatron-core 0.13.0
# transformer/transformer_block.py _checkpointed_forward): uniform checkpoints the input of each group of
# recompute_num_layers layers and rebuilds the group in its backward; block recomputes the first
# recompute_num_layers layers of each model chunk (one by one) and keeps the others' activations.
RECOMPUTE_METHODS = ("uniform", "block")
# Nesting of the `ranks` list, innermost first (Megatron-LM default, arXiv 2104.04473 sec. 3.3; the
# planner's placement.DIMS). EP groups are the innermost `ep` members of the DP dimension.
DEFAULT_ORDER = ("tp", "cp", "dp", "pp")
# The positive-integer fields that may be unset (None; "auto" / "none" in YAML).
_OPTIONAL_COUNTS = ("etp", "pp_first_stage_layers", "pp_last_stage_layers", "max_tokens_per_micro_batch",
                    "logprob_max_tokens_per_micro_batch", "zero_shard_size")


def expert_fold(tp: int, cp: int, ep: int, etp: int | None = None) -> int:
    """DP replicas whose stages form one expert group under MoE parallel folding: the fewest
    replicas whose tp x cp ranks of a stage hold etp x ep (etp: tp when unset). 1 without experts."""
    group = (tp if etp is None else etp) * ep
    return group // math.gcd(group, tp * cp)


@dataclass(frozen=True)
class TrainLayout:
    """tp x cp x dp x pp devices. Experts are placed as Megatron-Core places them ("MoE parallel
    folding", `expert_tensor_parallel_size`): inside a pipeline stage the tp x cp x dp ranks are
    re-folded into etp x ep x edp (expert TP fastest, then EP, then expert DP), so EP may exceed DP;
    `etp=None` means etp = tp (Megatron-Core's default when expert_tensor_parallel_size is unset,
    megatron/training/arguments.py), which with cp = 1 places EP groups on `ep` consecutive DP ranks.
    `pp_first_stage_layers` / `pp_last_stage_layers` (Megatron-Core
    decoder_first_pipeline_num_layers / decoder_last_pipeline_num_layers) give uneven first / last
    stages; the other stages split the rest evenly. `ulysses_sp`: the cp ranks split the sequence
    DeepSpeed-Ulysses style (all-to-alls around attention; verl ulysses_sequence_parallel_size = cp)
    instead of ring attention. `max_tokens_per_micro_batch` (verl `ppo_max_token_len_per_gpu` with
    `use_dynamic_bsz`, NeMo RL `train_mb_tokens` with sequence packing): each replica's sequences
    are packed into the fewest micro-batches of at most that many tokens, balanced (`micro_batch`
    is then ignored); `logprob_max_tokens_per_micro_batch` (verl `log_prob_max_token_len_per_gpu`,
    NeMo RL `logprob_mb_tokens`) is the budget of forward-only passes (None: the training one).
    `zero_shard_size`: the ranks of a stage's dp x cp group that one copy of the ZeRO-sharded state
    spans (None: all of them). Smaller, the state is sharded within consecutive groups of that many
    ranks and replicated across them: PyTorch HSDP (verl `fsdp_config.fsdp_size`), Megatron-Core's
    partial distributed optimizer (`--num-distributed-optimizer-instances` = dp x cp / this size;
    expert state over expert-DP / that many instances). Gradients reduce-scatter inside a shard
    group, then all-reduce their shard across the groups.

    `dp=None` means "derive from the device count" (`resolve(n_devices)`). `vpp` is the number of
    model chunks per pipeline rank (interleaved 1F1B when > 1). `sequence_parallel=None` means on
    whenever tp > 1 (Megatron-LM's recommended setting with TP, arXiv 2205.05198)."""

    tp: int = 1
    pp: int = 1
    vpp: int = 1
    dp: int | None = None
    ep: int = 1
    cp: int = 1
    zero: int = 1
    recompute: str = "selective"
    micro_batch: int = 1
    sequence_parallel: bool | None = None
    order: tuple[str, ...] = DEFAULT_ORDER
    etp: int | None = None
    pp_first_stage_layers: int | None = None
    pp_last_stage_layers: int | None = None
    ulysses_sp: bool = False
    max_tokens_per_micro_batch: int | None = None
    logprob_max_tokens_per_micro_batch: int | None = None
    zero_shard_size: int | None = None
    recompute_method: str = "uniform"
    recompute_num_layers: int = 1

    def __post_init__(self) -> None:
        if self._plainly_valid():   # the common case (the planner builds thousands): no check below fails
            return
        for name in ("tp", "pp", "vpp", "ep", "cp", "micro_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise RlsimError(f"{name} must be a positive integer, got {value!r}", field=f"train_layout.{name}",
                                 fix=f"set train_layout.{name} to 1 or more")
        for name in _OPTIONAL_COUNTS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise RlsimError(f"{name} must be a positive integer or unset, got {value!r}",
                                 field=f"train_layout.{name}", fix=f"set train_layout.{name} to 1 or more, or drop it")
        if self.dp is not None and (not isinstance(self.dp, int) or isinstance(self.dp, bool) or self.dp < 1):
            raise RlsimError(f"dp must be a positive integer or auto, got {self.dp!r}", field="train_layout.dp",
                             fix="set train_layout.dp to auto or a positive integer")
        for name in ("sequence_parallel", "ulysses_sp"):   # true / false (sequence_parallel: or unset)
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "sequence_parallel" and value is None):
                raise RlsimError(f"{name} must be true or false, got {value!r}", field=f"train_layout.{name}",
                                 fix=f"set train_layout.{name} to true or false")
        if isinstance(self.zero, bool) or not isinstance(self.zero, int) or self.zero not in (0, 1, 2, 3):
            raise RlsimError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}", field="train_layout.zero",
                             fix="set train_layout.zero to 0 (none), 1 (optimizer), 2 (+grads) or 3 (+weights)")
        if self.zero_shard_size is not None and self.zero == 0:
            raise RlsimError(f"zero_shard_size {self.zero_shard_size} with zero: 0: nothing is sharded",
                             field="train_layout.zero_shard_size",
                             fix="drop zero_shard_size, or set train_layout.zero to 1, 2 or 3")
        if self.recompute not in RECOMPUTE_MODES:
            raise RlsimError(f"recompute must be one of {RECOMPUTE_MODES}, got {self.recompute!r}",
                             field="train_layout.recompute", fix="use none, selective or full")
        self._check_recompute_method()
        if not isinstance(self.order, tuple) or sorted(self.order) != sorted(DEFAULT_ORDER):
            raise RlsimError(f"order must be a permutation of {DEFAULT_ORDER}, got {self.order!r}",
                             field="train_layout.order", fix="e.g. [tp, cp, dp, pp] (innermost first)")

    def _plainly_valid(self) -> bool:
        """True when every check of __post_init__ plainly passes (plain ints and bools, the default
        order); False sends the layout through the checks, which then name what is wrong."""
        counts = (self.tp, self.pp, self.vpp, self.ep, self.cp, self.micro_batch)
        optional = (self.dp, *(getattr(self, name) for name in _OPTIONAL_COUNTS))
        return (all(type(v) is int and v >= 1 for v in counts)
                and all(v is None or (type(v) is int and v >= 1) for v in optional)
                and (self.sequence_parallel is None or type(self.sequence_parallel) is bool)
                and type(self.ulysses_sp) is bool
                and type(self.zero) is int and self.zero in (0, 1, 2, 3)
                and not (self.zero_shard_size is not None and self.zero == 0)
                and type(self.recompute) is str and self.recompute in RECOMPUTE_MODES
                and self.recompute_method == "uniform" and type(self.recompute_num_layers) is int
                and self.recompute_num_layers == 1
                and type(self.order) is tuple and self.order == DEFAULT_ORDER)

    def _check_recompute_method(self) -> None:
        """recompute_method in RECOMPUTE_METHODS, recompute_num_layers a positive integer, either away from
        its default only with recompute: full (Megatron reads them under --recompute-granularity full only)."""
        n = self.recompute_num_layers
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise RlsimError(f"recompute_num_layers must be a positive integer, got {n!r}",
                             field="train_layout.recompute_num_layers", fix="set train_layout.recompute_num_layers "
                                                                             "to 1 or more")
        if self.recompute_method not in RECOMPUTE_METHODS:
            raise RlsimError(f"recompute_method must be one of {RECOMPUTE_METHODS}, got {self.recompute_method!r}",
                             field="train_layout.recompute_method", fix="use uniform or block")
        for name, default in (("recompute_method", "uniform"), ("recompute_num_layers", 1)):
            if getattr(self, name) != default and self.recompute != "full":
                raise RlsimError(f"{name} {getattr(self, name)!r} applies to recompute: full only (here "
                                 f"{self.recompute})", field=f"train_layout.{name}",
                                 fix=f"drop train_layout.{name}, or set train_layout.recompute to full")

    def recomputed_layers(self, chunk_layers: int) -> int:
        """Layers of a model chunk of `chunk_layers` layers whose forward the backward runs again: all of
        them under full uniform, the first recompute_num_layers under full block, none otherwise (selective
        recomputes a part of every layer: not counted here)."""
        if self.recompute != "full":
            return 0
        if self.recompute_method == "block":
            return min(chunk_layers, self.recompute_num_layers)
        return chunk_layers

    @property
    def sp(self) -> bool:
        return self.tp > 1 if self.sequence_parallel is None else bool(self.sequence_parallel and self.tp > 1)

    @property
    def expert_tp(self) -> int:
        """Expert tensor-parallel size (etp, or tp when unset)."""
        return self.tp if self.etp is None else self.etp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size: tp x cp x dp / (etp x ep) (the folded expert layout)."""
        return max(1, self.tp * self.cp * (self.dp or 1) // (self.expert_tp * self.ep))

    @property
    def zero_shard(self) -> int:
        """Ranks one copy of the ZeRO-sharded dense state spans: zero_shard_size, or all dp x cp."""
        return self.zero_shard_size or (self.dp or 1) * self.cp

    @property
    def zero_replicas(self) -> int:
        """Copies of the ZeRO-sharded state (HSDP's replicate dimension; 1: fully sharded)."""
        return max(1, (self.dp or 1) * self.cp // self.zero_shard)

    @property
    def expert_zero_shard(self) -> int:
        """Ranks one copy of the sharded expert state spans: the expert-DP group / zero_replicas."""
        return max(1, self.expert_dp // self.zero_replicas)

    @property
    def model_parallel(self) -> int:
        """Devices of one model replica: tp x cp x pp."""
        return self.tp * self.cp * self.pp

    @property
    def pool_unit(self) -> int:
        """The device granule of a training pool: whole replicas (tp x cp x pp), and with experts
        enough of them that etp x ep divides a stage's tp x cp x dp ranks (the fold above): at
        tp 8, etp 8, ep 4 that is DP a multiple of 4."""
        return self.model_parallel * expert_fold(self.tp, self.cp, self.ep, self.etp)

    def pool_unit_text(self) -> str:
        """What makes the pool unit, for an error that cannot fit one: the replica, and the replicas
        the experts' fold needs (a training replica 'of 32' for TP 4 said nothing of EP 8 x etp 4)."""
        fold = expert_fold(self.tp, self.cp, self.ep, self.etp)
        replica = f"tp {self.tp} x cp {self.cp} x pp {self.pp} = {self.model_parallel}"
        if fold == 1:
            return replica
        return (f"{replica}, x {fold} replicas so that ep {self.ep} x etp {self.expert_tp} divides a stage's tp x cp x "
                f"dp ranks (MoE parallel folding; etp is tp unless expert_tensor_parallel_size / etp is given)")

    @property
    def devices(self) -> int:
        if self.dp is None:
            raise RlsimError("dp is not resolved", field="train_layout.dp", fix="call resolve(n_devices) first")
        return self.model_parallel * self.dp

    def resolve(self, n_devices: int, source: str | None = None) -> TrainLayout:
        """Fill dp from the device count; check that tp x cp x dp x pp covers it exactly."""
        if self.dp is None:
            if n_devices % self.model_parallel:
                raise RlsimError(f"{n_devices} devices are not a multiple of tp x cp x pp = {self.model_parallel}",
                                 source=source, field="workload.train_layout",
                                 fix="change tp, cp or pp, or the number of training devices")
            resolved = dataclasses.replace(self, dp=n_devices // self.model_parallel)
            resolved.check_zero_shard(source)
            return resolved
        if self.devices != n_devices:
            raise RlsimError(f"tp x cp x dp x pp = {self.devices} but {n_devices} devices were given",
                             source=source, field="workload.train_layout.dp", fix="set dp: auto or match the device count")
        self.check_zero_shard(source)
        return self

    def check_zero_shard(self, source: str | None = None) -> None:
        """zero_shard_size must divide a stage's dp x cp ranks, and the copies it makes the expert-DP
        group (Megatron-Core splits both data-parallel groups into the same number of instances)."""
        size = self.zero_shard_size
        if size is None or self.dp is None:
            return
        group = self.dp * self.cp
        if group % size:
            raise RlsimError(f"zero_shard_size {size} does not divide the dp x cp = {self.dp} x {self.cp} = {group} "
                             "ranks of a pipeline stage", source=source, field="workload.train_layout.zero_shard_size",
                             fix=f"use a divisor of {group} (e.g. {_divisors_upto(group, 64)}), or drop it "
                                 "(shard over all of them)")
        if self.expert_dp % (group // size):
            raise RlsimError(f"zero_shard_size {size} makes {group // size} copies of the sharded state, which do "
                             f"not divide the expert-DP group of {self.expert_dp} ranks", source=source,
                             field="workload.train_layout.zero_shard_size",
                             fix="use a zero_shard_size whose copies (dp x cp / it) divide the expert-DP size")

    def check_model(self, model: Any, source: str | None = None) -> None:
        """Divisibility: TP must divide the attention heads, EP the experts, EP must fit in DP x CP; ep
        and etp need experts."""
        heads = int(model.num_heads)
        if heads % self.tp:
            raise RlsimError(f"tp={self.tp} does not divide the {heads} attention heads of {model.name}",
                             source=source, field="workload.train_layout.tp",
                             fix=f"use a tp that divides {heads}, e.g. {_divisors_upto(heads, 16)}")
        # Megatron-Core splits the key-value groups over TP (attention.py: num_query_groups_per_partition =
        # divide(num_query_groups, tp), which asserts divisibility): a TP above the KV heads does not run.
        # MLA models have no groups (every head keeps its own latent projection).
        kv_heads = int(getattr(model, "num_kv_heads", heads) or heads)
        if not getattr(model, "is_mla", False) and kv_heads % self.tp:
            raise RlsimError(f"tp={self.tp} does not divide the {kv_heads} key-value heads of {model.name} "
                             "(Megatron-Core splits the query groups over TP)", source=source,
                             field="workload.train_layout.tp",
                             fix=f"use a tp that divides {kv_heads}, e.g. {_divisors_upto(kv_heads, 16)}")
        if self.ulysses_sp and self.cp > 1 and heads % (self.tp * self.cp):
            raise RlsimError(f"Ulysses tp x cp = {self.tp * self.cp} does not divide the {heads} attention heads of "
                             f"{model.name}", source=source, field="workload.train_layout.cp",
                             fix="use a cp with tp x cp dividing the heads, or ulysses_sp: false (ring attention)")
        experts = int(getattr(model, "num_experts", 0) or 0)
        if self.ep > 1 and not experts:
            raise RlsimError(f"ep={self.ep} but {model.name} is a dense model", source=source,
                             field="workload.train_layout.ep",
                             fix="set ep: 1 (--set workload.train_layout.ep=1 over a preset that gives it)")
        if self.etp is not None and not experts:
            raise RlsimError(f"etp={self.etp} but {model.name} is a dense model (etp is the tensor-parallel size of "
                             "the expert layers; tp splits a dense model's)", source=source,
                             field="workload.train_layout.etp",
                             fix="remove etp (--set workload.train_layout.etp=null over a preset that gives it)")
        if experts and experts % self.ep:
            raise RlsimError(f"ep={self.ep} does not divide the {experts} experts of {model.name}",
                             source=source, field="workload.train_layout.ep",
                             fix=f"use an ep that divides {experts}, e.g. {_divisors_upto(experts, 64)}")
        self.check_folding(source)
        if self.pp * self.vpp > int(model.num_layers):
            raise RlsimError(f"pp x vpp = {self.pp * self.vpp} exceeds the {model.num_layers} layers of "
                             f"{model.name}", source=source, field="workload.train_layout.pp", fix="lower pp or vpp")
        self._check_recompute_groups(model, source)

    def _check_recompute_groups(self, model: Any, source: str | None) -> None:
        """Full uniform recompute: recompute_num_layers must divide every model chunk's layers. Megatron-Core
        (0.8.0 to 0.13.0 transformer_block._checkpointed_forward) runs groups custom(i, i + N) from each
        chunk's first layer and indexes self.layers past the chunk's last one where N does not divide its
        layers (an IndexError in the first forward). Block checkpoints layer i while i < N: an N past a
        chunk's layers checkpoints them all (recomputed_layers takes the chunk's)."""
        n = self.recompute_num_layers
        if self.recompute != "full" or self.recompute_method != "uniform" or n == 1:
            return
        counts = self.chunk_layer_counts(int(model.num_layers))
        if all(count % n == 0 for count in counts):
            return
        common = math.gcd(*counts)
        raise RlsimError(
            f"recompute_num_layers {n} does not divide the {' / '.join(map(str, counts))} layers of a model chunk "
            f"({model.num_layers} layers over pp x vpp = {self.pp} x {self.vpp}): Megatron-Core's uniform method "
            f"recomputes groups of {n} layers from each chunk's first and fails (IndexError) on a last group that "
            "runs past the chunk's end", source=source, field="workload.train_layout.recompute_num_layers",
            fix=f"use a recompute_num_layers dividing every chunk's layers ({_divisors_upto(common, common)}), or "
                "recompute_method: block (the first N layers of each chunk)")

    def check_folding(self, source: str | None = None, field: str = "workload.train_layout.ep") -> None:
        """MoE parallel folding: etp x ep must divide the tp x cp x dp ranks of a pipeline stage."""
        block = self.tp * self.cp * (self.dp or 1)
        if self.dp is not None and (self.ep > 1 or self.etp is not None) and block % (self.expert_tp * self.ep):
            raise RlsimError(f"etp x ep = {self.expert_tp} x {self.ep} does not divide tp x cp x dp = {self.tp} x "
                             f"{self.cp} x {self.dp} = {block} (experts fold over the tp x cp x dp ranks of a "
                             "pipeline stage)", source=source, field=field,
                             fix=f"choose ep (and train_layout.etp) with etp x ep dividing {block}, e.g. etp: 1, "
                                 "or change tp, cp or the number of training devices")

    def chunk_layer_counts(self, num_layers: int) -> list[int]:
        """The distinct layer counts of the model chunks, ascending: the given first / last stage counts
        and the even split's (vpp 1), else the even split of pp x vpp chunks (memory.stage_layers: ceil
        for the first num_layers % chunks, floor for the rest)."""
        counts = self.stage_layer_counts(num_layers)
        if counts is not None:
            return sorted(set(counts))
        chunks = self.pp * self.vpp
        return sorted({num_layers // chunks, -(-num_layers // chunks)} if num_layers % chunks else {num_layers // chunks})

    def stage_layer_counts(self, num_layers: int, source: str | None = None) -> tuple[int, ...] | None:
        """Layers per pipeline rank when first / last stage counts are given (None: an even split)."""
        first, last = self.pp_first_stage_layers, self.pp_last_stage_layers
        if first is None and last is None:
            return None
        return uneven_stage_counts(num_layers, self.pp, first, last, source)

    def as_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "vpp": self.vpp, "dp": self.dp, "ep": self.ep, "cp": self.cp,
                "zero": self.zero, "recompute": self.recompute, "micro_batch": self.micro_batch,
                "sequence_parallel": self.sp, **self._extra_dict()}

    def _extra_dict(self) -> dict[str, Any]:
        """The folding / uneven-stage / Ulysses fields, when set (absent otherwise: unchanged JSON)."""
        out: dict[str, Any] = {}
        for name in _OPTIONAL_COUNTS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.ulysses_sp:
            out["ulysses_sp"] = True
        if self.recompute_method != "uniform" or self.recompute_num_layers != 1:
            out.update(recompute_method=self.recompute_method, recompute_num_layers=self.recompute_num_layers)
        return out

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], source: str | None = None,
                     field_name: str = "workload.train_layout") -> TrainLayout:
        """From YAML: `{tp: 4, pp: 1, dp: auto, zero: 1, recompute: full, micro_batch: 1}`; errors name
        `field_name.<key>` (the path `--set` takes)."""
        known = {f.name for f in dataclasses.fields(cls)}
        data: dict[str, Any] = {}
        for key, value in dict(mapping).items():
            if key not in known:
                raise RlsimError(f"unknown train_layout key {key!r}", source=source, field=f"{field_name}.{key}",
                                 fix=f"use {', '.join(sorted(known))}")
            if key == "dp" and (value is None or str(value).lower() == "auto"):
                value = None
            elif key == "order" and isinstance(value, (list, tuple)):
                value = tuple(str(v) for v in value)
            elif key == "recompute":
                value = "none" if value in (False, None) else str(value).lower()
            elif key == "recompute_method" and isinstance(value, str):
                value = value.lower()
            elif key in _OPTIONAL_COUNTS and \
                    (value is None or str(value).lower() in ("auto", "none")):
                value = None
            data[key] = value
        try:
            return cls(**data)
        except RlsimError as exc:
            field = exc.field.replace("train_layout", field_name, 1) if exc.field else field_name
            raise RlsimError(str(exc).split(": ", 1)[-1].split(" (fix:")[0], source=source, field=field,
                             fix=exc.fix) from None


def _divisors_upto(n: int, cap: int) -> str:
    return ", ".join(str(d) for d in range(1, min(n, cap) + 1) if n % d == 0)


def uneven_stage_counts(num_layers: int, pp: int, first: int | None, last: int | None,
                        source: str | None = None) -> tuple[int, ...]:
    """Layers per pipeline rank: `first` on rank 0, `last` on rank pp - 1 (None: not fixed), the
    middle ranks share the rest evenly (Megatron-Core requires an exact split; so does this)."""
    fixed = [c for c in (first, last) if c is not None]
    middle = pp - len(fixed)
    rest = num_layers - sum(fixed)
    field = "workload.train_layout.pp_first_stage_layers"
    if pp < 2 or (pp == 2 and first is not None and last is not None and rest != 0) or rest < 0:
        raise RlsimError(f"first / last stage layers {first} / {last} do not fit {num_layers} layers on pp={pp}",
                         source=source, field=field, fix="use pp >= 2 and first + last <= the layer count")
    if middle == 0:
        return (int(first), int(last))  # type: ignore[arg-type]
    if rest % middle or rest // middle < 1:
        raise RlsimError(f"the {rest} layers left after first / last stages {first} / {last} do not split evenly "
                         f"over the {middle} other pipeline stages", source=source, field=field,
                         fix=f"pick first / last stage layers so that {num_layers} - first - last is a positive "
                             f"multiple of {middle}")
    counts = [rest // middle] * middle
    if first is not None:
        counts.insert(0, first)
    if last is not None:
        counts.append(last)
    return tuple(counts)
