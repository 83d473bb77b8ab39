"""An error in a topology key is named where the key was written: `--set` overrides and a scenario's
topology mapping as `topology.<field>` in their own label, the preset's own file as itself."""
import pytest

from simulator.cli import main
from simulator.errors import RlsimError
from simulator.hardware.topology import load_topology


def test_an_override_is_named_as_set():
    with pytest.raises(RlsimError) as exc:
        load_topology("dgx-h100", {"device": {"gemm_eficiency": 0.5}})
    assert exc.value.source == "--set" and exc.value.field == "topology.device.gemm_eficiency"


def test_a_mapping_key_is_named_in_the_callers_file():
    with pytest.raises(RlsimError) as exc:
        load_topology({"preset": "dgx-h100", "nodez": 2}, spec_source="my.yaml")
    assert exc.value.source == "my.yaml" and exc.value.field == "topology.nodez"


def test_a_key_of_the_users_own_topology_file_is_named_in_that_file(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_text("name: x\ndevices_per_node: 8\nnodez: 2\ndevice: h100\n")
    with pytest.raises(RlsimError) as exc:
        load_topology(str(path), spec_source="scenario.yaml")
    assert exc.value.source == str(path) and exc.value.field == "nodez"


def test_the_cli_names_the_scenario_file(tmp_path, capsys):
    path = tmp_path / "scn.yaml"
    path.write_text("topology: {preset: dgx-h100, device: {gemm_eficiency: 0.5}}\nworkload: grpo-qwen2.5-7b\n")
    assert main(["run", str(path), "--iterations", "1"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: field 'topology.device.gemm_eficiency'" in err and "topologies/" not in err


@pytest.mark.parametrize("nic", ["0Gb/s", 400])
def test_a_groups_bad_nic_names_its_field_once(nic):
    # 'groups.h100.nic_bw.nic_bw' (a topology trial)
    with pytest.raises(RlsimError) as info:
        load_topology("hetero-a100-h100", {"groups": {"h100": {"nic_bw": nic}}})
    assert info.value.field == "topology.groups.h100.nic_bw"   # an override, named as --set names it


def test_groups_given_over_a_preset_of_one_kind_name_the_set_and_how_to_clear_its_count(capsys):
    """--set topology.groups... over dgx-h100 blamed 'topologies/dgx-h100.yaml: field nodes' and
    asked for groups.NAME.nodes, which the user had set (a topology trial)."""
    assert main(["comm", "--topology", "dgx-h100", "--set", "topology.groups.h100.nodes=2", "--op", "all_reduce",
                 "--bytes", "1GiB", "--group", "all"]) == 2
    err = capsys.readouterr().err
    assert "error: --set topology.groups.h100.nodes=2: field 'topology.nodes'" in err
    assert "--set topology.nodes=null --set topology.device=null" in err
