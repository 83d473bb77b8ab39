"""RL algorithms as stage graphs: which models run which stage, and in what order.

generate -> reward (rule on host CPUs, or a reward model) / old-logprob / reference / critic values
-> train (PPO epochs x mini-batches; PPO also trains the critic) -> weight sync.
The schedules walk these graphs; they never hard-code an algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..scenario import WorkloadConfig

if TYPE_CHECKING:
    # networkx only for graph() (inspection): the run path orders a handful of stages itself, and
    # importing networkx was ~30% of `rlsim run`'s start-up (benchmarks/bench_startup.py)
    import networkx as nx

# Stage kinds the schedules know how to place.
GENERATE, REWARD_CPU, FORWARD, TRAIN, SYNC = "generate", "reward_cpu", "forward", "train", "sync"
REWARD_SERVED = "reward_served"     # a reward model on engines of its own (workload.reward.served)
SERVED_FORWARD = "served_forward"   # the trainer's batch scored on a served pool (distillation.handover step)


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str            # generate | reward_cpu | reward_served | forward | served_forward | train | sync
    role: str            # actor | reference | reward | critic | host | reward_model / teacher (served pools)
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Algorithm:
    name: str
    stages: tuple[Stage, ...]
    dynamic_sampling: bool = False

    def graph(self) -> nx.DiGraph:
        import networkx as nx
        g = nx.DiGraph()
        for s in self.stages:
            g.add_node(s.name, stage=s)
            for dep in s.after:
                g.add_edge(dep, s.name)
        return g

    def ordered(self) -> list[Stage]:
        """Stages in a deterministic topological order: next, of the stages whose dependencies are
        placed, the one listed first (networkx's lexicographical_topological_sort keyed on the
        list position)."""
        order = _topological(self.stages)
        if order is None:
            raise AssertionError("stage graph must be acyclic")
        return order

    def of_kind(self, kind: str) -> list[Stage]:
        return [s for s in self.ordered() if s.kind == kind]

    @property
    def roles(self) -> set[str]:
        return {s.role for s in self.stages if s.role != "host"}


def _topological(stages: tuple[Stage, ...]) -> list[Stage] | None:
    """The stages, each after those it runs after, earlier-listed first among the ready ones; None
    when some cannot be placed (a cycle, or a dependency that is not a stage)."""
    order: list[Stage] = []
    placed: set[str] = set()
    left = list(stages)
    while left:
        ready = next((s for s in left if placed.issuperset(s.after)), None)
        if ready is None:
            return None
        order.append(ready)
        placed.add(ready.name)
        left.remove(ready)
    return order


def build_algorithm(workload: WorkloadConfig) -> Algorithm:
    stages: list[Stage] = [Stage("generate", GENERATE, "actor")]
    if workload.reward.kind == "rule":
        stages.append(Stage("reward", REWARD_CPU, "host", ("generate",)))
    elif workload.reward.served is not None and workload.reward.served.devices is not None:
        stages.append(Stage("reward", REWARD_SERVED, "reward_model", ("generate",)))
    else:
        stages.append(Stage("reward", FORWARD, "reward", ("generate",)))
    stages.append(Stage("old_logprob", FORWARD, "actor", ("generate",)))
    if workload.reference:
        stages.append(Stage("reference", FORWARD, "reference", ("generate",)))
    if workload.distillation is not None and workload.distillation.handover == "step":
        stages.append(Stage("teacher", SERVED_FORWARD, "teacher", ("generate",)))
    before_train = [s.name for s in stages if s.name != "generate"]
    if workload.algorithm == "ppo":
        stages.append(Stage("critic_values", FORWARD, "critic", ("generate",)))
        before_train.append("critic_values")
        stages.append(Stage("train_critic", TRAIN, "critic", tuple(before_train)))
    stages.append(Stage("train_actor", TRAIN, "actor", tuple(before_train)))
    stages.append(Stage("weight_sync", SYNC, "actor", ("train_actor",)))
    if _topological(tuple(stages)) is None:
        raise AssertionError("stage graph must be acyclic")
    return Algorithm(workload.algorithm, tuple(stages),
                     dynamic_sampling=workload.dynamic_sampling is not None)
