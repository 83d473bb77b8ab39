"""Device catalog: names, datasheet figures, overrides and errors."""
import pytest

from simulator.errors import RlsimError
from simulator.hardware.devices import DeviceSpec, device_from_mapping, device_names, get_device

CATALOG = ["ascend-910c", "ascend-910b2", "ascend-910b3", "a100-40gb", "a100-80gb", "h100", "h800", "h20",
           "h200", "b200", "gb200", "cpu"]


def test_catalog_has_every_device_named_in_the_issue():
    assert set(CATALOG) <= set(device_names())
    for name in CATALOG:
        spec = get_device(name)
        assert spec.name == name
        assert spec.peak("bf16") > 0 and spec.hbm_bytes > 0 and spec.hbm_bw_Bps > 0
        assert 0 < spec.gemm_efficiency <= 1 and 0 < spec.hbm_efficiency <= 1


def test_datasheet_figures():
    a100 = get_device("a100-40gb")
    assert a100.hbm_bytes == 40 * 2**30 and a100.hbm_bw_Bps == pytest.approx(1.555e12)
    assert get_device("h100").peak("bf16") == pytest.approx(989e12)
    assert get_device("h100").peak("fp8") == pytest.approx(1979e12)
    assert get_device("ascend-910c").scaleup_bw_Bps == pytest.approx(392e9)
    assert get_device("h800").scaleup_bw_Bps == pytest.approx(200e9)  # 400 GB/s both directions


@pytest.mark.parametrize(("name", "driver_mib"), [("a100-80gb", 81_920), ("h100", 81_559), ("h200", 143_771)])
def test_memory_capacities_are_binary_as_the_driver_reports(name, driver_mib):
    # a datasheet's "80 GB" of HBM is 80 GiB (JEDEC); nvidia-smi's totals lie within 0.5% of it
    assert get_device(name).hbm_bytes == pytest.approx(driver_mib * 2**20, rel=5e-3)
    assert get_device(name).hbm_bytes % 2**30 == 0


def test_names_are_case_insensitive():
    assert get_device("H100") is get_device("h100")


def test_a_mapping_spells_a_catalog_name_as_the_catalog():
    # 'H100' picks h100's figures and keeps its name: a profile of h100 and the catalog match it
    spec = device_from_mapping({"name": "H100", "gemm_efficiency": 0.7}, source="x.yaml")
    assert spec.name == "h100" and spec == get_device("h100").replace(gemm_efficiency=0.7)
    assert device_from_mapping({"base": "h100", "name": "My-H100"}).name == "My-H100"   # a new name stays


def test_unsupported_dtype_and_unknown_device_raise():
    with pytest.raises(RlsimError, match="dtype"):
        get_device("ascend-910b3").peak("fp8")
    with pytest.raises(RlsimError, match="unknown device"):
        get_device("h1000")


def test_replace_and_hash():
    h = get_device("h100")
    faster = h.replace(gemm_efficiency=0.9)
    assert faster.gemm_efficiency == 0.9 and h.gemm_efficiency != 0.9
    assert hash(h) == hash(get_device("h100")) and {h: 1}[get_device("h100")] == 1


def test_mapping_overrides_parse_units():
    spec = device_from_mapping({"name": "h100", "hbm_bw_Bps": "3TB/s", "peak_flops": {"bf16": "900T"},
                                "gemm_efficiency": 0.7}, source="x.yaml")
    assert spec.hbm_bw_Bps == 3e12 and spec.peak("bf16") == 900e12 and spec.peak("fp8") == 1979e12
    assert spec.gemm_efficiency == 0.7


def test_custom_device_needs_every_field():
    with pytest.raises(RlsimError, match="needs fields"):
        device_from_mapping({"name": "mychip", "hbm_bytes": "10GB"}, source="x.yaml")
    spec = device_from_mapping({"name": "mychip", "peak_flops": {"bf16": "100T"}, "hbm_bytes": "16GB",
                                "hbm_bw_Bps": "1TB/s", "scaleup_bw_Bps": "100GB/s",
                                "host_link_bw_Bps": "32GB/s"})
    assert isinstance(spec, DeviceSpec) and spec.hbm_bytes == 16e9


def test_bad_values_name_file_and_field():
    with pytest.raises(RlsimError) as err:
        device_from_mapping({"name": "h100", "hbm_bytes": -1}, source="cluster.yaml")
    assert "cluster.yaml" in str(err.value) and "device.hbm_bytes" in str(err.value)
    with pytest.raises(RlsimError, match="unknown device field"):
        device_from_mapping({"name": "h100", "hbm": 1}, source="cluster.yaml")


def test_missing_peak_names_the_callers_key():
    with pytest.raises(RlsimError, match="no peak figure for dtype 'fp8'") as err:
        get_device("ascend-910b3").peak("fp8")
    assert err.value.field == "dtype"
    with pytest.raises(RlsimError) as err:
        get_device("ascend-910b3").peak("fp8", field="workload.dtype")
    assert err.value.field == "workload.dtype" and "bf16" in err.value.fix


def test_a_quoted_number_in_a_device_mapping_is_text_not_the_number():
    """gemm_efficiency: '0.6' ran as 0.6 (float() reads text): refused as the scenario's fields are."""
    with pytest.raises(RlsimError, match="text") as caught:
        device_from_mapping({"base": "h100", "gemm_efficiency": "0.6"}, source="t.yaml", field_name="topology.device")
    assert caught.value.field == "topology.device.gemm_efficiency" and "without quotes" in caught.value.fix
    assert device_from_mapping({"base": "h100", "gemm_efficiency": 0.6}).gemm_efficiency == 0.6
    assert device_from_mapping({"base": "h100", "hbm_bw_Bps": "3TB/s"}).hbm_bw_Bps == 3e12   # units stay text


def test_a_device_spanning_kinds_is_no_faster_than_any_of_them_at_any_rate():
    """An engine or trainer over H100 + H20 was priced as one real kind: the engine as the H100 (the
    lower HBM bandwidth) with its 989 TFLOP/s, the trainer as the H20 (the slower GEMMs) with its
    faster HBM (an audit). The composite takes each rate's minimum separately."""
    from simulator.hardware.devices import worst_case_device
    from simulator.llm.training import TrainParams, rates_for, slowest_device

    h100, h20 = get_device("h100"), get_device("h20")
    both = worst_case_device([h100, h20])
    for dtype in both.peak_flops:
        assert both.peak(dtype) * both.gemm_efficiency == pytest.approx(
            min(h100.peak(dtype) * h100.gemm_efficiency, h20.peak(dtype) * h20.gemm_efficiency), rel=1e-12)
    assert both.peak("bf16") * both.gemm_efficiency == pytest.approx(h20.peak("bf16") * h20.gemm_efficiency)
    assert both.hbm_bw_Bps * both.hbm_efficiency == pytest.approx(h100.hbm_bw_Bps * h100.hbm_efficiency)
    assert both.hbm_bytes == h100.hbm_bytes < h20.hbm_bytes
    assert both.scaleup_bw_Bps == min(h100.scaleup_bw_Bps, h20.scaleup_bw_Bps)
    assert worst_case_device([h20, h100]).replace(name=both.name) == both and worst_case_device([h100]) is h100
    rates = rates_for(slowest_device([h100, h20], "bf16"), TrainParams())
    assert rates.hbm_Bps == pytest.approx(h100.hbm_bw_Bps * h100.hbm_efficiency)   # was the H20's 4 TB/s
    assert rates.peak_flops * rates.gemm_efficiency == pytest.approx(h20.peak("bf16") * h20.gemm_efficiency)


# docs/reference/hardware.md's accelerator table, row by row: dense BF16 TFLOP/s, FP8 (or INT8)
# TFLOP/s (None: the table gives none), HBM in its "GB" (the catalog's GiB, see GIB), HBM TB/s and the
# scale-up link per direction in GB/s. A catalog figure that drifts from the table fails here.
HARDWARE_MD = {
    "ascend-910c": (752, 1504, 128, 3.2, 392),
    "ascend-910b2": (353.8, 708, 64, 1.6, 196),
    "ascend-910b3": (294.9, None, 64, 1.6, 196),
    "a100-80gb": (312, 624, 80, 2.039, 300),
    "h100": (989, 1979, 80, 3.35, 450),
    "h800": (989, 1979, 80, 3.35, 200),
    "h20": (148, 296, 96, 4.0, 450),
    "h200": (989, 1979, 141, 4.8, 450),
    "b200": (2250, 4500, 180, 8.0, 900),
    "gb200": (2500, 5000, 186, 8.0, 900),
}


@pytest.mark.parametrize(("name", "row"), HARDWARE_MD.items())
def test_catalog_figures_are_hardware_md_s(name, row):
    bf16, low_precision, hbm_gb, hbm_tbps, scaleup_gbps = row
    spec = get_device(name)
    assert spec.peak("bf16") == pytest.approx(bf16 * 1e12, rel=1e-12)
    if low_precision is not None:
        dtype = "fp8" if "fp8" in spec.peak_flops else "int8"
        assert spec.peak(dtype) == pytest.approx(low_precision * 1e12, rel=1e-12)
    assert spec.hbm_bytes == hbm_gb * 2**30
    assert spec.hbm_bw_Bps == pytest.approx(hbm_tbps * 1e12, rel=1e-12)
    assert spec.scaleup_bw_Bps == pytest.approx(scaleup_gbps * 1e9, rel=1e-12)
