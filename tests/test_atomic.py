"""Files written whole or not at all."""
from __future__ import annotations

import pytest

from simulator.atomic import write_text_atomic
from simulator.hardware.profiles import DeviceProfile, load_profile, save_profile


def test_a_write_that_fails_leaves_the_file_as_it_was_and_no_temporary(tmp_path):
    path = write_text_atomic(tmp_path / "p.yaml", "a: 1\n")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "a: \udcff\n")   # fails mid-write, after the old file would have been cut
    assert path.read_text() == "a: 1\n" and sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


def test_a_profile_written_over_another_is_whole(tmp_path):
    """save_profile opened the file for writing first: a cut write left a prefix, which loads
    (every profile field may be absent) with the cut fields silently back at the catalog's."""
    first = save_profile(DeviceProfile(device="h100", gemm_efficiency=0.42), tmp_path / "h100.yaml")
    save_profile(DeviceProfile(device="h100", gemm_efficiency=0.5, hbm_efficiency=0.55), first)
    loaded = load_profile(first)
    assert loaded.gemm_efficiency == 0.5 and loaded.hbm_efficiency == 0.55


def test_a_results_store_in_a_new_folder_makes_it(tmp_path):
    from simulator.sweep import ResultsStore, make_points, run_sweep
    store = ResultsStore(tmp_path / "new" / "results.csv")
    run_sweep(make_points({"n": [1]}, ""), lambda values: {"devices": 1, "step_time_s": 1.0}, store=store)
    assert len(store.done_ids()) == 1
