"""Topology presets, queries and bad input."""
import pytest
import yaml

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.hardware.topology import load_topology
from simulator.presets import preset_names

PRESETS = ["cloudmatrix384", "dgx-h100", "dgx-h200", "dgx-a100", "hgx-h20", "hgx-h800", "dgx-b200",
           "gb200-nvl72", "gb200-nvl72-partial", "ascend-910b", "hetero-a100-h100"]


def test_every_preset_is_listed_and_builds():
    assert set(PRESETS) <= set(preset_names("topologies"))
    for name in PRESETS:
        t = load_topology(name)
        assert t.num_devices > 0 and t.devices[0] in t.graph
        for rank in (0, t.num_devices - 1):
            attrs = t.graph.nodes[t.devices[rank]]
            assert attrs["kind"] == "device" and attrs["rank"] == rank


def test_cloudmatrix_shape_and_bandwidth_are_kept_by_the_aggregation():
    t = load_topology("cloudmatrix384")
    assert (t.num_devices, t.num_nodes, t.num_domains) == (384, 48, 1)
    assert t.device_kinds() == ["ascend-910c"]
    g = t.graph
    assert g.edges["dev0", "l1.0"]["bw_Bps"] == pytest.approx(392e9)  # per NPU, per direction
    # non-blocking: each node's L1 uplink equals the sum of its NPUs' links
    assert g.edges["l1.0", "l2.0"]["bw_Bps"] == pytest.approx(8 * 392e9)
    t4 = load_topology({"preset": "cloudmatrix384", "supernodes": 4})
    assert (t4.num_devices, t4.num_domains) == (1536, 4)
    assert t4.shared_level([0, 383]) == "domain" and t4.shared_level([0, 384]) == "cluster"
    assert t4.plane_of(0, 9) == "scaleup" and t4.plane_of(0, 400) == "scaleout"


def test_dgx_rail_optimized_paths():
    t = load_topology("dgx-h100", {"nodes": 2})
    assert (t.num_devices, t.num_nodes) == (16, 2)
    assert t.path(0, 1) == [("dev0", "sw0"), ("sw0", "dev1")]
    assert t.path(0, 8) == [("dev0", "leaf.0.0"), ("leaf.0.0", "dev8")]  # same rail: one leaf
    assert [e[1] for e in t.path(0, 9)] == ["leaf.0.0", "spine", "leaf.1.0", "dev9"]
    assert t.path(3, 3) == []
    assert t.shared_level([0, 7]) == "node" and t.shared_level([0, 8]) == "cluster"
    assert t.shared_level([5]) == "device"
    assert t.bottleneck_bw_Bps(range(8)) == pytest.approx(450e9)
    assert t.bottleneck_bw_Bps(range(16)) == pytest.approx(50e9)
    assert t.path(0, "host0") == [("dev0", "host0")]
    assert t.ranks_of_node(1) == list(range(8, 16)) and t.node_of(9) == 1 and t.domain_of(9) == 1


def test_nvl72_and_hetero():
    t = load_topology("gb200-nvl72", {"racks": 2})
    assert (t.num_devices, t.num_nodes, t.num_domains) == (144, 36, 2)
    assert t.shared_level(range(72)) == "domain"
    h = load_topology({"preset": "hetero-a100-h100", "groups": {"a100": {"nodes": 2}, "h100": {"nodes": 3}}})
    assert h.num_devices == 40 and h.device_kinds() == ["a100-80gb", "h100"]
    assert h.device_spec(0).name == "a100-80gb" and h.device_spec(39).name == "h100"
    assert h.path_bw_Bps(0, 8) == pytest.approx(25e9)  # HDR NIC of the A100 side bounds the path


def test_big_presets_build():
    t = load_topology("dgx-h100", {"nodes": 64})
    assert t.num_devices == 512 and t.path(0, 511)[-1][1] == "dev511"


def test_mesh_server_uses_direct_links():
    t = load_topology("ascend-910b")
    assert t.path(0, 5) == [("dev0", "dev5")]
    assert t.graph.edges["dev0", "dev5"]["bw_Bps"] == pytest.approx(28e9)
    # the device's scale-up rate is its 7 links together (the catalog's 196 GB/s; it read one link's 28)
    assert t.device_spec(0).scaleup_bw_Bps == pytest.approx(7 * 28e9) == get_device("ascend-910b2").scaleup_bw_Bps


def _write(tmp_path, data, name="cluster.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


EXPLICIT = {
    "name": "tiny",
    "graph": {
        "nodes": [{"id": "a", "device": "h100", "node": 0}, {"id": "b", "device": "h100", "node": 0},
                  {"id": "c", "device": "a100-80gb", "node": 1}, {"id": "sw", "kind": "switch"}],
        "links": [{"a": "a", "b": "sw", "bw": "100GB/s", "plane": "scaleup", "latency": "1us"},
                  {"a": "b", "b": "sw", "bw": "100GB/s", "plane": "scaleup", "latency": "1us"},
                  {"a": "c", "b": "sw", "bw": "400Gb/s", "latency": "2us", "efficiency": 0.9}],
    },
}


def test_explicit_form(tmp_path):
    t = load_topology(_write(tmp_path, EXPLICIT))
    assert t.num_devices == 3 and t.num_nodes == 2
    assert t.path(0, 2) == [("a", "sw"), ("sw", "c")]
    assert t.path_latency_s(0, 2) == pytest.approx(3e-6)
    assert t.capacity_Bps(("sw", "c")) == pytest.approx(50e9 * 0.9)
    assert t.device_kinds() == ["a100-80gb", "h100"]


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["graph"]["nodes"][0].update(device="h999"), "graph.nodes[0].device"),
    (lambda d: d["graph"]["links"][1].update(bw="-5GB/s"), "graph.links[1].bw"),
    (lambda d: d["graph"]["links"][2].pop("bw"), "graph.links[2].bw"),
    (lambda d: d["graph"]["links"].pop(2), "graph.links"),  # c is cut off
    # b shares a's server but not its domain (a server is inside one scale-up domain): was accepted
    (lambda d: d["graph"]["nodes"][1].update(domain=1), "graph.nodes[1].domain"),
    # c gives no node beside a and b's: numbered by its index (2), it could have been another's server
    (lambda d: d["graph"]["nodes"][2].pop("node"), "graph.nodes[2].node"),
])
def test_explicit_bad_input_names_file_and_field(tmp_path, mutate, field):
    import copy
    data = copy.deepcopy(EXPLICIT)
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(RlsimError) as err:
        load_topology(path)
    assert err.value.source == path and err.value.field == field
    assert path in str(err.value) and field in str(err.value)


@pytest.mark.parametrize("changes, field", [
    ({"device": "h999"}, "device"),
    ({"scaleout": {"nic_bw": "-400Gb/s"}}, "scaleout.nic_bw"),
    ({"nodes": None}, "nodes"),
    ({"scaleout": None, "nodes": 2}, "scaleout"),  # two servers, nothing joining them
    ({"nodes": 0}, "nodes"),
])
def test_hierarchical_bad_input_names_file_and_field(tmp_path, changes, field):
    from simulator.presets import preset_dir, read_yaml
    data = read_yaml(preset_dir("topologies") / "dgx-h100.yaml")
    data.update(changes)
    path = _write(tmp_path, data)
    with pytest.raises(RlsimError) as err:
        load_topology(path)
    assert err.value.source == path and err.value.field == field


def test_unknown_preset_and_bad_rank():
    with pytest.raises(RlsimError, match="unknown topology preset"):
        load_topology("no-such-cluster")
    t = load_topology("dgx-h100")
    with pytest.raises(RlsimError, match="out of range"):
        t.node_of(8)
    import numpy as np  # a numpy integer in range is not "out of range" (it read so: a network audit)
    with pytest.raises(RlsimError, match="is not a Python int") as err:
        t.device_spec(np.int64(0))
    assert "int(r)" in err.value.fix


def test_unknown_preset_names_the_singular_field_and_bad_yaml_names_the_line(tmp_path):
    with pytest.raises(RlsimError) as err:
        load_topology("no-such-topology")
    assert err.value.field == "topology" and "dgx-h100" in err.value.fix
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\n nodes: 2\n")
    with pytest.raises(RlsimError, match=r"not valid YAML: line 2, column 7") as err:
        load_topology(str(path))
    assert err.value.source == str(path) and "\n" not in str(err.value)


def _distinct_by_rank(topology, ranks):
    """devices.distinct_devices's generic loop: one device_spec() per rank."""
    kinds = []
    for r in ranks:
        s = topology.device_spec(int(r))
        if not any(s is k for k in kinds):
            kinds.append(s)
    return kinds


def test_distinct_specs_equal_the_per_rank_scan():
    import numpy as np

    from simulator.hardware.devices import distinct_devices
    h = load_topology({"preset": "hetero-a100-h100", "groups": {"a100": {"nodes": 2}, "h100": {"nodes": 3}}})
    rng = np.random.default_rng(0)
    cases = [range(40), range(16, 40), range(0, 16), [39, 0, 5], list(rng.permutation(40)[:7]), [], [np.int64(20)]]
    for ranks in cases:
        got = distinct_devices(h, ranks)
        assert [id(s) for s in got] == [id(s) for s in _distinct_by_rank(h, ranks)]
    for bad in ([0, 40, -1], [-1, 3]):
        with pytest.raises(RlsimError, match=rf"device rank {bad[1] if bad[0] == 0 else bad[0]} is out of range"):
            distinct_devices(h, bad)


def test_capacity_is_the_graph_edge_bandwidth_times_efficiency():
    t = load_topology("dgx-h100", {"nodes": 2})
    for _ in range(2):   # the second pass reads the cache
        for u, v, d in t.graph.edges(data=True):
            assert t.capacity_Bps((u, v)) == d["bw_Bps"] * d["efficiency"]


def test_the_build_pauses_the_cyclic_gc_and_restores_it():
    import gc
    assert gc.isenabled()
    load_topology("dgx-h100")
    assert gc.isenabled()
    gc.disable()
    try:
        load_topology("dgx-h100")
        assert not gc.isenabled()   # left as the caller had it
    finally:
        gc.enable()
    with pytest.raises(RlsimError):
        load_topology({"preset": "dgx-h100", "nodes": 0})
    assert gc.isenabled()


@pytest.mark.parametrize(("racks", "trays", "gpus"), [(1, 4, 16), (2, 8, 64), (4, 16, 256)])
def test_partial_nvl72_racks(racks: int, trays: int, gpus: int):
    """A job on part of GB200 NVL72 racks: the NVLink domain is the rack's used GPUs (4 per tray);
    racks are joined by the 400 Gb/s per-GPU scale-out network."""
    t = load_topology("gb200-nvl72-partial", {"racks": racks, "nodes_per_domain": trays})
    per_rack = 4 * trays
    assert (t.num_devices, t.num_domains) == (gpus, racks)
    assert t.ranks_of_domain(0) == list(range(per_rack))
    assert t.shared_level(range(per_rack)) == "domain"
    assert t.bottleneck_bw_Bps(range(per_rack)) == pytest.approx(900e9)      # NVLink5 per GPU per direction
    assert t.plane_of(0, per_rack - 1) == "scaleup"
    if racks > 1:
        assert t.plane_of(0, per_rack) == "scaleout"
        assert t.shared_level([0, per_rack]) == "cluster"
        assert t.path_bw_Bps(0, per_rack) == pytest.approx(50e9)            # 400 Gb/s NIC


def test_flows_off_the_cluster_are_refused_on_every_call():
    """The ranks of a FlowTable are checked when its routes are first built; a bad table is never
    kept, so every later call refuses it again (and a good one routes after it)."""
    from simulator.hardware.fabric import FlowTable
    t = load_topology("dgx-h100", {"nodes": 2})
    bad = FlowTable([0, 3], [1, t.num_devices + 5], [1.0, 1.0])
    for _ in range(2):
        with pytest.raises(RlsimError, match=str(t.num_devices + 5)):
            t.max_link_time_s(bad)
        with pytest.raises(RlsimError, match=str(t.num_devices + 5)):
            t.max_path_latency_s(bad)
    good = FlowTable([0, 3], [1, 9], [1.0, 1.0])
    assert t.max_link_time_s(good) > 0 and t.max_path_latency_s(good) > 0


def test_device_fields_given_without_a_name_override_the_presets_device():
    """`--set topology.device.gemm_efficiency=0.6` on a preset: the preset's catalog device with that
    field changed, not a custom device missing its other fields."""
    from simulator.hardware.devices import get_device

    h100 = get_device("h100")
    for topo in (load_topology({"preset": "dgx-h100", "nodes": 1, "device": {"gemm_efficiency": 0.6}}),
                 load_topology("dgx-h100", {"nodes": 1, "device": {"gemm_efficiency": 0.6}})):
        spec = topo.device_spec(0)
        assert spec.name == "h100" and spec.gemm_efficiency == 0.6
        assert (spec.hbm_bytes, spec.hbm_bw_Bps, spec.peak_flops) == (h100.hbm_bytes, h100.hbm_bw_Bps, h100.peak_flops)
    named = load_topology({"preset": "dgx-h100", "nodes": 1, "device": {"base": "h200", "gemm_efficiency": 0.6}})
    assert named.device_spec(0).hbm_bytes == get_device("h200").hbm_bytes


def test_device_fields_given_without_a_name_reach_every_group_that_names_its_device():
    # on hetero-a100-h100 (each group names its device) they were read past: the run was
    # byte-identical and `rlsim sensitivity` reported a swing of 0 for the GEMM efficiency
    topo = load_topology("hetero-a100-h100", {"device": {"gemm_efficiency": 0.1}})
    assert {topo.device_spec(r).name for r in range(topo.num_devices)} == {"a100-80gb", "h100"}
    assert {topo.device_spec(r).gemm_efficiency for r in range(topo.num_devices)} == {0.1}
    # a group's own fields over the whole topology's
    both = load_topology("hetero-a100-h100", {"device": {"gemm_efficiency": 0.1},
                                              "groups": {"h100": {"device": {"gemm_efficiency": 0.5}}}})
    assert {(both.device_spec(r).name, both.device_spec(r).gemm_efficiency)
            for r in range(both.num_devices)} == {("a100-80gb", 0.1), ("h100", 0.5)}


@pytest.mark.parametrize("device", ["b200", {"name": "a100-80gb", "gemm_efficiency": 0.3}])
def test_a_named_device_beside_groups_that_each_name_theirs_is_refused(device):
    # --set topology.device.name=... on hetero-a100-h100 was read past: the run unchanged
    with pytest.raises(RlsimError) as info:
        load_topology("hetero-a100-h100", {"device": device})
    assert info.value.field.endswith("device") and "read past" in info.value.message


@pytest.mark.parametrize("section,fields", [("scaleup", {"bandwidth": "10GB/s"}), ("host", {"bandwidth": "1GB/s"}),
                                            ("scaleout", {"nic_bandwidth": "1Gb/s"}), ("scaleup", 5), ("host", 5),
                                            ("collectives", 5)])
def test_a_link_section_refuses_a_field_it_does_not_read(section, fields):
    # unknown fields under scaleup / scaleout / host were read past (a typo kept the default), and a
    # section that is not a mapping raised AttributeError
    mapping = {"device": "h100", "nodes": 2, "scaleout": {"nic_bw": "400Gb/s"}}
    mapping[section] = fields if not isinstance(fields, dict) else {**mapping.get(section, {}), **fields}
    with pytest.raises(RlsimError) as err:
        load_topology(mapping)
    key = f".{next(iter(fields))}" if isinstance(fields, dict) else ""
    assert err.value.field == f"{section}{key}"


@pytest.mark.parametrize("device_key, section", [("scaleup_bw_Bps", "scaleup"), ("host_link_bw_Bps", "host")])
def test_a_device_link_rate_beside_the_sections_bw_is_refused(device_key, section):
    # the section's bw sets the link: the device's rate (its default) was read past
    with pytest.raises(RlsimError, match=f"{device_key} is the default of {section}.bw") as exc:
        load_topology("dgx-h100", {"device": {device_key: "10GB/s"}, section: {"bw": "100GB/s"}})
    assert exc.value.field == f"topology.device.{device_key}" and f"topology.{section}.bw" in exc.value.fix


def test_a_device_link_rate_is_the_link_when_the_section_gives_no_bw():
    slow = load_topology("dgx-h100", {"device": {"host_link_bw_Bps": "8GB/s"}})   # dgx-h100's host: no bw
    assert slow.path_bw_Bps(0, "host0") == pytest.approx(8e9)   # the host link itself


@pytest.mark.parametrize("section, field, rate", [("host", "host_link_bw_Bps", 16e9), ("scaleup", "scaleup_bw_Bps", 2e11)])
def test_the_sections_bw_is_the_devices_link_rate(section, field, rate):
    # what reads the rate off the device (the host copies of a colocated switch, a one-device ring)
    # takes the topology's link: a host.bw given was read past by every run before
    topo = load_topology("dgx-h100", {section: {"bw": f"{rate / 1e9:g}GB/s"}})
    assert getattr(topo.device_spec(0), field) == pytest.approx(rate)
    assert getattr(load_topology("dgx-h100").device_spec(0), field) == getattr(get_device("h100"), field)


def test_a_host_bw_moves_a_colocated_step():
    from simulator.api import simulate

    def step(*items):
        return simulate(workload="grpo-qwen2.5-7b", topology={"preset": "dgx-h100", "nodes": 2}, schedule="colocated",
                        iterations=1, overrides=["workload.prompts_per_step=8", "workload.samples_per_prompt=4",
                                                 "workload.mini_batch_prompts=8", *items]).summary["step_time_s"]
    assert step("topology.host.bw=8GB/s") > step()


def test_scaleup_oversubscription_applies_to_a_two_tier_domain_only():
    with pytest.raises(RlsimError, match="applies to a two-tier scale-up") as exc:   # dgx-h100: an NVSwitch
        load_topology("dgx-h100", {"scaleup": {"oversubscription": 2}})
    assert exc.value.field == "topology.scaleup.oversubscription"
    load_topology("dgx-h100", {"scaleup": {"oversubscription": 1}})                  # the no-op value passes
    two_tier = load_topology("cloudmatrix384", {"scaleup": {"oversubscription": 2}})
    assert two_tier.num_devices == 384


def test_host_links_are_the_host_sections_link_per_device():
    # the device's own link to host memory: the section's bw (the device's rate) at its efficiency
    dgx = load_topology({"preset": "dgx-h100", "nodes": 2})
    bw, eff = dgx.host_links([0, 15])
    assert bw.tolist() == [dgx.device_spec(0).host_link_bw_Bps] * 2 and eff.tolist() == [0.85, 0.85]
    assert load_topology({"preset": "gb200-nvl72"}).host_links([71])[1].tolist() == [0.90]   # NVLink-C2C
    slow = load_topology({"preset": "dgx-h100", "host": {"efficiency": 0.5, "bw": "10GB/s"}})
    assert [x.tolist() for x in slow.host_links([3])] == [[10e9], [0.5]]


def test_an_explicit_graph_device_copies_over_its_link_to_a_host_node(tmp_path):
    import copy
    data = copy.deepcopy(EXPLICIT)
    data["graph"]["nodes"].append({"id": "cpu", "kind": "host", "node": 0})
    data["graph"]["links"].append({"a": "a", "b": "cpu", "bw": "20GB/s", "plane": "host"})
    t = load_topology(_write(tmp_path, data))
    bw, eff = t.host_links([0, 2])
    # a's link to its host node, at the host plane's default efficiency; c has none: its catalog link
    assert bw.tolist() == [20e9, t.device_spec(2).host_link_bw_Bps] and eff.tolist() == [0.85, 0.85]
    # a graph link that leaves latency / efficiency out takes its plane's defaults
    assert t.graph.edges["a", "sw"]["efficiency"] == 0.80 and t.graph.edges["a", "cpu"]["latency_s"] == 1e-6
    assert t.graph.edges["c", "sw"]["efficiency"] == 0.9   # given


def test_exponent_numbers_are_numbers_in_topology_fields():
    # `9e-1` and `2e0` were refused as "not a number" (PyYAML reads them as strings; pydantic's
    # fields took them): found by fuzzing
    from simulator.overrides import apply_overrides

    given = apply_overrides({"preset": "dgx-h100"}, ["host.efficiency=9e-1", "nodes=2e0"])
    t = load_topology(given)
    assert t.num_nodes == 2 and t.host_links([0])[1].tolist() == [0.9]
    with pytest.raises(RlsimError, match="whole number"):
        load_topology(apply_overrides({"preset": "dgx-h100"}, ["nodes=1.5"]))


def test_a_groups_device_fields_lay_over_its_catalog_device_and_a_new_group_needs_one():
    # `--set topology.groups.h100.device.gemm_efficiency=0.5` was refused as a custom device without a
    # name; a group made by --set without a device blamed the preset file's field 'device' (fuzzing)
    t = load_topology({"preset": "hetero-a100-h100"}, {"groups": {"h100": {"device": {"gemm_efficiency": 0.5}}}})
    by_name = {t.device_spec(r).name: t.device_spec(r) for r in range(t.num_devices)}
    assert by_name["h100"].gemm_efficiency == 0.5 and by_name["a100-80gb"].gemm_efficiency == 0.75
    assert by_name["h100"].peak_flops == get_device("h100").peak_flops
    with pytest.raises(RlsimError) as info:
        load_topology({"preset": "hetero-a100-h100"}, {"groups": {"x": {"nodes": 1}}})
    assert info.value.field == "topology.groups.x.device" and info.value.source == "--set"


@pytest.mark.parametrize("changes, field", [
    ({"nodes": 2, "scaleout": {"nic_bw": "400Gb/s", "oversubscription": float("inf")}}, "scaleout.oversubscription"),
    ({"scaleup": {"bw": float("inf")}}, "scaleup.bw"),
    ({"device": {"name": "x", "base": "h100", "launch_overhead_s": float("nan")}}, "device.launch_overhead_s"),
])
def test_a_topology_number_is_finite(changes, field):
    # .inf ran into ZeroDivisionError, NaN into a traceback or NaN figures (found by fuzzing)
    with pytest.raises(RlsimError) as info:
        load_topology({"name": "t", "device": "h100", "devices_per_node": 2, "nodes": 1, **changes})
    assert info.value.field == field



def test_a_collectives_time_is_finite():
    from simulator.network.collectives import CollectiveParams

    with pytest.raises(RlsimError) as info:
        CollectiveParams.from_mapping({"launch_overhead_s": float("nan")}, "t.yaml")
    assert info.value.field == "collectives.launch_overhead_s"


@pytest.mark.parametrize("key", ["step_overhead_s", "launch_overhead_s"])
def test_a_bare_collective_overhead_past_a_tenth_of_a_second_is_a_unit_left_out(key):
    # step_overhead_s: 1 meant 1 us and priced a 1 MiB all-reduce 6 s (found by a network audit)
    from simulator.network.collectives import CollectiveParams

    with pytest.raises(RlsimError, match="a bare number is seconds") as info:
        CollectiveParams.from_mapping({key: 1}, "t.yaml")
    assert info.value.field == f"collectives.{key}" and "1us" in info.value.fix
    assert getattr(CollectiveParams.from_mapping({key: "1s"}, "t.yaml"), key) == 1.0   # with its unit: taken
    assert getattr(CollectiveParams.from_mapping({key: 2e-6}, "t.yaml"), key) == 2e-6


@pytest.mark.parametrize("mutate, field", [
    # read past before (found by fuzzing): a second link replaced the first, "no" counted as duplex,
    # a switch's device and domain were ignored
    (lambda d: d["graph"]["links"].append({"a": "a", "b": "sw", "bw": "1Gb/s"}), "graph.links[3].a"),
    (lambda d: d["graph"]["links"][0].update(duplex="no"), "graph.links[0].duplex"),
    (lambda d: d["graph"]["nodes"][3].update(device="h100"), "graph.nodes[3].device"),
    (lambda d: d["graph"]["nodes"][3].update(domain=1), "graph.nodes[3].domain"),
])
def test_an_explicit_graph_refuses_what_it_would_read_past(tmp_path, mutate, field):
    import copy
    data = copy.deepcopy(EXPLICIT)
    data["graph"]["nodes"][3]["kind"] = "switch"
    mutate(data)
    with pytest.raises(RlsimError) as info:
        load_topology(_write(tmp_path, data))
    assert info.value.field == field


def test_a_groups_nic_bw_without_a_scale_out_plane_is_refused():
    # one domain: the NIC carries nothing, and the value was read past (found by fuzzing)
    with pytest.raises(RlsimError) as info:
        load_topology({"name": "one", "devices_per_node": 2, "nodes": 1,
                       "groups": {"a": {"device": "h100", "nodes": 1, "nic_bw": "200Gb/s"}}})
    assert info.value.field == "groups.a.nic_bw"


@pytest.mark.parametrize("device, field", [
    ({"base": "nosuch", "name": "y"}, "device.base"),        # said "custom device needs fields [...]"
    ({"base": "h100", "price_per_hour": -3}, "device.price_per_hour"),
    ({"base": "h100", "power_w": float("nan")}, "device.power_w"),
])
def test_a_device_mappings_base_is_a_catalog_device_and_its_numbers_are_sane(device, field):
    from simulator.hardware.devices import device_from_mapping

    with pytest.raises(RlsimError) as info:
        device_from_mapping(device, "t.yaml")
    assert info.value.field == field


def test_a_scale_up_domain_past_its_physical_size_is_refused():
    # gb200-nvl72-partial took nodes_per_domain 19: 76 GPUs in a 72-GPU rack
    with pytest.raises(RlsimError) as info:
        load_topology("gb200-nvl72-partial", {"nodes_per_domain": 19})
    assert info.value.field.endswith("nodes_per_domain") and "at most 18" in info.value.fix
    assert load_topology("gb200-nvl72-partial", {"nodes_per_domain": 18}).num_devices == 2 * 72


@pytest.mark.parametrize("override, field", [({"scaleout": {"nic_bw": 400}}, "scaleout.nic_bw"),
                                             ({"scaleup": {"latency": 0.5}}, "scaleup.latency")])
def test_a_bare_link_rate_or_latency_past_any_link_is_a_unit_left_out(override, field):
    """nic_bw: 400 ran at 400 B/s (a step of 7.3 million s) and latency: 0.5 at half a second, without
    a word (found by a new-user trial); a bare number in range still reads as SI."""
    with pytest.raises(RlsimError, match="a bare number is") as caught:
        load_topology({"preset": "dgx-h100", **override})
    assert caught.value.field == field
    assert load_topology({"preset": "dgx-h100", "scaleout": {"nic_bw": 5e10}}).num_devices == 8


@pytest.mark.parametrize("device, field", [({"base": "h100", "hbm_bytes": 80}, "device.hbm_bytes"),
                                           ({"base": "h100", "peak_flops": {"bf16": 989}}, "device.peak_flops.bf16")])
def test_a_bare_device_figure_below_any_device_is_a_unit_left_out(device, field):
    """hbm_bytes: 80 ran as 80 bytes and the error blamed the rollout layout's engine share (found by
    a new-user trial)."""
    with pytest.raises(RlsimError, match="a bare number") as caught:
        load_topology({"preset": "dgx-h100", "device": device})
    assert caught.value.field.endswith(field)
    assert load_topology({"preset": "dgx-h100", "device": {"base": "h100", "hbm_bytes": 8e10}}).num_devices == 8


def test_a_self_loop_and_a_mistyped_group_name_say_what_they_are():
    """A link {a: g0, b: g0} was said as "given twice"; a size given to groups.a10 (on a100 / h100
    groups) asked for a device (found by a new-user trial)."""
    graph = {"name": "loop", "graph": {"nodes": [{"id": "g0", "device": "h100", "node": 0, "domain": 0},
                                                 {"id": "h0", "kind": "host", "node": 0}],
                                       "links": [{"a": "g0", "b": "g0", "bw": "450GB/s", "plane": "scaleup"},
                                                 {"a": "g0", "b": "h0", "bw": "64GB/s", "plane": "host"}]}}
    with pytest.raises(RlsimError, match="to itself"):
        load_topology(graph)
    with pytest.raises(RlsimError, match="did you mean groups.a100"):
        load_topology("hetero-a100-h100", {"groups": {"a10": {"nodes": 2}}})


def _two_h100_groups(slow_device) -> dict:
    return {"name": "two-h100s", "devices_per_node": 8, "scaleup": {"kind": "switch"},
            "scaleout": {"nic_bw": "400Gb/s"},
            "groups": {"fast": {"device": "h100", "nodes": 1}, "slow": {"device": slow_device, "nodes": 2}}}


def test_devices_of_one_name_and_two_specs_are_two_kinds():
    """A derated H100 group beside plain H100s was one kind 'h100' (16 devices): one count, one price
    and no mixed-cluster note, while the run priced each group by its own spec."""
    topo = load_topology(_two_h100_groups({"base": "h100", "gemm_efficiency": 0.3}))
    assert topo.device_counts() == {"h100": 8, "h100@slow": 16}
    assert [topo.kind_of(r) for r in (0, 7, 8, 23)] == ["h100", "h100", "h100@slow", "h100@slow"]
    assert topo.kind_specs()["h100@slow"].gemm_efficiency == 0.3 and topo.kind_specs()["h100"] == get_device("h100")
    # the same spec written twice is one kind; a name of its own stays as given
    assert load_topology(_two_h100_groups({"base": "h100"})).device_counts() == {"h100": 24}
    named = load_topology(_two_h100_groups({"base": "h100", "name": "h100-derated", "gemm_efficiency": 0.3}))
    assert named.device_counts() == {"h100": 8, "h100-derated": 16}


def test_a_graph_of_one_name_and_two_specs_names_each_kind_by_its_first_node():
    nodes = [{"id": f"d{i}", "kind": "device", "device": {"base": "h100", "hbm_bw_Bps": f"{2 + i}TB/s"}}
             for i in range(2)] + [{"id": "sw", "kind": "switch"}]
    links = [{"a": f"d{i}", "b": "sw", "bw": "450GB/s", "plane": "scaleup"} for i in range(2)]
    topo = load_topology({"name": "g", "graph": {"nodes": nodes, "links": links}})
    assert topo.device_counts() == {"h100@d0": 1, "h100@d1": 1}
