"""Device profiles: round trip, clear errors on malformed files, and the topology hook."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator.errors import RlsimError
from simulator.hardware.devices import get_device
from simulator.hardware.profiles import (
    CollectiveFit,
    DeviceProfile,
    GemmFit,
    apply_profile,
    load_profile,
    profile_from_mapping,
    save_profile,
)
from simulator.hardware.topology import load_topology


def _profile(**over) -> DeviceProfile:
    base = dict(
        device="cpu", measured_on={"framework": "torch 2.x", "threads": 1}, peak_source="measured",
        peak_flops={"fp32": 8.1e10, "bf16": 2.5e9}, gemm_efficiency=0.83, hbm_bytes=2.5e10, hbm_bw_Bps=1.3e10,
        hbm_efficiency=1.0, launch_overhead_s=1.2e-5, gemm_ramp_s=1e-5, host_link_bw_Bps=1.5e10,
        scaleup_bw_Bps=1.1e9, decode_step_overhead_s=1e-4, decode_overhead_per_layer_s=3e-4,
        decode_gemm_efficiency=0.35, decode_hbm_efficiency=0.8, decode_fit_error=0.2,
        gemm={"fp32": GemmFit(rate_flops=6.7e10, launch_overhead_s=1.2e-5, ramp_s=1e-5, efficiency=0.83,
                              curve=[(5e5, 0.2), (3.3e7, 0.7)], max_fit_error=0.3)},
        copy_curve=[(2**20, 5.5e10), (2**28, 1.3e10)],
        collective=CollectiveFit(backend="gloo", op="all_reduce", world_size=2, latency_s=2e-4, bw_Bps=1.1e9,
                                 max_fit_error=0.15),
        notes=["a note"])
    base.update(over)
    return DeviceProfile(**base)


def test_round_trip_keeps_every_number(tmp_path: Path) -> None:
    profile = _profile()
    path = save_profile(profile, tmp_path / "p.yaml")
    again = load_profile(path)
    assert again == profile
    assert save_profile(again, tmp_path / "q.yaml").read_text() == path.read_text()  # same bytes


@settings(max_examples=25, deadline=None)
@given(bw=st.floats(1e7, 1e13),   # from the device floor up (devices._BARE_FLOORS: below it a unit left out)
       eff=st.floats(0.01, 1.0), peak=st.floats(1e6, 1e16),
       overhead=st.floats(0, 1e-2))
def test_round_trip_property(bw: float, eff: float, peak: float, overhead: float) -> None:
    import tempfile
    profile = _profile(hbm_bw_Bps=bw, gemm_efficiency=eff, peak_flops={"fp32": peak}, launch_overhead_s=overhead)
    with tempfile.TemporaryDirectory() as tmp:
        assert load_profile(save_profile(profile, Path(tmp) / "p.yaml")) == profile


def test_units_are_accepted_when_reading() -> None:
    p = profile_from_mapping({"device": "cpu", "hbm_bw_Bps": "19GB/s", "launch_overhead_s": "3us",
                              "peak_flops": {"fp32": "120GFLOPS"}, "hbm_bytes": "32GB"})
    assert p.hbm_bw_Bps == pytest.approx(19e9)
    assert p.launch_overhead_s == pytest.approx(3e-6)
    assert p.peak_flops == {"fp32": pytest.approx(120e9)}
    assert p.hbm_bytes == pytest.approx(32e9)


@pytest.mark.parametrize("text,field,words", [
    ("device: cpu\ngemm_efficiency: 1.7\n", "gemm_efficiency", "less than or equal"),
    ("device: h100\nhbm_bytes: 80\n", "hbm_bytes", "no device is that small"),
    ("device: h100\nhbm_bw_Bps: '3.35'\n", "hbm_bw_Bps", "no device is that small"),
    ("device: h100\npeak_flops:\n  bf16: 989\n", "peak_flops.bf16", "no device is that small"),
    ("device: h100\npeak_flops:\n  bf16: lots\n", "peak_flops.bf16", "cannot read"),
    ("device: cpu\nhbm_bw_Bps: fast\n", "hbm_bw_Bps", "cannot read"),
    ("device: cpu\nbogus: 1\n", "bogus", "Extra inputs"),
    ("hbm_bw_Bps: 1e10\n", "device", "required"),
    ("device: cpu\nschema_version: 99\n", "schema_version", "not supported"),
])
def test_malformed_profile_names_file_and_field(tmp_path: Path, text: str, field: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(RlsimError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message and field in message and words in message
    assert info.value.fix


def test_not_yaml_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("device: [unclosed\n")
    with pytest.raises(RlsimError, match="not valid YAML"):
        load_profile(path)
    path.write_text("- a list\n")
    with pytest.raises(RlsimError, match="mapping"):
        load_profile(path)
    with pytest.raises(RlsimError, match="cannot read"):
        load_profile(tmp_path / "nope.yaml")


def test_apply_profile_replaces_only_set_fields() -> None:
    cpu = get_device("cpu")
    spec = apply_profile(cpu, DeviceProfile(device="cpu", hbm_bw_Bps=1.3e10, peak_flops={"fp32": 8e10}))
    assert spec.hbm_bw_Bps == 1.3e10
    assert spec.peak_flops["fp32"] == 8e10 and spec.peak_flops["bf16"] == cpu.peak_flops["bf16"]
    assert spec.gemm_efficiency == cpu.gemm_efficiency and spec.scaleup_bw_Bps == cpu.scaleup_bw_Bps


def test_a_profile_sets_the_flash_scale_a_trainer_reads() -> None:
    """flash_efficiency_scale (what benchmarks/device_train_step.py measures) replaces the catalog's
    and reaches the trainer's rates; out of (0, 1] it is refused."""
    from simulator.llm.training import rates_for
    from simulator.params import TrainParams

    h100 = get_device("h100")
    spec = apply_profile(h100, DeviceProfile(device="h100", flash_efficiency_scale=0.5))
    assert spec.flash_efficiency_scale == 0.5 and spec.gemm_efficiency == h100.gemm_efficiency
    assert rates_for(spec, TrainParams()).flash_scale == 0.5
    with pytest.raises(ValidationError):
        DeviceProfile(device="h100", flash_efficiency_scale=1.5)


def test_decode_overhead_grows_with_layers() -> None:
    p = _profile()
    assert p.decode_overhead_s(4) == pytest.approx(1e-4 + 4 * 3e-4)
    assert DeviceProfile(device="cpu").decode_overhead_s(4) is None


# ---- the topology hook ----------------------------------------------------------------------------------
def _cpu_topology(**extra) -> dict:
    return {"name": "one-cpu", "device": "cpu", "devices_per_node": 2, "nodes": 1, **extra}


def test_topology_device_profile_applies_to_every_device(tmp_path: Path) -> None:
    path = save_profile(_profile(), tmp_path / "cpu.yaml")
    topo = load_topology(_cpu_topology(device_profile=str(path)))
    for rank in range(topo.num_devices):
        assert topo.device_spec(rank).hbm_bw_Bps == 1.3e10
        assert topo.device_spec(rank).peak("fp32") == 8.1e10


def test_topology_device_entry_profile_and_override(tmp_path: Path) -> None:
    path = save_profile(_profile(), tmp_path / "cpu.yaml")
    topo = load_topology(_cpu_topology(device={"name": "cpu", "profile": str(path)}))
    assert topo.device_spec(0).gemm_efficiency == pytest.approx(0.83)
    # `--set topology.device_profile=PATH` reaches load_topology as a preset parameter.
    topo = load_topology(_cpu_topology(), {"device_profile": str(path)})
    assert topo.device_spec(1).launch_overhead_s == pytest.approx(1.2e-5)


def _two_groups(top: dict, g1: dict) -> dict:
    return {"name": "two", "devices_per_node": 2, "scaleout": {"nic_bw": "100Gb/s"}, **top,
            "groups": {"g1": {"nodes": 1, **g1}, "g2": {"nodes": 1}}}


@pytest.mark.parametrize("top, g1, ranks_a", [
    # a group's own device_profile over a profile in the file's shared device entry (before: the entry's won)
    ({"device": {"name": "cpu", "profile": "A"}}, {"device_profile": "B"}, [2, 3]),
    # a group's own device entry's profile over the file's device_profile
    ({"device": "cpu", "device_profile": "B"}, {"device": {"name": "cpu", "profile": "A"}}, [0, 1]),
])
def test_the_more_specific_profile_wins(tmp_path: Path, top, g1, ranks_a) -> None:
    paths = {name: str(save_profile(_profile(hbm_bw_Bps=bw), tmp_path / f"{name}.yaml"))
             for name, bw in (("A", 1e10), ("B", 2e10))}
    def swap(value):   # the names A / B as the profile paths
        if isinstance(value, dict) and "profile" in value:
            return {**value, "profile": paths[value["profile"]]}
        return paths.get(value, value) if isinstance(value, str) else value

    topo = load_topology(_two_groups({k: swap(v) for k, v in top.items()}, {k: swap(v) for k, v in g1.items()}))
    assert [r for r in range(4) if topo.device_spec(r).hbm_bw_Bps == 1e10] == ranks_a


@pytest.mark.parametrize("mapping, field", [
    (lambda a, b: _cpu_topology(device={"name": "cpu", "profile": a}, device_profile=b), "device.profile"),
    (lambda a, b: _two_groups({"device": "cpu"}, {"device": {"name": "cpu", "profile": a}, "device_profile": b}),
     "groups.g1.device.profile"),
])
def test_two_profiles_at_one_level_are_refused(tmp_path: Path, mapping, field) -> None:
    # before, the entry's profile won and device_profile was read past without a word
    a, b = (str(save_profile(_profile(), tmp_path / f"{name}.yaml")) for name in "ab")
    with pytest.raises(RlsimError) as info:
        load_topology(mapping(a, b))
    assert info.value.field == field and "given twice" in str(info.value)


def test_topology_profile_path_relative_to_topology_file(tmp_path: Path) -> None:
    save_profile(_profile(), tmp_path / "cpu.yaml")
    topo_file = tmp_path / "topo.yaml"
    topo_file.write_text(yaml.safe_dump(_cpu_topology(device_profile="cpu.yaml")))
    topo = load_topology(str(topo_file))
    assert topo.device_spec(0).hbm_bw_Bps == 1.3e10


def test_explicit_graph_node_profile(tmp_path: Path) -> None:
    path = save_profile(_profile(), tmp_path / "cpu.yaml")
    mapping = {"name": "explicit", "graph": {
        "nodes": [{"id": "c0", "kind": "device", "device": "cpu", "profile": str(path)},
                  {"id": "c1", "kind": "device", "device": "cpu"}, {"id": "sw", "kind": "switch"}],
        "links": [{"a": "c0", "b": "sw", "bw": "10GB/s", "plane": "scaleup"},
                  {"a": "c1", "b": "sw", "bw": "10GB/s", "plane": "scaleup"}]}}
    topo = load_topology(mapping)
    assert topo.device_spec(0).hbm_bw_Bps == 1.3e10
    assert topo.device_spec(1).hbm_bw_Bps == get_device("cpu").hbm_bw_Bps


def test_topology_missing_or_bad_profile_is_clear(tmp_path: Path) -> None:
    with pytest.raises(RlsimError) as info:
        load_topology(_cpu_topology(device_profile=str(tmp_path / "missing.yaml")))
    assert info.value.field == "device_profile" and "rlsim calibrate" in info.value.fix
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: cpu\ngemm_efficiency: -1\n")
    with pytest.raises(RlsimError, match="gemm_efficiency"):
        load_topology(_cpu_topology(device={"name": "cpu", "profile": str(bad)}))


def test_profile_of_another_device_is_refused(tmp_path: Path) -> None:
    path = save_profile(_profile(), tmp_path / "cpu.yaml")
    with pytest.raises(RlsimError, match="measured on device 'cpu'"):
        load_topology({"preset": "dgx-h100", "device_profile": str(path)})


def test_scenario_override_reaches_the_topology(tmp_path: Path) -> None:
    from simulator.scenario import load_scenario

    path = save_profile(_profile(device="h100", hbm_bw_Bps=2.5e12, scaleup_bw_Bps=None, host_link_bw_Bps=None),
                        tmp_path / "h100.yaml")
    scenario = load_scenario(None, topology="dgx-h100", overrides=[f"topology.device_profile={path}"])
    topo = load_topology(scenario.to_dict()["topology"])
    assert topo.device_spec(0).hbm_bw_Bps == 2.5e12


@pytest.mark.parametrize("key, section", [("scaleup_bw_Bps", "scaleup"), ("host_link_bw_Bps", "host")])
def test_a_profiles_link_rate_beside_the_topologys_bw_is_refused_unless_that_is_unset(tmp_path, key, section):
    # the measured rate was read past without a word under a preset's scaleup.bw / host.bw
    from simulator.errors import RlsimError

    path = save_profile(DeviceProfile(device="h100", **{key: 3e11}), tmp_path / "h100.yaml")
    with pytest.raises(RlsimError) as info:   # dgx-h100 sets scaleup.bw, not host.bw
        load_topology({"preset": "dgx-h100", "nodes": 1, "device_profile": str(path), "host": {"bw": "64GB/s"}})
    assert info.value.field == "device_profile" and f"topology.{section}.bw=null" in info.value.fix
    topo = load_topology({"preset": "dgx-h100", "nodes": 1, "device_profile": str(path), section: {"bw": None}})
    assert getattr(topo.device_spec(0), key) == 3e11


@pytest.mark.parametrize("fields, field, says", [
    ({"peak_flops": {"bf16": 0}}, "peak_flops.bf16", "greater than 0"),   # named the scenario, no fix
    ({"hbm_bw_Bps": "fast"}, "hbm_bw_Bps", "cannot read 'fast'"),          # two fields and two fixes
])
def test_a_bad_profile_value_names_the_profile_file_and_its_field_once(tmp_path, fields, field, says):
    import yaml

    from simulator.errors import RlsimError
    from simulator.hardware.profiles import load_profile

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"device": "h100", **fields}))
    with pytest.raises(RlsimError) as info:
        load_profile(path)
    err = info.value
    assert err.source == str(path) and err.field == field and says in err.message
    assert str(err).count("fix:") == 1 and str(err).count("field '") == 1
