"""Hardware layer: device specs and the cluster as a networkx graph."""
from .devices import DeviceSpec, device_from_mapping, device_names, get_device
from .topology import Topology, load_topology

__all__ = ["DeviceSpec", "Topology", "device_from_mapping", "device_names", "get_device", "load_topology"]
