"""Length distributions: long tail, cap mass, group correlation, drift, empirical files, errors."""
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.errors import RlsimError
from simulator.llm.lengths import LengthDistribution


def lognormal(**kw):
    return LengthDistribution.from_mapping({"dist": "lognormal", **kw}, "scenario.yaml", "response_length")


def test_sigma_one_gives_p99_about_ten_times_the_median():
    # formulas.md: p99 ~ 10x median at sigma 1 (exp(2.326) = 10.2); median 1024 keeps p99 below the 16K cap.
    d = lognormal(median=1024, sigma=1.0, max=16384, group_correlation=0.5)
    x = d.sample(np.random.default_rng(0), 4096, 16)
    ratio = np.percentile(x, 99) / np.median(x)
    assert 9.0 < ratio < 11.5


def test_cut_off_mass_sits_at_the_cap():
    d = lognormal(median=2048, sigma=1.0, max=16384)
    x = d.sample(np.random.default_rng(1), 8192, 16)
    assert x.max() == 16384
    expected = 0.5 * math.erfc(math.log(16384 / 2048) / math.sqrt(2))  # P(lognormal > cap) = 1.88%
    assert np.mean(x == 16384) == pytest.approx(expected, abs=0.003)


def test_group_correlation_is_the_correlation_of_log_lengths_inside_a_prompt():
    rho = 0.6
    x = np.log(lognormal(median=1000, sigma=0.8, group_correlation=rho).sample(np.random.default_rng(2), 4000, 8))
    between = np.var(x.mean(axis=1)) - np.var(x, axis=1, ddof=1).mean() / 8  # variance of the prompt factor
    assert between / np.var(x) == pytest.approx(rho, abs=0.05)
    x0 = np.log(lognormal(median=1000, sigma=0.8).sample(np.random.default_rng(2), 4000, 8))
    assert np.var(x0.mean(axis=1)) == pytest.approx(np.var(x0) / 8, rel=0.1)  # independent samples


def test_drift_moves_the_median_per_step():
    d = lognormal(median=1000, sigma=0.5, drift_per_step=0.05)
    x = d.sample(np.random.default_rng(3), 4000, 4, step=10)
    assert d.median_at(10) == pytest.approx(1000 * 1.05**10)
    assert np.median(x) == pytest.approx(d.median_at(10), rel=0.03)


def test_same_seed_same_samples():
    d = lognormal(median=512, sigma=1.0, max=4096, group_correlation=0.3)
    a = d.sample(np.random.default_rng(7), 64, 16)
    b = d.sample(np.random.default_rng(7), 64, 16)
    assert a.tobytes() == b.tobytes() and a.shape == (64, 16) and a.dtype == np.int64


@pytest.mark.parametrize("kind", ["csv", "json"])
def test_empirical_file_is_resampled(tmp_path, kind):
    values = [100, 200, 300, 400, 5000]
    if kind == "csv":
        path = tmp_path / "lengths.csv"
        path.write_text("id,length\n" + "".join(f"{i},{v}\n" for i, v in enumerate(values)))
    else:
        path = tmp_path / "lengths.json"
        path.write_text(json.dumps(values))
    scenario = tmp_path / "scenario.yaml"
    d = LengthDistribution.from_mapping({"dist": "empirical", "file": path.name, "group_correlation": 0.5},
                                        str(scenario))
    x = d.sample(np.random.default_rng(0), 2000, 4)
    assert set(np.unique(x)) == set(values)
    assert np.mean(x == 5000) == pytest.approx(0.2, abs=0.02)


def test_empirical_cap_and_drift(tmp_path):
    path = tmp_path / "l.json"
    path.write_text(json.dumps({"lengths": [100, 1000]}))
    d = LengthDistribution.from_mapping({"dist": "empirical", "file": str(path), "max": 1500,
                                         "drift_per_step": 1.0})
    assert set(np.unique(d.sample(np.random.default_rng(0), 200, 2, step=1))) == {200, 1500}


@pytest.mark.parametrize("mapping, field", [
    ({"dist": "weibull"}, "response_length.dist"),
    ({"median": 100, "sigma": -1}, "response_length.sigma"),
    ({"median": 100, "group_correlation": 1.0}, "response_length.group_correlation"),
    ({"median": "long"}, "response_length.median"),
    ({"median": 100, "tail": 3}, "response_length.tail"),
    ({"dist": "empirical"}, "response_length.file"),
    ({"median": 100, "max": 0}, "response_length.max"),
    # a typo of the law beside its keys blamed median (found by a new-user trial)
    ({"dist": "lognorm", "median": 1024, "sigma": 1.0}, "response_length.dist"),
])
def test_bad_input_names_file_and_field(mapping, field):
    with pytest.raises(RlsimError) as err:
        LengthDistribution.from_mapping(mapping, "w.yaml", "response_length")
    assert err.value.field == field and err.value.source == "w.yaml"


def test_missing_or_bad_empirical_file(tmp_path):
    # a missing file is named with its key (it said only "none.csv: cannot read length file")
    with pytest.raises(RlsimError, match="length file not found") as caught:
        LengthDistribution.from_mapping({"dist": "empirical", "file": str(tmp_path / "none.csv")})
    assert caught.value.field.endswith(".file")
    bad = tmp_path / "bad.csv"
    bad.write_text("length\n12\n-3\n")
    with pytest.raises(RlsimError, match="not a positive length"):
        LengthDistribution.from_mapping({"dist": "empirical", "file": str(bad)})


@pytest.mark.parametrize(("name", "text", "words"), [
    ("bad.csv", "len\n100\n\n-5\n", "line 4 is not a positive length: '-5'"),
    ("bad.json", "[100, -5]", "entry 1 is not a positive length: -5"),
    ("header.csv", "len\n", "no lengths in file"),
    ("empty.csv", "", "empty length file"),
    ("dict.json", "{\"other\": [1]}", "expected a JSON list of lengths"),
    ("broken.json", "[1, 2", "not valid JSON"),
])
def test_a_length_files_content_error_names_its_key_and_the_fix(tmp_path, name, text, words):
    """A length file whose content is wrong said only the file ('no lengths in file', 'entry 1 is not a
    positive length' counting data rows from 0): it names the key that gave the file, the CSV line,
    and the fix, as every input error does."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RlsimError) as info:
        LengthDistribution.from_mapping({"dist": "empirical", "file": str(path)}, "w.yaml", "workload.response_length")
    assert words in info.value.message
    assert info.value.source == str(path) and info.value.field == "workload.response_length.file"
    assert info.value.fix


@settings(max_examples=50, deadline=None)
@given(median=st.floats(1, 1e5), sigma=st.floats(0, 3), cap=st.integers(1, 65536),
       rho=st.floats(0, 0.99), seed=st.integers(0, 2**32 - 1))
def test_samples_are_integers_within_bounds(median, sigma, cap, rho, seed):
    d = LengthDistribution(median=median, sigma=sigma, max=cap, group_correlation=rho)
    x = d.sample(np.random.default_rng(seed), 16, 8)
    assert x.dtype == np.int64 and x.min() >= 1 and x.max() <= cap


@pytest.mark.parametrize("mapping,key", [({"dist": "empirical", "file": "x.csv", "median": 100}, "median"),
                                         ({"dist": "empirical", "file": "x.csv", "sigma": 1.0}, "sigma"),
                                         ({"median": 100, "sigma": 1.0, "file": "x.csv"}, "file"),
                                         ({"median": 100, "sigma": 1.0, "column": "len"}, "column")])
def test_a_key_of_the_other_law_is_an_error(mapping, key):
    # they were dropped (median / sigma of an empirical law) or never read (a lognormal's file)
    with pytest.raises(RlsimError) as err:
        LengthDistribution.from_mapping(mapping, "w.yaml", "workload.response_length")
    assert err.value.field == f"workload.response_length.{key}"


def test_a_column_the_file_lacks_is_an_error(tmp_path):
    one = tmp_path / "one.csv"
    one.write_text("length\n100\n200\n")
    bare = tmp_path / "bare.csv"
    bare.write_text("100\n200\n")
    plain = tmp_path / "plain.json"
    plain.write_text("[100, 200]")
    for path in (one, bare, plain):   # a one-column file stood in for any column asked for
        with pytest.raises(RlsimError) as err:
            LengthDistribution.from_mapping({"dist": "empirical", "file": str(path), "column": "tokens"}, "w.yaml",
                                             "workload.response_length")
        assert err.value.field == "workload.response_length.column"
    law = LengthDistribution.from_mapping({"dist": "empirical", "file": str(one), "column": "length"}, "w.yaml")
    assert law.values == (100, 200)


@pytest.mark.parametrize("sigma", [10.5, 1e308])
def test_a_sigma_past_any_length_spread_is_refused(sigma):
    # 1e308 leaked numpy's overflow RuntimeWarning and drew lengths from inf
    from simulator.errors import RlsimError
    from simulator.llm.lengths import LengthDistribution

    with pytest.raises(RlsimError) as info:
        LengthDistribution.from_mapping({"dist": "lognormal", "median": 1000, "sigma": sigma, "max": 8000})
    assert info.value.field.endswith("sigma") and "at most 10" in info.value.fix


def test_a_law_key_one_typo_away_names_the_key_and_min_above_max_says_the_fix():
    from simulator.errors import RlsimError
    from simulator.llm.lengths import LengthDistribution
    with pytest.raises(RlsimError, match="did you mean 'group_correlation'"):
        LengthDistribution.from_mapping({"dist": "lognormal", "median": 100, "sigma": 1, "group_corelation": 0.5},
                                        "s.yaml", "workload.response_length")
    with pytest.raises(RlsimError) as caught:
        LengthDistribution.from_mapping({"dist": "lognormal", "median": 100, "sigma": 1, "max": 10, "min": 20},
                                        "s.yaml", "workload.response_length")
    assert caught.value.fix


def test_the_share_cut_at_the_cap_is_the_lognormal_tail_and_matches_draws():
    law = LengthDistribution(median=1000.0, sigma=0.8, max=2000, where="workload.response_length")
    tail = 0.5 * math.erfc(math.log(2.0) / (0.8 * math.sqrt(2.0)))     # P(Z > ln 2 / sigma)
    assert law.share_at_cap() == pytest.approx(tail)
    drawn = law.sample(np.random.default_rng(0), 20_000)
    assert np.mean(drawn == 2000) == pytest.approx(tail, abs=0.01)
    assert LengthDistribution(median=1000.0, sigma=0.0, max=1000).share_at_cap() == 1.0
    assert LengthDistribution(median=1000.0).share_at_cap() == 0.0
    assert LengthDistribution(dist="empirical", values=(5, 10, 20, 40), max=20).share_at_cap() == 0.5


def test_a_cap_that_cuts_almost_every_length_is_noted():
    from simulator.api import simulate
    from simulator.llm.lengths import cap_notes
    assert cap_notes(LengthDistribution(median=1000.0, sigma=0.8, max=2000)) == []
    result = simulate({"topology": "dgx-h100", "workload": "grpo-qwen2.5-7b", "iterations": 1,
                       "schedule": "colocated"}, overrides=["workload.response_length.max=10"])
    assert any("100% of the lengths are cut to the cap max=10" in note for note in result.summary["notes"])
