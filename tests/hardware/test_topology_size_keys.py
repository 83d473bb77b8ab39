"""A size given for a topology (nodes / domains / supernodes / racks) replaces the size the preset or
the base scenario had, in whichever unit (issue 14 class 8: `--grid topology.preset=dgx-h100
--grid topology.nodes=8` failed every point on the default topology's `supernodes: 1`)."""
import pytest

from simulator.errors import RlsimError
from simulator.hardware.topology import _COUNT_KEYS, load_topology
from simulator.scenario import TOPOLOGY_SIZE_KEYS, load_scenario


def test_the_two_lists_of_size_keys_agree():
    assert tuple(TOPOLOGY_SIZE_KEYS) == tuple(_COUNT_KEYS)


def test_a_size_in_another_unit_replaces_the_presets():
    assert load_topology({"preset": "dgx-h100", "supernodes": 2}).num_devices == 16
    assert load_topology("dgx-h100", {"nodes": 3}).num_devices == 24
    with pytest.raises(RlsimError, match="exactly one of"):
        load_topology({"preset": "dgx-h100", "nodes": 2, "supernodes": 1})


def test_changing_the_preset_and_its_size_drops_the_default_topologys_size():
    sc = load_scenario(workload="grpo-qwen2.5-7b", overrides=["topology.preset=dgx-h100", "topology.nodes=2"])
    assert sc.topology == {"preset": "dgx-h100", "nodes": 2}
    # a preset alone keeps the base's size, in the unit it was given
    assert load_scenario(overrides=["topology.preset=cloudmatrix384"]).topology["supernodes"] == 1


def test_a_group_of_zero_nodes_is_left_out_so_a_sweep_can_go_with_and_without_it():
    """groups.NAME.nodes=0 was refused (>= 1), so a sweep could not compare a cluster with and without
    a group (a topology trial); every group at 0 is no topology, and a whole file's nodes stay >= 1."""
    from simulator.errors import RlsimError
    from simulator.hardware.topology import load_topology
    without = load_topology("hetero-a100-h100", {"groups": {"a100": {"nodes": 0}}})
    assert without.num_devices == 8 and without.device_kinds() == ["h100"] and without.device_groups() == {}
    with pytest.raises(RlsimError, match="every group has 0 nodes"):
        load_topology("hetero-a100-h100", {"groups": {"a100": {"nodes": 0}, "h100": {"nodes": 0}}})
    with pytest.raises(RlsimError, match=">= 1"):
        load_topology("dgx-h100", {"nodes": 0})
