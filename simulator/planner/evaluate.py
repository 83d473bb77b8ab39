"""The real evaluators behind the search: llm/training.py for training layouts, the rollout engine
(llm/inference.py) for rollout layouts. Both raise RlsimError for layouts that do not fit."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

from ..errors import RlsimError
from ..llm.inference import RolloutLayout, StepCost, instance_device, simulate_rollout
from ..llm.memory import check_fits, memory_per_device
from ..llm.train_layout import TrainLayout
from ..llm.training import TrainParams, device_resident, pool_devices, train_step_cost, uniform_sequences
from ..params import TRAIN_SOFTWARE
from .base import Evaluation, RefusedBeforeTiming, RolloutSpace, TrainChoice


class TrainingEvaluator:
    """`train_step_cost` on a batch of `global_batch` equal sequences of `seq_len` tokens."""

    def __init__(self, model: Any, topology: Any, global_batch: int, seq_len: int, *,
                 params: TrainParams | None = None, collectives: Any = None,
                 sequence_parallel: bool | None = None,
                 heaviest: Callable[[int, int], tuple[int, float, int]] | None = None,
                 also_trains_on: int | Callable[[int], int | None] | None = None,
                 room_beside_tail: Callable[[int], int | None] | None = None,
                 step_sequences: Callable[[int, int], tuple[int, np.ndarray]] | None = None,
                 packing: str = "none",
                 rollout_phase: Callable[[TrainLayout, float], None] | None = None,
                 pools_check: Callable[[TrainLayout, int], float | None] | None = None,
                 micro_batch_counts: Callable[[int, int], Collection[int]] | None = None,
                 beside: Sequence[tuple[Any, str, Callable[[TrainLayout, float], float],
                                        Callable[[TrainLayout], TrainLayout]]] = ()) -> None:
        """``heaviest(rows, dp)``: (samples per micro-batch, tokens, micro-batches per replica) of the
        heaviest micro-batch the run will form with ``rows`` packed rows on ``dp`` replicas; memory is
        then judged on it as the run judges it (autoplan: the run's token-balanced micro-batches of
        drawn lengths exceed a typical row). None: on rows of ``seq_len`` tokens. ``also_trains_on``:
        devices a run may also train on, fewer than the candidate's (colocated StaleSync trains beside
        its consolidated tail), or a function of the candidate's device count giving them: memory is
        judged at the DP whole pool units of them give too (ZeRO shards the state over fewer ranks).
        ``room_beside_tail(n)``: the devices a candidate of n devices keeps for training beside the
        smallest consolidated tail (one rollout instance); a layout whose pool unit (tp x cp x pp with
        its expert fold) is larger is infeasible: colocated StaleSync would never consolidate. ``step_sequences(rows, dp)``: (samples per micro-batch,
        the samples in micro-batch order) of an optimizer step of drawn lengths as the run forms its
        micro-batches (``packing`` as the run's: "packed" prices attention per sample): the step is
        timed on them, not on rows of ``seq_len`` (a packed row of many samples priced as one long
        sequence overstates attention; rows at the median length understate the tokens).
        ``beside``: (model, what, bytes(layout, hbm), own(layout)) per update that runs beside other
        models' resident state (PPO: the actor's beside the critic's weights and optimizer state, the
        critic's beside the actor's; a resident reference's weights), ``what`` naming that state ("the
        critic's resident weights and optimizer state"), ``own`` the layout that update runs under (the
        critic's micro-batching): memory is judged for each with that much less HBM.
        ``rollout_phase(layout, hbm)``: raises RlsimError where a colocated engine's share of HBM beside
        what the layout leaves resident through the rollout overflows a device (autoplan.rollout_phase_check).
        ``pools_check(layout, devices)``: raises RlsimError where the run's pools would not train the layout on
        the candidate's devices or an aux pool would not hold it (autoplan.aux_pool_check, fuse: actor);
        else the aux pool's train-phase peak a device (None without an update there), reported beside
        the actor's (Evaluation.aux_pool_memory_per_device_bytes).
        ``micro_batch_counts(micro_batch, dp)``: the replicas' micro-batch counts of the run's steps
        (autoplan.micro_batch_counts_of), which the search judges an interleaved pipeline on
        (search.enumerate_train_choices) where the global batch's rows are not the run's micro-batches."""
        self.model, self.topology = model, topology
        self.heaviest = heaviest
        self.also_trains_on = also_trains_on
        self.room_beside_tail = room_beside_tail
        self.step_sequences, self.packing = step_sequences, packing
        self.beside = tuple(beside)
        self.rollout_phase, self.pools_check = rollout_phase, pools_check
        self.micro_batch_counts = micro_batch_counts
        self.sequences = uniform_sequences(global_batch, seq_len)
        self.global_batch, self.seq_len = int(global_batch), int(seq_len)
        self.params = params or TrainParams()
        if collectives is None:  # the evaluator owns the network model and its caches
            from ..network.collectives import CollectiveModel
            collectives = CollectiveModel(topology)
        self.collectives = collectives
        self.sequence_parallel = sequence_parallel  # None: on with TP (TrainLayout's default)
        # what the checks read again for candidates that share it (the same values, found once per search):
        # a choice's layout, a pool's smallest HBM, the devices a candidate's count also trains on
        self._layouts: dict[TrainChoice, TrainLayout] = {}
        self._pool_hbm: dict[tuple[int, ...], float] = {}
        self._also: dict[int, int | None] = {}

    @classmethod
    def for_software(cls, model: Any, topology: Any, global_batch: int, seq_len: int, software: Any,
                     **kwargs: Any) -> TrainingEvaluator:
        """An evaluator with a software stack's settings (llm/train_presets.py, e.g. MEGATRON_2021);
        pair it with `SearchSpace(**software.search_limits())`."""
        return cls(model, topology, global_batch, seq_len, params=software.params,
                   sequence_parallel=software.sequence_parallel, **kwargs)

    @classmethod
    def for_workload(cls, model: Any, topology: Any, global_batch: int, seq_len: int, workload: Any,
                     **kwargs: Any) -> TrainingEvaluator:
        """An evaluator with a workload's trainer constants (workload.train_params: its stack's values
        under the overrides; ``params`` in ``kwargs`` replaces them, e.g. the usable HBM beside a
        resident engine) and its stack's sequence-parallel rule (workload.train_software)."""
        software = TRAIN_SOFTWARE[workload.train_software]
        params = kwargs.pop("params", None) or workload.train_params
        return cls(model, topology, global_batch, seq_len, params=params,
                   sequence_parallel=software.sequence_parallel, **kwargs)

    def layout(self, c: TrainChoice) -> TrainLayout:
        """The candidate's TrainLayout (made once a choice: a frozen value)."""
        hit = self._layouts.get(c)
        if hit is None:
            hit = self._layouts[c] = self._new_layout(c)
        return hit

    def _new_layout(self, c: TrainChoice) -> TrainLayout:
        sp = self.sequence_parallel if c.sequence_parallel is None else c.sequence_parallel
        return TrainLayout(tp=c.tp, pp=c.pp, vpp=c.vpp, dp=c.dp, ep=c.ep, cp=c.cp, zero=c.zero,
                           recompute=c.recompute, micro_batch=c.micro_batch, sequence_parallel=sp, etp=c.etp,
                           zero_shard_size=c.zero_shard_size, recompute_method=c.recompute_method,
                           recompute_num_layers=c.recompute_num_layers)

    def cost(self, c: TrainChoice, ranks: Sequence[int]) -> Any:
        """The candidate's train_step_cost, after the checks that refuse it (RlsimError)."""
        self._judge(c, ranks)
        return self._timed(c, ranks)

    def _judge(self, c: TrainChoice, ranks: Sequence[int]) -> tuple[float | None, float | None]:
        """The checks that refuse a candidate (RlsimError); the peak bytes per device its memory check
        judged (the heaviest micro-batch beside what sits beside each update, _check_memory; None
        where params.check_memory is off) and the aux pool's (pools_check; None without one)."""
        layout = self.layout(c)
        also = self._also_trains_on(len(ranks))
        room = self.room_beside_tail(len(ranks)) if self.room_beside_tail else None
        if room is not None and room < layout.pool_unit:
            raise RlsimError(f"{self.model.name} with {c} trains in groups of {layout.pool_unit} devices "
                             f"({layout.pool_unit_text()}), more than the {room} beside one rollout instance of "
                             "colocated StaleSync's tail: the tail would never consolidate", source="planner",
                             field="schedule.kind",
                             fix="a smaller tp x cp x pp (or expert fold); or kind: colocated")
        aux = self.pools_check(layout, len(ranks)) if self.pools_check is not None else None
        hbm = None   # the pool's smallest HBM (as train_step_cost), found once for both checks
        if self.rollout_phase is not None:   # the run refuses it whatever check_memory says
            hbm = self.smallest_hbm(ranks)
            self.rollout_phase(layout, hbm)
        if not self.params.check_memory:
            return None, aux
        # The same memory check train_step_cost makes first (equal sequences: the longest is
        # seq_len, m = batch / (dp b)), without building the micro-batches: infeasible is cheap.
        if hbm is None:
            hbm = self.smallest_hbm(ranks)
        return max(self._check_memory(c, layout if dp == layout.dp else dataclasses.replace(layout, dp=dp), hbm)
                   for dp in self._memory_dps(layout, c.dp, also)), aux   # (the candidate's own dp: its layout as is)

    def smallest_hbm(self, ranks: Sequence[int]) -> float:
        """The smallest HBM of the pool's devices (as train_step_cost judges memory), found once a pool."""
        key = tuple(ranks)
        hit = self._pool_hbm.get(key)
        if hit is None:
            hit = self._pool_hbm[key] = min(k.hbm_bytes for k in pool_devices(self.topology, ranks))
        return hit

    def _also_trains_on(self, devices: int) -> int | None:
        """``also_trains_on`` at a candidate's device count (its function asked once a count)."""
        if not callable(self.also_trains_on):
            return self.also_trains_on
        if devices not in self._also:
            self._also[devices] = self.also_trains_on(devices)
        return self._also[devices]

    def _timed(self, c: TrainChoice, ranks: Sequence[int]) -> Any:
        """train_step_cost of the candidate on the step's sequences (step_sequences), else equal rows."""
        layout = self.layout(c)
        if self.step_sequences is not None:
            samples, ordered = self.step_sequences(c.micro_batch, c.dp)
            return train_step_cost(self.model, dataclasses.replace(layout, micro_batch=samples), self.topology,
                                   list(ranks), ordered, packing=self.packing, params=self.params,
                                   collectives=self.collectives, source="planner")
        return train_step_cost(self.model, layout, self.topology, list(ranks), self.sequences,
                               params=self.params, collectives=self.collectives, source="planner")

    def _memory_dps(self, layout: TrainLayout, dp: int, also: int | None) -> list[int]:
        """The candidate's DP, and the smaller one whole pool units of ``also`` devices give."""
        if also is None:
            return [dp]
        unit = layout.pool_unit
        smaller = (also // unit) * unit // layout.model_parallel
        return [dp, smaller] if 0 < smaller < dp else [dp]

    def _check_memory(self, c: TrainChoice, layout: TrainLayout, hbm: float) -> float:
        """The largest of the updates' judged peaks (_check_update): the model alone, or each update
        beside what sits beside it (``beside``)."""
        if not self.beside:
            return self._check_update(c, layout, hbm, self.model)
        return max(self._check_update(c, own(layout), hbm, model, (what, held(layout, hbm)))
                   for model, what, held, own in self.beside)

    def _check_update(self, c: TrainChoice, layout: TrainLayout, hbm: float, model: Any,
                      beside: tuple[str, float] | None = None) -> float:
        """Refuses an update that does not fit (check_fits); else its peak bytes per device: its own
        memory at the heaviest micro-batch (memory_per_device, as train_step_cost sizes it) and what
        sits beside it, as the run's train-phase peak adds them (LlmCosts._train)."""
        dp, rows = int(layout.dp or 1), layout.micro_batch   # the candidate's, or the update's own
        mem_layout, seq, micro_batches = layout, float(self.seq_len), -(-self.global_batch // (dp * rows))
        if self.heaviest is not None:
            samples, tokens, micro_batches = self.heaviest(rows, dp)
            mem_layout, seq = dataclasses.replace(layout, micro_batch=samples), tokens / samples
        mem = device_resident(memory_per_device(model, mem_layout, seq, hbm, params=self.params.memory,
                                                flash_attention=self.params.compute.flash_attention,
                                                micro_batches=micro_batches), self.params)
        what = f"{model.name} with {c}" + (f" on the {dp * layout.model_parallel} devices it also trains on"
                                          if dp != c.dp else "")
        if beside is not None:
            what += f" beside {beside[0]} ({beside[1] / 1e9:.1f} GB)"
            mem = dataclasses.replace(mem, capacity_bytes=mem.capacity_bytes - beside[1])
        check_fits(mem, what=what, source="planner", layout=layout)
        return mem.total_bytes + (beside[1] if beside is not None else 0.0)

    def judge(self, c: TrainChoice, ranks: Sequence[int]) -> None:
        """The checks __call__ makes before timing the candidate: RlsimError where one refuses it."""
        self._judge(c, ranks)

    def __call__(self, c: TrainChoice, ranks: Sequence[int]) -> Evaluation:
        """The candidate's evaluation; RlsimError where it is refused, RefusedBeforeTiming where a check
        before timing its step refuses it (the search charges that less: PlannerParams.refused_cost_fraction)."""
        try:
            judged, aux = self._judge(c, ranks)
        except RlsimError as exc:
            raise RefusedBeforeTiming.of(exc) from None
        r = self._timed(c, ranks)
        memory = judged   # the peak the memory check judged: the figure it refuses a layout on
        if memory is None:   # no check: the timed step's, beside the other model's kept state (PPO: the critic's)
            memory = r.memory.total_bytes
            if self.beside:
                memory += self.beside[0][2](self.layout(c), self.smallest_hbm(ranks))
        return Evaluation(step_time_s=r.step_time_s, tflops_per_device=r.tflops_per_device, mfu=r.mfu,
                          memory_per_device_bytes=memory, comm_fraction=r.comm_fraction,
                          aux_pool_memory_per_device_bytes=aux)


class RolloutEvaluator:
    """The rollout engine generating `space.sequences` equal-length responses on the layout."""

    def __init__(self, model: Any, topology: Any, space: RolloutSpace, *, params: Any = None,
                 collectives: Any = None, params_for_layout: Callable[[int, int, int], Any] | None = None) -> None:
        """``params_for_layout``: the inference constants of a candidate's (tp, max_num_seqs, pp), for an
        engine whose defaults depend on them (autoplan.engine_rollout); None: ``params`` for every
        candidate."""
        self.model, self.topology, self.space = model, topology, space
        self.params = params
        self.params_for_layout = params_for_layout
        if collectives is None:
            from ..network.collectives import CollectiveModel
            collectives = CollectiveModel(topology)
        self.collectives = collectives

    def __call__(self, lay: dict[str, Any], ranks: Sequence[int]) -> Evaluation:
        s, m = self.space, self.model
        params = (self.params if self.params_for_layout is None
                  else self.params_for_layout(int(lay["tp"]), int(lay["max_num_seqs"]), int(lay.get("pp", 1))))
        layout = RolloutLayout(tp=lay["tp"], ep=lay["ep"], pp=lay.get("pp", 1), instances=lay["instances"],
                               max_num_seqs=lay["max_num_seqs"], gpu_memory_utilization=s.gpu_memory_utilization)
        # each instance costed on its own devices (a mixed cluster's kinds: not all on the first one's),
        # its round-robin share of the sequences; the step ends with the slowest kind's instances
        kinds = self._instances_by_device(layout, ranks)
        runs = []
        for device, members, shares, group_ranks in kinds:
            count, sequences = len(members), sum(shares)
            if not sequences:   # more instances than sequences: these wait idle
                continue
            group = layout.model_copy(update={"instances": count})
            res = simulate_rollout(m, device, group, np.full(sequences, s.prompt_len, dtype=np.int64),
                                   np.full(sequences, s.response_len, dtype=np.int64), params=params,
                                   collectives=self.collectives, ranks=group_ranks)
            step = StepCost(m, device, group, params, self.collectives, group_ranks[: layout.devices_per_instance])
            runs.append((res.makespan_s, device, step, -(-sequences // count)))
        makespan, device, step, per_instance = max(runs, key=lambda run: run[0])
        flops = (m.forward_flops_per_token(s.prompt_len / 2) * s.prompt_len
                 + m.decode_flops_per_token(s.prompt_len + s.response_len / 2) * s.response_len) * s.sequences
        peak = sum(kind_device.peak("bf16") * len(members) * layout.devices_per_instance
                   for kind_device, members, _, _ in kinds)
        memory = max(self._memory_per_device(run_step, run_share) for _, _, run_step, run_share in runs)
        running = min(per_instance, step.max_running)
        decode = step.decode_step_s(running, running * (s.prompt_len + s.response_len / 2))
        comm = step.decode_comm_s(running) / decode if decode > 0 else 0.0   # both a token unit's
        return Evaluation(step_time_s=makespan, tflops_per_device=flops / (makespan * layout.devices) / 1e12,
                          mfu=flops / (makespan * peak), memory_per_device_bytes=memory,
                          comm_fraction=min(comm, 1.0))

    def _instances_by_device(self, layout: RolloutLayout,
                             ranks: Sequence[int]) -> list[tuple[Any, list[int], list[int], list[int]]]:
        """(device, instance indices, their round-robin sequence counts, their ranks) per device kind
        the instances run on, in the order of their first instance."""
        per = layout.devices_per_instance
        groups: dict[Any, tuple[list[int], list[int], list[int]]] = {}
        for index in range(layout.instances):
            own = list(ranks[index * per:(index + 1) * per])
            members, shares, group_ranks = groups.setdefault(instance_device(self.topology, own), ([], [], []))
            members.append(index)
            shares.append(self.space.sequences // layout.instances + (index < self.space.sequences % layout.instances))
            group_ranks.extend(own)
        return [(device, *lists) for device, lists in groups.items()]

    def _memory_per_device(self, step: StepCost, per_instance: int) -> float:
        """Weights (the drafter's beside the target's with speculative decoding: StepCost takes them from
        the KV pool), workspace and the KV cache of an instance's running sequences, per device (the pool
        they draw from: kv_pool.py)."""
        s = self.space
        running = min(per_instance, step.max_running)
        ep = step.layout.ep
        kv = min(step.kv_free_bytes_dev, running * (s.prompt_len + s.response_len) * step.kv_bytes_per_token_dev / ep
                 + running * step.seq_pool_bytes_dev / ep)   # their tokens' pages and their windows' / states
        draft = step.draft.resident_bytes if step.draft is not None else 0.0
        return step.weight_bytes_dev + draft + step.params.workspace_bytes + kv
