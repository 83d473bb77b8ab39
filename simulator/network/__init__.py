"""Network layer: flows sharing links (max-min fair) and collectives over device groups."""
from .collectives import (
    ALGORITHMS,
    OPS,
    CollectiveCost,
    CollectiveModel,
    CollectiveParams,
    CollectivePlan,
    Phase,
    bus_factor,
    parse_group,
)
from .flows import FlowNetwork, FlowRecord, FlowStats

__all__ = ["ALGORITHMS", "OPS", "CollectiveCost", "CollectiveModel", "CollectiveParams", "CollectivePlan",
           "FlowNetwork", "FlowRecord", "FlowStats", "Phase", "bus_factor", "parse_group"]
