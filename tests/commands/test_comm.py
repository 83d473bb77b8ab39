"""`rlsim comm` and `rlsim presets` through the CLI entry point."""
import json

import pytest

from simulator.cli import main

PRESETS = ["cloudmatrix384", "dgx-h100", "dgx-h200", "dgx-a100", "hgx-h20", "hgx-h800", "dgx-b200",
           "gb200-nvl72", "ascend-910b", "hetero-a100-h100"]


def _json(capsys, *argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_presets_json_lists_every_topology(capsys):
    doc = _json(capsys, "presets")
    names = [t["name"] for t in doc["topologies"]]
    assert set(PRESETS) <= set(names)
    cm = next(t for t in doc["topologies"] if t["name"] == "cloudmatrix384")
    assert cm["parameters"] == {"supernodes": 1}
    assert isinstance(doc["models"], list) and isinstance(doc["workloads"], list)


def test_presets_text(capsys):
    assert main(["presets"]) == 0
    assert "cloudmatrix384" in capsys.readouterr().out


def test_presets_list_the_named_stacks_and_engines_with_sources(capsys):
    from simulator.engine_software import ENGINE_SOFTWARE
    from simulator.params import TRAIN_SOFTWARE

    doc = _json(capsys, "presets")
    assert set(doc["train_software"]) == set(TRAIN_SOFTWARE) and set(doc["engines"]) == set(ENGINE_SOFTWARE)
    assert all(doc["engines"].values()) and all(doc["train_software"].values())
    assert main(["presets"]) == 0
    assert "workload.engine=NAME" in capsys.readouterr().out


def test_comm_json_contract(capsys):
    doc = _json(capsys, "comm", "--topology", "dgx-h100", "--op", "all_reduce", "--bytes", "1GiB",
                "--group", "node:0")
    assert list(doc) == ["op", "devices", "bytes", "algorithm", "time_s", "algbw_Bps", "busbw_Bps"]
    assert doc["devices"] == 8 and doc["bytes"] == 2**30 and doc["op"] == "all_reduce"
    same = _json(capsys, "comm", "--topology", "dgx-h100", "--op", "all_reduce", "--bytes", str(2**30),
                 "--group", "node:0")
    assert same == doc


def test_comm_set_overrides_topology(capsys):
    doc = _json(capsys, "comm", "--topology", "cloudmatrix384", "--set", "topology.supernodes=2", "--op",
                "all_gather", "--bytes", "64MiB", "--group", "all")
    assert doc["devices"] == 768


def test_comm_text(capsys):
    assert main(["comm", "--topology", "dgx-h100", "--op", "p2p", "--bytes", "1MiB", "--group", "0,1"]) == 0
    assert "busbw" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["--group", "node:999"],
    ["--group", "0,zero"],
    ["--group", "devices:5-1"],
    ["--group", "all", "--bytes", "lots"],
    ["--group", "all", "--set", "topology.nodes=-1"],
    ["--group", "all", "--set", "workload.x=1"],
    # found by fuzzing: each was priced
    ["--group", "0,0", "--op", "p2p"],                                  # a 0 s 'local' copy
    ["--group", "all", "--bytes", "0", "--algorithm", "hierarchical"],   # the algorithm read past
    ["--group", "3", "--algorithm", "ring"],
    ["--group", "all", "--bytes", "1e-3"],                              # a thousandth of a byte
    ["--group", "all", "--bytes", "1Gb"],                               # gigabits read as gigabytes
])
def test_comm_bad_input_exits_2_without_traceback(capsys, argv):
    base = {"--topology": "dgx-h100", "--op": "all_reduce", "--bytes": "1024"}
    args = ["comm"]
    for k, v in base.items():
        if k not in argv:
            args += [k, v]
    assert main(args + argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("rlsim: error:")


def test_comm_unknown_topology_exits_2(capsys):
    assert main(["comm", "--topology", "nowhere", "--op", "p2p", "--bytes", "1", "--group", "0,1"]) == 2
    assert "unknown topology preset" in capsys.readouterr().err


def test_out_naming_a_file_is_refused_before_any_work(tmp_path, capsys):
    afile = tmp_path / "taken"
    afile.write_text("")
    assert main(["run", "--out", str(afile)]) == 2
    assert "is a file; give a folder" in capsys.readouterr().err


def test_an_algorithm_that_does_not_apply_names_the_flag(capsys):
    # the collective model's argument name ('algorithm') was printed for the --algorithm flag
    from simulator.cli import main

    code = main(["comm", "--topology", "dgx-h100", "--op", "all_reduce", "--bytes", "1MiB", "--group", "node:0",
                 "--algorithm", "direct"])
    assert code == 2 and "field '--algorithm'" in capsys.readouterr().err


@pytest.mark.parametrize("item, field", [
    ("topology.device.gemm_efficiency=0.5", "topology.device.gemm_efficiency"),
    ("topology.device={base: h100, hbm_bw_Bps: 1TB/s}", "topology.device.hbm_bw_Bps"),
    ("topology.device.peak_flops.bf16=1e14", "topology.device.peak_flops"),
    ("limits.max_global_batch=4", "limits.max_global_batch"),
])
def test_a_key_the_collective_does_not_read_is_refused(capsys, item, field):
    # the busbw came back unchanged: they were read past
    argv = ["comm", "--topology", "dgx-h100", "--op", "all_reduce", "--bytes", "1MiB", "--group", "node:0"]
    assert main([*argv, "--set", item]) == 2
    assert f"field '{field}'" in capsys.readouterr().err


def test_the_device_fields_a_collective_reads_move_it(capsys):
    argv = ["comm", "--topology", "dgx-h100", "--op", "all_reduce", "--bytes", "1KiB", "--group", "node:0", "--json"]
    times = []
    for extra in ([], ["--set", "topology.device.launch_overhead_s=1e-3", "--set", "limits.max_devices=64"]):
        assert main([*argv, *extra]) == 0
        times.append(json.loads(capsys.readouterr().out)["time_s"])
    assert times[1] > times[0]
