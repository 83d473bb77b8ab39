"""Topology-aware placement: which physical rank plays which (tp, cp, dp, pp) coordinate.

The training cost model reads its ``ranks`` argument in the canonical Megatron order: TP varies
fastest, then CP, then DP (EP is the innermost part of DP), PP slowest. A placement is a
permutation of the physical ranks written in that canonical order, so the cost model needs no
new argument: the rank list *is* the placement.

A placement is built from a nesting ``order`` (innermost dimension first) laid over a list of
physical slots. The topology-aware planner sorts the slots by (domain, node, rank) so consecutive
slots share the fastest level, and tries the orders in ``AWARE_ORDERS``; the naive baseline lays
the canonical order over the ranks in plain index order, ignoring the topology.
"""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

DIMS = ("tp", "cp", "dp", "pp")  # canonical nesting, innermost first (llm/training.py convention)

# Topology-aware nestings, innermost first. TP (and CP) always innermost so they land in the
# fastest domain; then either PP inside / across domains with DP outermost (the rule),
# or DP (whose innermost part is EP) before PP, Megatron's default (arXiv 2104.04473 sec. 3.3).
AWARE_ORDERS: tuple[tuple[str, ...], ...] = (("tp", "cp", "pp", "dp"), ("tp", "cp", "dp", "pp"))
NAIVE_ORDER: tuple[str, ...] = DIMS


class TopologyLike(Protocol):
    def node_of(self, rank: int) -> int: ...
    def domain_of(self, rank: int) -> int: ...


@dataclass(frozen=True)
class Placement:
    """`ranks[i]` is the physical rank of canonical position i (tp fastest ... pp slowest)."""

    name: str
    order: tuple[str, ...]
    ranks: tuple[int, ...]


def locality_sorted(topology: TopologyLike, ranks: Sequence[int]) -> list[int]:
    """Ranks sorted so that neighbours share the fastest level: by domain, then node, then rank."""
    return sorted(ranks, key=lambda r: (topology.domain_of(r), topology.node_of(r), r))


def _sizes(tp: int, cp: int, dp: int, pp: int) -> dict[str, int]:
    return {"tp": tp, "cp": cp, "dp": dp, "pp": pp}


def _canonical_index(coords: dict[str, int], sizes: dict[str, int]) -> int:
    index, stride = 0, 1
    for dim in DIMS:
        index += coords[dim] * stride
        stride *= sizes[dim]
    return index


def lay_out(slots: Sequence[int], order: Sequence[str], tp: int, cp: int, dp: int, pp: int) -> tuple[int, ...]:
    """Assign consecutive slots to coordinates nested by `order`; return the canonical rank list."""
    sizes = _sizes(tp, cp, dp, pp)
    if sorted(order) != sorted(DIMS):
        raise ValueError(f"order must be a permutation of {DIMS}, got {tuple(order)}")
    total = tp * cp * dp * pp
    if len(slots) != total:
        raise ValueError(f"{len(slots)} ranks for a layout of {total} devices")
    # Slot index = sum coords[d] x stride over `order` (innermost first): a C-order array whose
    # axes are `order` reversed. Transposing to DIMS reversed and flattening gives canonical order.
    grid = np.asarray([int(r) for r in slots], dtype=np.int64).reshape([sizes[d] for d in reversed(order)])
    rev = list(reversed(order))
    canonical = grid.transpose([rev.index(d) for d in reversed(DIMS)])
    return tuple(canonical.ravel().tolist())


def groups(ranks: Sequence[int], dim: str, tp: int, cp: int, dp: int, pp: int) -> list[list[int]]:
    """The process groups of one dimension (e.g. every TP group) from a canonical rank list."""
    sizes = _sizes(tp, cp, dp, pp)
    others = [d for d in DIMS if d != dim]
    out: list[list[int]] = []

    def walk(i: int, coords: dict[str, int]) -> None:
        if i == len(others):
            out.append([ranks[_canonical_index({**coords, dim: k}, sizes)] for k in range(sizes[dim])])
            return
        for k in range(sizes[others[i]]):
            walk(i + 1, {**coords, others[i]: k})

    walk(0, {})
    return out


def aware_placements(topology: TopologyLike, ranks: Sequence[int], tp: int, cp: int, dp: int,
                     pp: int, fold: int = 1) -> list[Placement]:
    """The topology-aware candidates (distinct rank lists only): the one `rlsim run` uses first
    (run_placement), then the AWARE_ORDERS nestings. ``fold``: DP replicas per expert group
    (llm.train_layout.expert_fold; 1 without experts)."""
    key = (tuple(int(r) for r in ranks), tp, cp, dp, pp, fold)
    cache = _placement_cache(topology)
    hit = cache.get(key)
    if hit is None:
        if len(cache) > 4096:
            cache.clear()
        hit = cache[key] = _aware_placements(topology, cache, key[0], tp, cp, dp, pp, fold)
    return list(hit)


def run_placement(slots: Sequence[int], tp: int, cp: int, dp: int, pp: int, fold: int = 1) -> Placement:
    """The placement `rlsim run` trains on (rl/packing.replica_contiguous_ranks over the slots):
    each replica's TP x CP x PP consecutive, DP outermost, the ``fold`` replicas of a folded expert
    group together in Megatron's own order inside. fold 1 is the nesting tp-cp-pp-dp, fold dp
    tp-cp-dp-pp; in between it is neither, so the planner must offer it to price what run runs."""
    from ..rl.packing import replica_contiguous_ranks

    laid = tuple(int(slots[i]) for i in replica_contiguous_ranks(tp, cp, dp, pp, fold=fold))
    if fold in (1, dp):
        order = ("tp", "cp", "pp", "dp") if fold == 1 else ("tp", "cp", "dp", "pp")
        return Placement("aware:" + "-".join(order), order, laid)
    return Placement(f"aware:tp-cp-dp/{fold}-pp-dp", ("tp", "cp", "dp", "pp", "dp"), laid)


# Per topology object, held weakly: the entries die with the topology (no id() that a new topology
# could reuse, nothing kept alive). The values hold ranks only, never the topology.
_PLACEMENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _placement_cache(topology: TopologyLike) -> dict[tuple, tuple]:
    try:
        return _PLACEMENTS.setdefault(topology, {})
    except TypeError:  # a stand-in that cannot be weakly referenced: no cache
        return {}


def _aware_placements(topology: TopologyLike, cache: dict[tuple, tuple], ranks: tuple[int, ...], tp: int,
                      cp: int, dp: int, pp: int, fold: int) -> tuple[Placement, ...]:
    slots = cache.get(("slots", ranks))
    if slots is None:
        slots = cache[("slots", ranks)] = tuple(locality_sorted(topology, ranks))
    first = run_placement(slots, tp, cp, dp, pp, fold)
    seen: set[tuple[int, ...]] = {first.ranks}
    out = [first]
    for order in AWARE_ORDERS:
        laid = lay_out(slots, order, tp, cp, dp, pp)
        if laid not in seen:
            seen.add(laid)
            out.append(Placement("aware:" + "-".join(order), tuple(order), laid))
    return tuple(out)


def naive_placement(ranks: Sequence[int], tp: int, cp: int, dp: int, pp: int) -> Placement:
    """Rank-order placement: the canonical nesting over ranks in plain index order."""
    return Placement("naive:rank-order", NAIVE_ORDER, lay_out(sorted(ranks), NAIVE_ORDER, tp, cp, dp, pp))


def forced_placement(ranks: Sequence[int], order: Sequence[str], tp: int, cp: int, dp: int,
                     pp: int) -> Placement:
    """A placement with an explicit nesting over ranks in index order (e.g. TP outermost, to test it)."""
    return Placement("order:" + "-".join(order), tuple(order), lay_out(sorted(ranks), order, tp, cp, dp, pp))
