"""A number written as text without a unit ('400', quoted in YAML) reads as SI base units, as the
bare number 400 does; the guards that refuse a bare number far from any device or link (a unit left
out) refuse the quoted one too. It was read: nic_bw: '400' ran at 400 B/s (a 1 GB all-reduce across
two DGX nodes took 3.3e5 s) and hbm_bytes: '80' gave an H100 80 bytes of memory."""
from __future__ import annotations

import pytest

from simulator.errors import RlsimError
from simulator.hardware.collective_params import CollectiveParams
from simulator.hardware.topology import load_topology

DGX2 = {"preset": "dgx-h100", "nodes": 2}


@pytest.mark.parametrize(("given", "field"), [
    ({"scaleout": {"nic_bw": "400"}}, "scaleout.nic_bw"),
    ({"scaleup": {"bw": " 450 "}}, "scaleup.bw"),
    ({"host": {"bw": "64"}}, "host.bw"),
    ({"scaleup": {"latency": "0.5e3"}}, "scaleup.latency"),
    ({"device": {"hbm_bytes": "80"}}, "device.hbm_bytes"),
    ({"device": {"hbm_bw_Bps": "3.35"}}, "device.hbm_bw_Bps"),
    ({"device": {"peak_flops": {"bf16": "989"}}}, "device.peak_flops.bf16"),
])
def test_a_quoted_number_without_a_unit_is_refused_as_a_bare_one_is(given, field):
    with pytest.raises(RlsimError, match="give the unit") as bare_err:
        load_topology({**DGX2, **_unquoted(given)})
    with pytest.raises(RlsimError, match="give the unit") as text_err:
        load_topology({**DGX2, **given})
    assert text_err.value.field == bare_err.value.field == field


@pytest.mark.parametrize("raw", ["2", "2.0"])
def test_a_quoted_collective_overhead_without_a_unit_is_refused(raw):
    with pytest.raises(RlsimError, match="give the unit") as err:
        CollectiveParams.from_mapping({"step_overhead_s": raw}, "t.yaml")
    assert err.value.field == "collectives.step_overhead_s"


def test_a_quoted_number_in_range_or_with_a_unit_is_read():
    t = load_topology({**DGX2, "scaleout": {"nic_bw": "5e10"}, "device": {"hbm_bytes": "80GiB"}})
    assert t.path_bw_Bps(0, 8) == 5e10 and t.device_spec(0).hbm_bytes == 80 * 2**30
    assert CollectiveParams.from_mapping({"step_overhead_s": "1e-6"}).step_overhead_s == 1e-6


def _unquoted(given: dict) -> dict:
    """``given`` with each quoted number as the number."""
    return {k: _unquoted(v) if isinstance(v, dict) else float(v) for k, v in given.items()}
