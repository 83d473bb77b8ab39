"""RL algorithms as stage graphs: which models run which stage, and in what order.

generate -> reward (rule on host CPUs, or a reward model) / old-logprob / reference / critic values
-> train (PPO epochs x mini-batches; PPO also trains the critic) -> weight sync.
The schedules walk these graphs; they never hard-code an algorithm.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..scenario import WorkloadConfig

# Stage kinds the schedules know how to place.
GENERATE, REWARD_CPU, FORWARD, TRAIN, SYNC = "generate", "reward_cpu", "forward", "train", "sync"


@dataclass(frozen=True)
class Stage:
    name: str
    kind: str            # generate | reward_cpu | forward | train | sync
    role: str            # actor | reference | reward | critic | host
    after: tuple[str, ...] = ()


@dataclass(frozen=True)
class Algorithm:
    name: str
    stages: tuple[Stage, ...]
    dynamic_sampling: bool = False

    def graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for s in self.stages:
            g.add_node(s.name, stage=s)
            for dep in s.after:
                g.add_edge(dep, s.name)
        return g

    def ordered(self) -> list[Stage]:
        """Stages in a deterministic topological order."""
        by_name = {s.name: s for s in self.stages}
        return [by_name[n] for n in nx.lexicographical_topological_sort(self.graph(),
                                                                        key=lambda n: [s.name for s in self.stages].index(n))]

    def of_kind(self, kind: str) -> list[Stage]:
        return [s for s in self.ordered() if s.kind == kind]

    @property
    def roles(self) -> set[str]:
        return {s.role for s in self.stages if s.role != "host"}


def build_algorithm(workload: WorkloadConfig) -> Algorithm:
    stages: list[Stage] = [Stage("generate", GENERATE, "actor")]
    if workload.reward.kind == "rule":
        stages.append(Stage("reward", REWARD_CPU, "host", ("generate",)))
    else:
        stages.append(Stage("reward", FORWARD, "reward", ("generate",)))
    stages.append(Stage("old_logprob", FORWARD, "actor", ("generate",)))
    if workload.reference:
        stages.append(Stage("reference", FORWARD, "reference", ("generate",)))
    before_train = [s.name for s in stages if s.name != "generate"]
    if workload.algorithm == "ppo":
        stages.append(Stage("critic_values", FORWARD, "critic", ("generate",)))
        before_train.append("critic_values")
        stages.append(Stage("train_critic", TRAIN, "critic", tuple(before_train)))
    stages.append(Stage("train_actor", TRAIN, "actor", tuple(before_train)))
    stages.append(Stage("weight_sync", SYNC, "actor", ("train_actor",)))
    if not nx.is_directed_acyclic_graph(Algorithm(workload.algorithm, tuple(stages)).graph()):
        raise AssertionError("stage graph must be acyclic")
    return Algorithm(workload.algorithm, tuple(stages),
                     dynamic_sampling=workload.dynamic_sampling is not None)
