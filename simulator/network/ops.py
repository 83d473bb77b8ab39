"""The names of the collectives and of their algorithms: a module with no imports, so the command
line lists them (`rlsim comm --op`) without loading the topology and collective models."""
from __future__ import annotations

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "p2p")
ALGORITHMS = ("ring", "tree", "hierarchical", "direct")
