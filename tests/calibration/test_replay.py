"""Acceptance: `rlsim calibrate --backend torch --device cpu --replay` predicts a real mini RL step of a
tiny GPT within 20% for the whole step and 30% per stage, through the simulator's own cost models."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.cli import main
from simulator.hardware.profiles import load_profile

torch = pytest.importorskip("torch")


def _calibrate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["calibrate", "--backend", "torch", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.wall_clock
def test_cpu_calibration_and_replay_meet_the_acceptance_bounds(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu.yaml"
    # Collectives are tested in test_calibration.py; bf16 is not what the replay runs in.
    code, stdout, _ = _calibrate(capsys, "--device", "cpu", "--out", str(out), "--replay", "--json",
                                 "--set", "microbench.collectives=false", "--set", "microbench.dtypes=[fp32]")
    assert code == 0
    doc = json.loads(stdout)
    assert doc["device"] == "cpu" and doc["profile"] == str(out)
    assert load_profile(out).peak_flops["fp32"] == pytest.approx(doc["peak_flops"]["fp32"])
    replay = doc["replay"]
    report = {s: f"{replay[s]['error']:+.1%}" for s in ("generate", "reference", "train")}
    for stage in ("generate", "reference", "train"):
        r = replay[stage]
        assert r["measured_s"] > 0 and r["predicted_s"] > 0
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
        assert abs(r["error"]) <= 0.30, (stage, report, replay.get("machine_speed_change"))
    assert abs(replay["total_error"]) <= 0.20, (report, replay["total_error"], replay.get("machine_speed_change"))


def test_replay_prediction_is_deterministic_and_uses_the_profile() -> None:
    """The prediction side is pure: same profile and config, same numbers; a slower profile, longer."""
    from simulator.calibration.replay import ReplayConfig, predict_stages
    from simulator.hardware.profiles import DeviceProfile

    profile = DeviceProfile(device="cpu", peak_flops={"fp32": 8e10}, gemm_efficiency=0.7, hbm_bw_Bps=1.2e10,
                            hbm_efficiency=1.0, gemm_ramp_s=1e-5, decode_step_overhead_s=1e-4,
                            decode_overhead_per_layer_s=4e-4, decode_gemm_efficiency=0.3, decode_hbm_efficiency=1.0)
    config = ReplayConfig()
    lens = config.response_lengths()
    assert list(lens) == list(ReplayConfig().response_lengths())
    first = predict_stages(config, profile, lens)
    assert first == predict_stages(config, profile, lens)
    slower = profile.model_copy(update={"peak_flops": {"fp32": 4e10}, "decode_overhead_per_layer_s": 8e-4})
    second = predict_stages(config, slower, lens)
    assert all(second[s] > first[s] for s in first)
    # Generation follows the engine: more decode overhead per layer, proportionally longer generation.
    assert second["generate"] > 1.3 * first["generate"]


def test_tiny_gpt_matches_its_model_spec() -> None:
    from simulator.calibration.replay import tiny_model_spec
    from simulator.calibration.tinygpt import TinyGPTConfig, build_model

    config = TinyGPTConfig(num_layers=2, hidden=64, num_heads=4, ffn_hidden=160, vocab=128, max_positions=64)
    model = build_model(config, seed=0)
    spec = tiny_model_spec(config)
    assert sum(p.numel() for p in model.parameters()) == spec.params_total


def test_mini_step_generates_the_target_lengths() -> None:
    from simulator.calibration.tinygpt import TinyGPTConfig, run_mini_step

    config = TinyGPTConfig(num_layers=1, hidden=32, num_heads=2, ffn_hidden=64, vocab=64, max_positions=64)
    records = run_mini_step(config, 8, np.array([3, 1, 12, 5]), seed=0)
    assert [r.stage for r in records] == ["generate", "reference", "train"]
    assert all(r.end_s >= r.start_s and r.cpu_s >= 0 for r in records)
    assert records[0].end_s <= records[1].start_s + 1e-9


def test_calibrate_bad_input_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _calibrate(capsys, "--device", "cpu", "--set", "topology.nodes=2")
    assert code == 2 and "microbench" in err and "Traceback" not in err
    code, _, err = _calibrate(capsys, "--device", "cpu", "--set", "replay.bogus=1", "--replay")
    assert code == 2 and "replay.bogus" in err
    code, _, err = _calibrate(capsys, "--device", "cpu", "--set", "replay.statistic=mean", "--replay")
    assert code == 2 and "replay.statistic" in err
    code, _, err = _calibrate(capsys, "--device", "cpu", "--set", "microbench.decode_layers=many")
    assert code == 2 and "microbench.decode_layers" in err
    if not torch.cuda.is_available():
        code, _, err = _calibrate(capsys, "--device", "cuda")
        assert code == 2 and "no CUDA device" in err


def test_stage_pieces_add_up_to_the_stage() -> None:
    from simulator.calibration.tinygpt import TinyGPTConfig, run_mini_step

    config = TinyGPTConfig(num_layers=1, hidden=32, num_heads=2, ffn_hidden=64, vocab=64, max_positions=64)
    lens = np.array([3, 1, 12, 5])
    first = run_mini_step(config, 8, lens, seed=0)
    second = run_mini_step(config, 8, lens, seed=0)
    for r, again in zip(first, second, strict=True):
        assert r.cpu_s == pytest.approx(sum(r.segments_cpu_s))
        assert r.duration_s == pytest.approx(sum(r.segments_wall_s))
        assert len(r.segments_cpu_s) == len(again.segments_cpu_s)  # same work, same pieces
    # prefill + 11 decode steps + the final gather; 4 forwards + close; 4 backwards + the optimizer step
    assert [len(r.segments_cpu_s) for r in first] == [13, 5, 5]


def test_reduce_runs_takes_each_piece_minimum() -> None:
    from simulator.calibration.replay import reduce_runs
    from simulator.calibration.tinygpt import StageRecord

    def run(gen: tuple[float, ...], ref: float, train: float) -> list[StageRecord]:
        return [StageRecord("generate", 0, sum(gen), sum(gen), gen, gen),
                StageRecord("reference", 0, ref, ref, (ref,), (ref,)),
                StageRecord("train", 0, train, train, (train,), (train,))]

    runs = [run((1.0, 5.0), 2.0, 3.0), run((4.0, 2.0), 1.0, 6.0), run((3.0, 3.0), 7.0, 4.0)]
    assert reduce_runs(runs, 1, "min") == {"generate": 3.0, "reference": 1.0, "train": 3.0}
    assert reduce_runs(runs, 1, "stage_min") == {"generate": 6.0, "reference": 1.0, "train": 3.0}
    assert reduce_runs(runs, 1, "median") == {"generate": 6.0, "reference": 2.0, "train": 4.0}
