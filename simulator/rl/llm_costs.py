"""The cost facade answered by the real models: llm/ (rollout engine, training and forward
costs, memory) and hardware/ (device, links). Everything the schedules ask goes through here.

Switch costs are bytes moved over named links:
- to rollout: optimizer states + gradients of the training shard offloaded to host over the
  host link (``offload_optimizer``), the KV pool re-allocated (``kv_realloc_s``), plus a fixed
  framework ``overhead_s``; without ``bucketed`` parameters a redundant copy of the inference
  shard is staged through HBM (time and memory);
- to training: the KV pool released, optimizer states + gradients loaded back over the host link.
The weight reshard from the training to the inference layout is the weight sync of colocated
placements: each device receives its inference shard over its scale-up link.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..errors import RlsimError
from ..llm.architecture import ModelSpec, load_model
from ..llm.inference import (
    InferenceParams,
    ResumableRun,
    RolloutEngine,
    RolloutLayout,
    StepCost,
    simulate_rollout,
)
from ..llm.memory import memory_per_device
from ..llm.train_layout import TrainLayout
from ..llm.training import TrainParams, forward_cost, train_step_cost
from ..scenario import Scenario
from .costs import RolloutOutcome, StageCost, SwitchCost
from .packing import balanced_order, replica_contiguous_ranks, samples_per_micro_batch
from .pools import resolve_auto_layouts

# Engine state copies kept per rollout run (every N events): a speed knob only, results do not
# depend on it (tests/test_inference.py checks restored interrupts against fresh engines).
ENGINE_CHECKPOINT_EVERY_EVENTS = 32


class LlmCosts:
    def __init__(self, scenario: Scenario, topology: Any, auto_layouts: dict[str, dict[str, Any]] | None = None):
        """``auto_layouts``: {'train': ..., 'rollout': ...} chosen by the planner
        (simulator/autoplan.py) for sides the workload leaves ``auto``; without it the simple
        rule of pools.resolve_auto_layouts decides."""
        self.scenario, self.topology = scenario, topology
        w, src = scenario.workload, scenario.source
        self.source = src
        self.model: ModelSpec = load_model(w.model)
        self.models = {"actor": self.model, "reference": self.model,
                       "reward": load_model(w.reward.model) if w.reward.model else self.model,
                       "critic": load_model(w.critic_model) if w.critic_model else self.model}
        self.device = topology.device_spec(0)
        self.n_devices = topology.num_devices
        train_map, roll_map = resolve_auto_layouts(
            weight_bytes=self.model.weight_bytes(), params_total=float(self.model.params_total),
            is_moe=bool(self.model.is_moe), num_experts=int(self.model.num_experts or 0),
            hbm_bytes=self.device.hbm_bytes, devices_per_domain=len(topology.ranks_of_domain(0)),
            n_devices=self.n_devices, train_layout=w.train_layout, rollout_layout=w.rollout_layout)
        if auto_layouts:
            if w.train_layout == "auto" and auto_layouts.get("train"):
                train_map = dict(auto_layouts["train"])
            if w.rollout_layout == "auto" and auto_layouts.get("rollout"):
                roll_map = dict(auto_layouts["rollout"])
        self.train_layout_map = {k: v for k, v in train_map.items() if k != "dp"}
        self.train_template = TrainLayout.from_mapping({**self.train_layout_map}, source=src)
        self.rollout_layout = RolloutLayout.from_mapping({**roll_map, "instances": 1}, source=src,
                                                         field_name="workload.rollout_layout")
        self.inference_params: InferenceParams = w.inference
        self.train_params: TrainParams = w.train_params
        self.instance_devices = self.rollout_layout.devices_per_instance
        self.instance_max_seqs = self.rollout_layout.max_num_seqs * self.rollout_layout.ep
        # KV tokens one instance holds (bounds how few instances a consolidated tail fits on)
        self._step_cost = StepCost(self.model, self.device, self.rollout_layout, self.inference_params)
        self.instance_kv_tokens = self._step_cost.kv_capacity_tokens
        self.train_group_devices = self.train_template.model_parallel
        self.peak_flops = self.device.peak(w.dtype)
        self.switch_params = scenario.schedule.switch
        self.sync_eff = scenario.schedule.weight_sync_efficiency
        self.reuse = scenario.schedule.reuse_stage_costs
        sched = scenario.schedule
        # rounds cut mid-generation (StaleSync tail consolidation, over-provisioning): keep engine copies
        self._interrupts = sched.overprovision > 0 or (sched.effective_placement == "colocated"
                                                       and sched.effective_staleness >= 1 and sched.effective_threshold < 1)
        self.balanced = sched.micro_batching == "balanced" and sched.distqueue.packed
        self.pack_tokens = float(sched.pack_tokens or (float(w.prompt_length.get("max", 0) or 0)
                                                       + float(w.response_length.get("max", 0) or 0)) or 4096)
        self._ref: dict[tuple, tuple[float, StageCost]] = {}
        self._layouts: dict[int, TrainLayout] = {}
        self._ranks: dict[int, list[int]] = {}
        self._last_train_lens: np.ndarray | None = None   # the latest trained batch (a re-plan's check)

    # ---- helpers ---------------------------------------------------------------------------------
    def layout(self, n_devices: int) -> TrainLayout:
        """The training layout on a pool of ``n_devices``. EP is carved out of DP (EP groups are
        ``ep`` consecutive DP ranks), so an EP that does not divide the pool's DP is an error, never a
        silent fallback: a silent EP 1 at one size and EP 4 at another makes scaling comparisons
        compare different per-replica work."""
        if n_devices not in self._layouts:
            lay = self.train_template.resolve(n_devices, source=self.source)
            if lay.ep > 1 and (lay.dp or 1) % lay.ep:
                mp = self.train_template.model_parallel
                raise RlsimError(
                    f"training EP {lay.ep} does not divide DP {lay.dp} of a {n_devices}-device training pool "
                    f"({lay.tp} TP x {lay.pp} PP = {mp} devices per replica)", source=self.source,
                    field="workload.train_layout.ep",
                    fix=f"use an ep dividing {lay.dp}, a pool of a multiple of {mp * lay.ep} devices "
                        f"(schedule.rollout_fraction / rollout_devices, topology size), or another tp x pp")
            lay.check_model(self.model, source=self.source)
            self._layouts[n_devices] = lay
            # each replica's TP x PP on consecutive ranks (inside a scale-up domain), DP outermost:
            # gradient sync is the traffic that crosses domains (RDMA between supernodes)
            self._ranks[n_devices] = replica_contiguous_ranks(lay.tp, lay.cp, lay.dp or 1, lay.pp)
        return self._layouts[n_devices]

    def set_train_layout(self, layout_map: dict[str, Any]) -> None:
        """A re-planned training layout (after a failure): later steps use it; dp is re-derived."""
        self.train_layout_map = {k: v for k, v in layout_map.items() if k != "dp"}
        self.train_template = TrainLayout.from_mapping({**self.train_layout_map}, source=self.source)
        self.train_group_devices = self.train_template.model_parallel
        self._layouts.clear()
        self._ranks.clear()
        self._ref.clear()

    def train_devices_at_most(self, n_max: int) -> int:
        """Largest training pool <= n_max whose DP keeps the configured EP (EP is carved out of
        DP: a pool of 11 replicas could not shard 4-way EP)."""
        mp = self.train_template.model_parallel
        ep = max(1, self.train_template.ep)
        dp = n_max // mp
        return (dp - dp % ep) * mp

    def effective_layouts(self, n_train: int) -> dict[str, Any]:
        return {"train": self.layout(n_train).as_dict(), "rollout": self.rollout_layout.model_dump()}

    def _packing(self) -> str:
        return "packed" if self.scenario.schedule.distqueue.packed else "padded"

    # ---- the facade ------------------------------------------------------------------------------
    def rollout(self, prompt_lens, response_lens, ranks) -> RolloutOutcome:
        inst = max(1, len(ranks) // self.instance_devices)
        tokens = np.asarray(prompt_lens, float) + np.asarray(response_lens, float)
        flops = float(np.sum(tokens) * self.model.forward_flops_per_token(float(np.mean(tokens)) / 2)) \
            if len(tokens) else 0.0
        if inst == 1 and len(tokens):
            return self._rollout_one(np.asarray(prompt_lens, np.int64), np.asarray(response_lens, np.int64), flops)
        layout = self.rollout_layout.model_copy(update={"instances": inst})
        res = simulate_rollout(self.model, self.device, layout, np.asarray(prompt_lens, np.int64),
                               np.asarray(response_lens, np.int64), params=self.inference_params)
        return RolloutOutcome(res.finish_s, res.instance, res.busy_s, flops=flops)

    def _rollout_one(self, prompts: np.ndarray, responses: np.ndarray, flops: float) -> RolloutOutcome:
        """One instance (what the schedules ask): the same engine run as simulate_rollout, kept
        resumable so an interrupt later in the round (StaleSync tail consolidation) restores the
        engine near that time instead of running it again from the start."""
        n = len(prompts)
        engine = RolloutEngine(self.model, self.device, self.rollout_layout, self.inference_params,
                               cost=self._step_cost)
        engine.add_many(range(n), prompts, responses, 0.0)
        finish = np.full(n, np.nan)
        if not self._interrupts:
            engine.run_into(finish)
            return RolloutOutcome(finish, np.zeros(n, np.int64), np.array([engine.busy_s]), flops=flops)
        run = ResumableRun(engine, every=ENGINE_CHECKPOINT_EVERY_EVENTS)
        run.run_into(finish)

        def progress_at(stop_s: float) -> np.ndarray:
            out = np.where(finish <= stop_s, responses, 0).astype(float)
            for p in run.interrupt_at(stop_s).partial:
                out[p.seq_id] = p.generated
            return out

        return RolloutOutcome(finish, np.zeros(n, np.int64), np.array([engine.busy_s]), flops=flops,
                              progress_at=progress_at)

    def _work(self, role: str, lens: np.ndarray) -> float:
        """sum over samples of train_flops_per_token(s) x s; per-token FLOPs are affine in s
        (6N + 12 L H d s, formulas.md), so two sums replace a loop over lengths."""
        m = self.models[role]
        x = np.asarray(lens, float)
        a = float(m.train_flops_per_token(0.0))
        slope = float(m.train_flops_per_token(1.0)) - a
        return a * float(x.sum()) + slope * float(np.dot(x, x))

    def _reused(self, kind: str, role: str, seq_lens, n_devices: int, exact) -> StageCost:
        """Exact cost for the first batch of each (kind, model, pool size, batch size); later batches
        scale it by model FLOPs (same layout, same micro-batch count: time ~ work). Roles with the
        same architecture (old-logprob and reference forwards) share one evaluation."""
        if not self.reuse:
            return exact()
        key = (kind, self.models[role], n_devices, len(seq_lens))
        work = self._work(role, seq_lens)
        if key not in self._ref:
            self._ref[key] = (work, exact())
        ref_work, ref = self._ref[key]
        x = work / ref_work if ref_work > 0 else 1.0
        return StageCost(ref.time_s * x, flops=ref.flops * x, bubble_s=ref.bubble_s * x,
                         peak_memory_bytes=ref.peak_memory_bytes)

    def forward(self, role, seq_lens, ranks) -> StageCost:
        n_devices = len(ranks)
        return self._reused("fwd", role, seq_lens, n_devices, lambda: self._forward(role, seq_lens, n_devices))

    def train(self, role, seq_lens, ranks) -> StageCost:
        n_devices = len(ranks)
        if role == "actor":
            self._last_train_lens = np.asarray(seq_lens, np.int64)
        return self._reused("train", role, seq_lens, n_devices, lambda: self._train(role, seq_lens, n_devices))

    def micro_batched(self, seq_lens, n_devices: int) -> tuple[TrainLayout, np.ndarray]:
        """The layout and sample order the training cost model sees: token-balanced micro-batches
        of about ``micro_batch`` packed rows (schedule.micro_batching: balanced), or the configured
        samples per micro-batch in generation order (sequence, or padded data)."""
        return self._micro_batched_as(self.layout(n_devices), seq_lens)

    def accept_train_layout(self, layout_map: dict[str, Any]) -> None:
        """A re-plan's check of a candidate training layout (dp included) beyond the planner's own
        (which judges rows of typical length): the rollout phase still fits beside it on a colocated
        placement, and the latest trained batch, micro-batched as the run does, fits in memory
        (long-tail batches hold micro-batches longer than a typical row). RlsimError otherwise."""
        lay = TrainLayout.from_mapping(dict(layout_map), source=self.source)
        self.rollout_phase_bytes(lay)
        if self._last_train_lens is None or not len(self._last_train_lens):
            return
        lay, lens = self._micro_batched_as(lay, self._last_train_lens)
        train_step_cost(self.model, lay, self.topology, list(range(lay.devices)), lens, packing=self._packing(),
                        params=self.train_params, source=self.source)

    def _micro_batched_as(self, lay: TrainLayout, seq_lens) -> tuple[TrainLayout, np.ndarray]:
        lens = np.asarray(seq_lens, np.int64)
        if not self.balanced or not len(lens):
            return lay, lens
        b = samples_per_micro_batch(lens, self.pack_tokens, lay.micro_batch, lay.dp or 1)
        return dataclasses.replace(lay, micro_batch=b), lens[balanced_order(lens, b)]

    def _forward(self, role, seq_lens, n_devices) -> StageCost:
        lay, lens = self.micro_batched(seq_lens, n_devices)
        c = forward_cost(self.models[role], lay, self.topology, self._ranks[n_devices],
                         lens, packing=self._packing(), params=self.train_params, source=self.source)
        return StageCost(c.time_s, flops=c.flops)

    def _train(self, role, seq_lens, n_devices) -> StageCost:
        lay, lens = self.micro_batched(seq_lens, n_devices)
        c = train_step_cost(self.models[role], lay, self.topology, self._ranks[n_devices],
                            lens, packing=self._packing(), params=self.train_params, source=self.source)
        return StageCost(c.step_time_s, flops=c.model_flops, bubble_s=c.bubble_s,
                         peak_memory_bytes=c.memory.total_bytes)

    def reward_cpu_s(self, n_samples, ranks) -> float:
        r = self.scenario.workload.reward
        workers = max(1.0, r.workers_per_device * len(ranks))
        return r.cpu_s_per_sample * max(1.0, n_samples / workers)

    def _inference_shard_bytes(self) -> float:
        lay = self.rollout_layout
        return self.model.weight_bytes(self._weight_bytes_per_param()) / lay.devices_per_instance

    def _weight_bytes_per_param(self) -> float:
        return {"int8": 1.0, "fp8": 1.0}.get(self.rollout_layout.weight_dtype, 2.0)

    def weight_sync_s(self, src: range, dst: range) -> float:
        """Colocated (src == dst): reshard, each device receives its inference shard over scale-up.
        Split pools: every rollout instance needs the full weights from the trainer; bounded by the
        receivers' links and by the senders' aggregate links."""
        shard = self._inference_shard_bytes()
        if src == dst:
            # reshard inside each training replica + the instances on its devices: their own links
            # (a replica sits on consecutive ranks, one scale-up domain when it fits)
            local = list(src)[: max(self.train_group_devices, self.instance_devices)]
            bw = self.topology.bottleneck_bw_Bps(local) if len(local) > 1 else self.device.scaleup_bw_Bps
            return shard / (bw * self.sync_eff)
        ranks = sorted(set(src) | set(dst))
        bw = self.topology.bottleneck_bw_Bps(ranks) if len(ranks) > 1 else self.device.scaleup_bw_Bps
        bw *= self.sync_eff
        n_inst = max(1, len(dst) // self.instance_devices)
        total = n_inst * self.model.weight_bytes(self._weight_bytes_per_param())
        return max(shard / bw, total / (len(src) * bw))

    def _optimizer_grad_bytes(self, n_devices: int) -> float:
        lay = self.layout(n_devices)
        mem = memory_per_device(self.model, lay, 1.0, self.device.hbm_bytes)
        return mem.optimizer_bytes + mem.gradients_bytes

    def switch(self, to_phase, ranks) -> SwitchCost:
        n_devices = len(ranks)
        p = self.switch_params
        host_bw = self.device.host_link_bw_Bps * p.host_link_efficiency
        moved: dict[str, float] = {}
        t = p.kv_realloc_s + p.overhead_s
        if p.offload_optimizer:
            b = self._optimizer_grad_bytes(n_devices)
            moved["optimizer_offload" if to_phase == "rollout" else "optimizer_onload"] = b
            t += b / host_bw
        if to_phase == "rollout" and not p.bucketed:
            b = self._inference_shard_bytes()
            moved["redundant_weight_copy"] = b
            t += b / (self.device.hbm_bw_Bps * self.device.hbm_efficiency)
        return SwitchCost(t, moved)

    def inference_memory_bytes(self, ranks) -> float:
        """Rollout phase per device: the engine's share of HBM, plus what training leaves resident."""
        return self.rollout_phase_bytes(self.layout(len(ranks)))

    def train_layout_of(self, ranks) -> dict[str, Any]:
        return self.layout(len(ranks)).as_dict()

    def rollout_phase_bytes(self, lay: TrainLayout) -> float:
        """The rollout phase's bytes per device with training layout ``lay`` resident; on a colocated
        placement an RlsimError when they exceed HBM (a re-plan uses it to reject layouts)."""
        mem = memory_per_device(self.model, lay, 1.0, self.device.hbm_bytes)
        resident = mem.weights_bytes
        if not self.switch_params.offload_optimizer:
            resident += mem.optimizer_bytes + mem.gradients_bytes
        if not self.switch_params.bucketed:
            resident += self._inference_shard_bytes()
        engine = self.device.hbm_bytes * self.rollout_layout.gpu_memory_utilization
        total = engine + resident
        if self.scenario.schedule.effective_placement == "colocated" and total > self.device.hbm_bytes:
            raise RlsimError(
                f"the rollout phase needs {total / 1e9:.1f} GB per device (engine {engine / 1e9:.1f} GB + "
                f"resident training state {resident / 1e9:.1f} GB) on {self.device.hbm_bytes / 1e9:.0f} GB",
                source=self.source, field="workload.rollout_layout.gpu_memory_utilization",
                fix="lower gpu_memory_utilization, keep schedule.switch.offload_optimizer and bucketed on, "
                    "or use more devices per replica")
        return total

    def train_flops_per_token(self, seq_len) -> float:
        return float(self.model.train_flops_per_token(seq_len))
