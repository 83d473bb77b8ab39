"""Megatron-Core's flex token dispatcher on DeepEP's normal kernels: how many ranks and nodes a token reaches.

Megatron-Core 0.13.0 MoEFlexTokenDispatcher (moe/token_dispatcher.py, moe/fused_a2a.py) dispatches and
combines over the expert-TP x EP group (tp_ep) with DeepEP's fused kernels (Buffer.dispatch / combine,
moe_enable_deepep). DeepEP sends a token ONCE to each rank that holds any of its top-k experts
(get_dispatch_layout's is_token_in_rank; the rank permutes the copies to its local experts itself), and
across nodes ONCE to each node that does: over RDMA to the rank of the same GPU index there, which
forwards it over NVLink to the ranks of that node that need it (DeepEP's Buffer.dispatch docstring:
"Internode kernels require the ranks in a node should be visible via NVLink, while the ranks with the
same GPU index should be visible via RDMA"; num_tokens_per_rdma_rank; DeepSeek-V3, arXiv 2412.19437 sec.
3.2.2: "IB ... then forwarded via NVLink"). The combine runs the same paths backwards, each node's
outputs summed before they cross RDMA. So a token's bytes are the distinct nodes (RDMA) and distinct
ranks (NVLink) it reaches, not its k copies as an NCCL all-to-all (the alltoall dispatcher) sends.

With a balanced router (every expert equally likely, as llm/expert_load.py takes it) a token's k
experts are k distinct draws from E; with group-limited routing (ModelSpec.expert_groups,
expert_groups_per_token: DeepSeek-V3's 4 of 8 groups) the token first picks G of the n groups
uniformly, then its k experts among their G E / n. A bin of experts (a rank's, or a node's) holding
m(S) of the experts of the picked groups S is missed with probability C(G E / n - m(S), k) /
C(G E / n, k); averaged over the C(n, G) group choices (m(S) a sum over S, counted by a subset-sum
table), the expected bins a token reaches is the sum over bins of one minus that: exact for that
routing, not a sample. Megatron places expert e on EP rank e // (E / ep), its expert-TP ranks beside
it (expert rank order tp-ep-dp); groups are runs of E / n consecutive experts (DeepseekV3MoE's
scores.view(-1, n_group, E // n_group)).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache


def _group_counts(ep_ranks: Sequence[int], num_experts: int, ep: int, groups: int) -> tuple[int, ...]:
    """Experts of each routing group held by the EP ranks ``ep_ranks`` (each holds E / ep consecutive
    experts)."""
    per_rank, per_group = num_experts // ep, num_experts // groups
    counts = [0] * groups
    for rank in sorted(set(ep_ranks)):
        for expert in range(rank * per_rank, (rank + 1) * per_rank):
            counts[expert // per_group] += 1
    return tuple(counts)


@lru_cache(maxsize=1024)
def miss_probability(counts: tuple[int, ...], num_experts: int, experts_per_token: int,
                     groups_per_token: int) -> float:
    """Probability that a token's k experts avoid a bin holding ``counts[j]`` experts of routing group j
    (len(counts) groups of E / n consecutive experts), the token picking ``groups_per_token`` groups
    uniformly (0: all of them) and then k distinct experts uniformly among theirs."""
    n = len(counts)
    picked = groups_per_token or n
    pool = picked * num_experts // n
    # ways[c][s]: subsets of c groups whose bin counts sum to s
    ways = [[0] * (sum(counts) + 1) for _ in range(picked + 1)]
    ways[0][0] = 1
    for held in counts:
        for c in range(picked, 0, -1):
            row, prev = ways[c], ways[c - 1]
            for s in range(len(row) - 1, held - 1, -1):
                row[s] += prev[s - held]
    total = math.comb(pool, experts_per_token)
    missed = sum(count * math.comb(pool - s, experts_per_token) for s, count in enumerate(ways[picked]) if count)
    return missed / (math.comb(n, picked) * total)


def expected_bins_reached(bins: Sequence[Sequence[int]], num_experts: int, experts_per_token: int, ep: int,
                          groups: int = 1, groups_per_token: int = 0) -> float:
    """Expected number of ``bins`` (each a list of EP rank indices: a rank's own, or a node's) that hold
    at least one of a token's experts, under the routing of the module docstring."""
    return sum(1.0 - miss_probability(_group_counts(b, num_experts, ep, groups), num_experts, experts_per_token,
                                      groups_per_token) for b in bins)


def reach(ep_of_rank: Sequence[int], node_of_rank: Sequence[int], num_experts: int, experts_per_token: int,
          ep: int, groups: int = 1, groups_per_token: int = 0) -> tuple[float, float]:
    """(expected distinct ranks, expected distinct nodes) a token reaches in the flex dispatcher's
    group: rank i of it holds the experts of EP index ``ep_of_rank[i]`` and sits in node
    ``node_of_rank[i]`` (any labels)."""
    nodes: dict[int, list[int]] = {}
    for e, d in zip(ep_of_rank, node_of_rank, strict=True):
        nodes.setdefault(d, []).append(e)
    ranks = expected_bins_reached([[e] for e in ep_of_rank], num_experts, experts_per_token, ep, groups,
                                  groups_per_token)
    return ranks, expected_bins_reached(list(nodes.values()), num_experts, experts_per_token, ep, groups,
                                        groups_per_token)
