"""The rollout engine's KV-cache pool: vLLM V1's hybrid KV cache manager in closed form.

vLLM 0.11 (read in its wheel) keeps one pool of equal pages for every kind of layer that caches
something, and draws from it per running sequence:

- Grouping (``v1/core/kv_cache_utils.py`` ``_get_kv_cache_groups_uniform_page_size``): the layers
  are sorted by kind (full attention, sliding-window attention, Mamba / linear-attention state), the
  group size is the smallest kind's layer count, and each kind is cut into ceil(count / size)
  groups of that size, the last one padded. Gemma-3-27B (10 full, 52 sliding layers): groups of 10,
  one full and six sliding (vLLM deals the 52 round the six, 9, 9, 9, 9, 8 and 8, each
  group's pages sized for 10). One kind alone is one group
  of all its layers.
- A pool block is one page of every layer of a group (``get_kv_cache_config_from_groups``:
  ``num_blocks = available // page_size // group_size``); every group draws whole blocks from the
  one pool (``block_pool.py``).
- Draws (``v1/core/single_type_kv_cache_manager.py``): a full-attention group one block per
  ``block_size`` tokens of the sequence (``FullAttentionManager``); a sliding-window group at most
  ``cdiv(window - 1, block_size) + 1`` blocks (``SlidingWindowManager.remove_skipped_blocks`` frees
  the blocks behind the window); a Mamba group one block, the sequence's state (``MambaManager``).
- A hybrid of attention and Mamba layers pages its attention in blocks large enough to hold one
  Mamba layer's state (``model_executor/models/config.py`` ``HybridAttentionMambaModelConfig``:
  attention block = 16 x cdiv(mamba page, 16 x attention page of one token); the Mamba page is
  padded up to it).

rlsim counts the full-attention draws in tokens, not blocks (the capacity of a full-attention
model is exactly today's: free bytes // KV bytes a token), and states every other draw in the
same unit: ``seq_tokens``, the context tokens' worth of pool a running sequence draws beside its
own tokens. A sliding-window group's draw is taken at its bound from admission on (a sequence
shorter than the window draws less in vLLM). Without a full-attention group a sequence draws
nothing per token and the pool bounds the running sequences instead (``max_seqs``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..engine_software import mixes_windows

# KV capacity of an engine whose model caches nothing per token (no full-attention layer): a bound
# no run reaches, kept an int as the capacities of the rest are.
UNBOUNDED_KV_TOKENS = 2**62


def kv_pages_matter(model: Any, chunked_paged: bool = False, manager: bool = True) -> bool:
    """Whether the model has layers whose draw is counted in pages (sliding-window, Mamba or linear
    attention): only those read the page size (InferenceParams.kv_block_size). Llama 4's chunked
    layers count only where the hybrid manager pages them (``chunked_paged``: hybrid_kv_chunked_attention);
    by default vLLM caches them as full attention. Without the hybrid manager (``manager``:
    hybrid_kv_cache_manager) a model that mixes windows with full attention caches them all whole."""
    windows = (model.num_sliding_layers and (chunked_paged or not getattr(model, "chunked_attention", False))
               and windows_paged(model, manager))
    return bool(windows or model.num_mamba_layers or model.num_linear_layers)


def windows_paged(model: Any, manager: bool) -> bool:
    """Whether the model's sliding-window layers draw a window's pages (else every token, as full
    attention): always with the hybrid KV cache manager (``manager``), and without it only in a model
    of windows alone (one kind of spec, which vLLM leaves to its sliding-window manager)."""
    return manager or not mixes_windows(model)


@dataclass(frozen=True)
class KvCacheGroups:
    """vLLM's KV cache groups of a model: each holds ``layers_per_group`` layers (padded) of one kind."""

    layers_per_group: int
    full: int      # groups of full-attention layers (a page per block_size tokens)
    window: int    # groups of sliding-window layers (a window's pages a sequence)
    state: int     # groups of Mamba / linear-attention layers (one page a sequence)

    @property
    def count(self) -> int:
        return self.full + self.window + self.state


def kv_cache_groups(full_layers: int, window_layers: int, state_layers: int) -> KvCacheGroups:
    """The groups vLLM cuts these layers into: the group size is the smallest kind's layer count,
    each kind ceil(count / size) groups (kv_cache_utils.py _get_kv_cache_groups_uniform_page_size;
    one kind alone is one group of all its layers, as _get_kv_cache_groups_uniform_spec)."""
    counts = (full_layers, window_layers, state_layers)
    if min(counts) < 0:
        raise ValueError(f"layer counts must not be negative, got {counts}")
    present = [count for count in counts if count]
    if not present:
        return KvCacheGroups(0, 0, 0, 0)
    size = min(present)
    full, window, state = (math.ceil(count / size) for count in counts)
    return KvCacheGroups(size, full, window, state)


def window_blocks(window: int, block_size: int) -> int:
    """Blocks a sliding-window group holds for a running sequence at most: cdiv(window - 1, block_size)
    + 1 (SlidingWindowManager.remove_skipped_blocks keeps the blocks from token num_computed - window + 1
    on, and a decode step allocates the next token's)."""
    return math.ceil((window - 1) / block_size) + 1


# The tokens vLLM aligns a Mamba hybrid's attention block to (model_executor/models/config.py
# HybridAttentionMambaModelConfig: attn_block_size = 16 x cdiv(mamba page, 16 x one token's page)).
HYBRID_BLOCK_ALIGNMENT_TOKENS = 16


def hybrid_attention_block(state_page_bytes: float, token_page_bytes: float, block_size: int) -> int:
    """Tokens an attention block holds in a model with Mamba layers: the smallest multiple of 16
    tokens whose page of one layer holds one layer's Mamba state, or ``block_size`` (the engine's
    --block-size) where that is larger (HybridAttentionMambaModelConfig keeps a given block size at
    least attn_block_size)."""
    align = HYBRID_BLOCK_ALIGNMENT_TOKENS
    return max(block_size, align * max(1, math.ceil(state_page_bytes / (align * token_page_bytes))))


@dataclass(frozen=True)
class KvPoolShape:
    """What one device caches per layer of each kind (its share of the heads, in the cache dtypes).

    ``token_elems_per_layer``: one token's cached elements on one attention layer (2 x KV heads x
    head_dim; MLA's latent); ``state_bytes_per_layer``: one Mamba / linear-attention layer's state of
    a sequence; ``share``: the pipeline stage's share of the layers (1 without stages)."""

    full_layers: int
    window_layers: int
    state_layers: int
    token_elems_per_layer: int
    kv_bytes_per_elem: float
    state_bytes_per_layer: float
    window: int
    block_size: int
    share: float = 1.0

    @property
    def groups(self) -> KvCacheGroups:
        return kv_cache_groups(self.full_layers, self.window_layers, self.state_layers)

    @property
    def token_bytes(self) -> float:
        """Pool bytes one context token draws: a token on every layer of the full-attention groups
        (their padding included)."""
        g = self.groups
        return g.full * g.layers_per_group * self.token_elems_per_layer * self.kv_bytes_per_elem * self.share

    def block_tokens(self) -> int:
        """Tokens of a pool block: block_size, or with Mamba layers beside attention the larger block
        whose attention page holds a Mamba layer's state."""
        has_attention = self.full_layers or self.window_layers
        if self.state_layers and has_attention:
            return hybrid_attention_block(self.state_bytes_per_layer, self.token_elems_per_layer * self.kv_bytes_per_elem,
                                          self.block_size)
        return self.block_size

    def seq_slot_tokens(self) -> int:
        """A running sequence's draw beside its tokens, in token slots of one group (block tokens x
        blocks): its windows' blocks on every sliding-window group, a block on every state group."""
        g = self.groups
        block = self.block_tokens()
        return g.window * window_blocks(self.window, block) * block + g.state * block

    def seq_bytes(self) -> float:
        """Pool bytes a running sequence draws beside its tokens (seq_slot_tokens on the pages of a
        group; a pure state model's page is its state)."""
        g = self.groups
        if self.full_layers or self.window_layers:
            page_token = g.layers_per_group * self.token_elems_per_layer * self.kv_bytes_per_elem * self.share
            return self.seq_slot_tokens() * page_token
        return g.state * g.layers_per_group * self.state_bytes_per_layer * self.share


@dataclass(frozen=True)
class KvPool:
    """One device's pool after weights and workspace: what it holds and what a sequence draws;
    ``state_bytes``: a sequence's Mamba / linear-attention state on the device (what a decode step
    reads and writes of it)."""

    shape: KvPoolShape
    free_bytes: float
    state_bytes: float = 0.0

    @property
    def token_bytes(self) -> float:
        """Pool bytes one context token draws (shape.token_bytes)."""
        return self.shape.token_bytes

    @property
    def seq_bytes(self) -> float:
        """Pool bytes a running sequence draws beside its tokens (shape.seq_bytes)."""
        return self.shape.seq_bytes()

    @property
    def capacity_tokens(self) -> int:
        """Context tokens the pool holds (full-attention draws), UNBOUNDED_KV_TOKENS without them."""
        token_bytes = self.shape.token_bytes
        return int(self.free_bytes // token_bytes) if token_bytes > 0 else UNBOUNDED_KV_TOKENS

    @property
    def seq_tokens(self) -> int:
        """Context tokens' worth of pool a running sequence draws beside its own tokens: its window
        and state blocks over the full-attention groups' draw a token, rounded up (0 for a model of
        full attention only, or without full attention: max_seqs bounds those)."""
        g = self.shape.groups
        return math.ceil(self.shape.seq_slot_tokens() / g.full) if g.full else 0

    @property
    def max_seqs(self) -> int | None:
        """Running sequences the pool holds when nothing draws per token (no full-attention layer):
        free bytes // a sequence's draw; None when tokens draw (capacity_tokens bounds them)."""
        if self.shape.token_bytes > 0:
            return None
        seq_bytes = self.shape.seq_bytes()
        return int(self.free_bytes // seq_bytes) if seq_bytes > 0 else None
