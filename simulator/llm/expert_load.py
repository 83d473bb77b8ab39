"""The busiest expert-parallel rank's routed tokens over the mean: what paces an MoE layer under EP.

Megatron-Core trains MoE dropless by default (TransformerConfig.moe_expert_capacity_factor None: no
token dropped and none padded; megatron/core/transformer/moe/moe_layer.py, token_dispatcher.py
MoEAlltoAllTokenDispatcher): each EP rank's grouped expert GEMMs run over the rows it received, and
the combine all-to-all waits for the rank that received the most. Even a perfectly balanced router
leaves those counts random. With n tokens routed together in a micro-batch, each picking k distinct
experts of E (sampling without replacement), and E / ep experts a rank, a token's copies on the ep
ranks are multivariate hypergeometric: per rank mean k / ep, variance k p (1 - p) c, covariance
-k p^2 c between ranks (p = 1 / ep, c = (E - k) / (E - 1)). Summed over n independent tokens, the
per-rank counts are (central limit) normal with mean mu = n k / ep and that equicorrelated
covariance, which is the law of s (Z_i - mean Z) for ep iid standard normals Z_i with
s^2 = mu c. So E[max] = mu + s e(ep), e(ep) the expected maximum of ep standard normals
(computed by quadrature), and the busiest-rank factor is

    f(n, k, E, ep) = 1 + e(ep) sqrt(c / mu)

(1 at ep 1, falls towards 1 as n grows, grows with ep). It leaves out the router's own skew (a
trained router is not uniform) and the correlation of the routing between a sequence's tokens:
ComputeParams.moe_load_imbalance replaces it with a measured value (docs/cost-models-training.md).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# Quadrature of E[max of ep standard normals] = integral of x ep phi(x) Phi(x)^(ep - 1): the grid's
# half-width (the integrand is below 1e-20 past 10 for any ep up to 10^6) and its points.
_QUADRATURE_HALF_WIDTH = 10.0
_QUADRATURE_POINTS = 4001


@lru_cache(maxsize=64)
def expected_max_standard_normal(count: int) -> float:
    """E[max of `count` iid standard normals] (0 for one), by the trapezoid rule on a fixed grid:
    a pure function of `count`, the same whatever ran before."""
    if count <= 1:
        return 0.0
    x = np.linspace(-_QUADRATURE_HALF_WIDTH, _QUADRATURE_HALF_WIDTH, _QUADRATURE_POINTS)
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x.tolist()])
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    integrand = x * count * pdf * cdf ** (count - 1)
    return float(np.sum((integrand[1:] + integrand[:-1]) * 0.5 * np.diff(x)))


def busiest_rank_factor(tokens: np.ndarray | float, experts_per_token: int, num_experts: int,
                        ep: int) -> np.ndarray:
    """Expected routed rows of the busiest of `ep` ranks over the mean, for micro-batches that route
    `tokens` tokens together (the EP group's), each to `experts_per_token` distinct experts of
    `num_experts` drawn uniformly (a balanced router), E / ep experts a rank; 1 where nothing is routed."""
    n = np.asarray(tokens, dtype=float)
    if ep <= 1:
        return np.ones_like(n)
    k, e = int(experts_per_token), int(num_experts)
    without_replacement = (e - k) / (e - 1) if e > 1 else 0.0
    mean_rows = n * k / ep
    with np.errstate(divide="ignore", invalid="ignore"):
        spread = np.where(mean_rows > 0, np.sqrt(without_replacement / np.maximum(mean_rows, 1e-300)), 0.0)
    return 1.0 + expected_max_standard_normal(int(ep)) * spread


def routed_load_factor(num_experts: int, experts_per_token: int, tokens: np.ndarray | float, *, tp: int, ep: int,
                       etp: int, imbalance: float | None, capacity_factor: float | None = None,
                       pad_to_capacity: bool = False) -> np.ndarray | None:
    """The busiest EP rank's routed rows over the mean, per micro-batch of `tokens` tokens on one
    rank (after CP), or None without expert parallelism (ep 1: no rank waits for another). The EP
    group routes ep x tokens x etp / tp tokens together (each rank's tokens / tp with SP, gathered
    over the expert-TP group). ``imbalance`` (ComputeParams.moe_load_imbalance): a measured factor
    that replaces the derived one. ``capacity_factor`` (moe_expert_capacity_factor): Megatron-Core's
    token dropping caps each rank at that many times the mean, min(factor, capacity); with
    ``pad_to_capacity`` every expert computes its capacity: the capacity factor itself."""
    if ep <= 1 or not num_experts:
        return None
    n = np.asarray(tokens, dtype=float)
    if capacity_factor is not None and pad_to_capacity:
        return np.full(n.shape, float(capacity_factor))
    if imbalance is not None:
        load = np.full(n.shape, float(imbalance))
    else:
        load = busiest_rank_factor(n * ep * etp / tp, experts_per_token, num_experts, ep)
    return load if capacity_factor is None else np.minimum(load, float(capacity_factor))
