"""The planner's shared types: a training layout choice, the evaluation of a candidate, the
planner constants and the rollout space. The search (search.py, rollout.py) and the real
evaluators (evaluate.py) both import them from here, so neither imports the other for types."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from ..errors import RefusedBeforeTiming as RefusedBeforeTiming  # where the planner's modules take it
from ..errors import RlsimError
from ..strict_model import StrictModel

Size = Annotated[int, Field(gt=0)]   # a parallel degree, a running-sequence cap or a micro-batch: 1 or more


@dataclass(frozen=True, order=True)
class TrainChoice:
    """One training layout; field names follow llm/training.py TrainLayout and the plan JSON."""

    tp: int
    pp: int
    vpp: int
    dp: int
    ep: int
    cp: int
    zero: int
    recompute: str
    micro_batch: int
    # None: the software stack's rule (on with TP for Megatron-Core); a bool when the space searches it
    sequence_parallel: bool | None = None
    # Expert tensor-parallel size of an MoE layout (TrainLayout.etp); None on a dense model
    etp: int | None = None
    # ZeRO state sharded within groups of this many dp x cp ranks (TrainLayout.zero_shard_size; HSDP);
    # None: over all of them
    zero_shard_size: int | None = None
    # Megatron's full-recompute method and its layer count (TrainLayout.recompute_method /
    # recompute_num_layers): block N where the search found the fewest checkpointed layers that fit
    recompute_method: str = "uniform"
    recompute_num_layers: int = 1

    def as_dict(self) -> dict[str, Any]:
        """The layout keys; sequence_parallel only when the search chose it (None is not a layout
        choice), etp only on an MoE model (so that `rlsim run` given the layout trains the same one),
        the recompute method and its layers only away from uniform 1."""
        out = asdict(self)
        for key in ("sequence_parallel", "etp", "zero_shard_size"):
            if out[key] is None:
                del out[key]
        if self.recompute_method == "uniform" and self.recompute_num_layers == 1:
            del out["recompute_method"], out["recompute_num_layers"]
        return out

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


@dataclass(frozen=True)
class Evaluation:
    """What the plan reports per candidate (contract keys of `rlsim plan --json`)."""

    step_time_s: float
    tflops_per_device: float
    mfu: float
    memory_per_device_bytes: float
    comm_fraction: float
    # fuse: actor: the aux pool's train-phase peak a device (the critic's update beside what stays there,
    # as the run notes it: LlmCosts.aux_passes_fit); None where no update runs on an aux pool
    aux_pool_memory_per_device_bytes: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON keys: the aux pool's peak only where there is one."""
        out = asdict(self)
        if out["aux_pool_memory_per_device_bytes"] is None:
            del out["aux_pool_memory_per_device_bytes"]
        return out


class NoLayoutFits(RlsimError):
    """A search (or a re-plan's searches) in which no layout fitted, with the planning cost of what it
    evaluated before it gave up (PlannerParams.search_cost_s): a caller that goes on (a re-plan on
    fewer nodes, a second try with another rule) charges it, as it charges a search that found one."""

    def __init__(self, message: str, *, planning_cost_s: float, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.planning_cost_s = planning_cost_s


class PlannerParams(StrictModel):
    """Planner constants; reachable as `planner.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Skip more recomputation once a layout fits with less: recompute only adds compute (formulas.md,
    # Megatron eq. 3: 72 -> 96), so the skipped variants cannot be faster.
    dominance_prune: bool = True
    # Candidates re-evaluated under every aware placement and the naive one after the first pass.
    refine_top: int = Field(8, ge=0)
    # Modelled planning cost, counted in simulated time (wall clock would break determinism).
    # eval_cost_s: the seconds a candidate whose step is timed costs (a train_step_cost query; a rollout
    # layout's simulate_rollout), and each further query a check times for it (a failure re-plan's).
    # 5 ms is llm/training.py's target for one train_step_cost query (issue 7:
    # 1,000 queries <= 10 s), a budget, not a measurement. `python benchmarks/bench_planner.py` (section 4)
    # prints what a timed evaluation takes on the machine it runs on: 4.0-5.0 ms for the default scenario's
    # `layout: auto` search, 2.0 ms for grpo-qwen2.5-7b on one DGX H100 node (--quick), on the project's
    # 2-core VM (machine-speed reference 5.4-6.7 ms). The mean over every evaluation, refusals included
    # (0.55-0.68 ms there), is not this figure. Set it to the planning host's.
    eval_cost_s: float = Field(5e-3, ge=0)
    # A candidate the evaluator refuses before timing its step (memory, the rollout phase beside it, the
    # pools, room beside a consolidated tail: TrainingEvaluator._judge raises RefusedBeforeTiming) costs
    # this fraction of eval_cost_s; it was charged as a timed one (91% of the default scenario's 35,059
    # evaluations are such refusals). Measured with benchmarks/bench_planner.py (section 4, the refused /
    # timed ratio of the mean seconds): 0.047-0.049 on the default scenario's search (32,044 refusals at
    # 0.19-0.25 ms against 3,007 timed at 4.0-5.0 ms); 0.14 for grpo-qwen2.5-7b on one node, whose steps
    # time faster. Rounded to the default scenario's. A failure re-plan's refusals before timing (the
    # schedule's own check too, LlmCosts.accept_train_layout: the rollout phase, the latest batches' memory)
    # measured 0.040 of its timed evaluations (0.77 ms against 19.5 ms: the default scenario losing node 3
    # at 1,200 s, timed around the search's evaluator calls on the project's 2-core VM); 0.020 (0.31-0.34 ms
    # against 16.4 ms, machine-speed reference 5.9-6.6 ms) since LlmCosts balances each demanding batch once per
    # (rows, dp) (it was 0.52-0.62 ms in the same runs before: the memory refusals 1.2-1.6 ms, now 0.5-0.9).
    # A timed one there makes up to four train_step_cost queries (the schedule's check times up to three
    # latest batches, then the step) and is charged eval_cost_s each (an evaluator's checks_timed,
    # search._Work), against which a refusal's ~0.33 ms is about 0.07 of a query's 5 ms.
    refused_cost_fraction: float = Field(0.05, ge=0)
    # The most of a step the recompute of full uniform recompute can take: it runs each layer's forward again,
    # and a layer's backward is at least its forward (two GEMMs for each of the forward's), so the recompute
    # is at most a third of the compute (a quarter at Megatron's FLOP counts: eq. 3, 72 -> 96) and a block
    # layout's step at least the full one's (1 - this). Bounds the block search (search._add_block_layouts):
    # a layout whose full-recompute step less this share cannot rank among the plan's kept ones is not
    # searched. 1 searches every one.
    recompute_step_share_max: float = Field(1 / 3, ge=0, le=1)
    fixed_cost_s: float = Field(0.0, ge=0)  # the search has no fixed part; restarting a job is RecoveryParams.restart_s

    def search_cost_s(self, timed: int, refused: int = 0, *, fixed: bool = True) -> float:
        """The modelled seconds of a search that timed ``timed`` candidates and refused ``refused``
        before timing them: eval_cost_s each timed, refused_cost_fraction of it each refused, and the
        fixed part unless ``fixed`` is false (work added to a search made already)."""
        return (self.fixed_cost_s if fixed else 0.0) + (timed + refused * self.refused_cost_fraction) * self.eval_cost_s


class RolloutSpace(StrictModel):
    """Rollout layouts tried and the batch they are judged on; `planner.rollout.<field>`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: list[Size] = Field(default_factory=lambda: [1, 2, 4, 8, 16])
    ep: list[Size] | None = None  # None: 1 for dense; powers of two dividing the experts for MoE
    max_ep: Size = 64
    # pipeline stages of an engine (vLLM's pipeline_parallel_size); [1] by default: give e.g. [1, 2, 4]
    # to weigh TP inside a node and PP across against TP across nodes (docs/planner.md)
    pp: list[Size] = Field(default_factory=lambda: [1])
    max_num_seqs: list[Size] = Field(default_factory=lambda: [256])  # vLLM's default max_num_seqs
    # the engine's share of HBM (vLLM's gpu_memory_utilization, default 0.9); `layout: auto` on a
    # colocated placement lowers it to what the resident training state leaves (autoplan.py)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    # The batch the layouts are judged on (a GRPO step of the default workload's shape):
    sequences: int = Field(1024, gt=0)
    prompt_len: int = Field(512, gt=0)
    response_len: int = Field(2048, gt=0)
