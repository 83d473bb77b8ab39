"""The raw files of a lent GPU's measurements (benchmarks/measured/<lease folder>), read the one way
the tests of each lease check them against simulator/validation/measured.py and the catalog."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.hardware.devices import get_device
from simulator.params import InferenceParams
from simulator.validation import measured

MEASURED = Path(__file__).resolve().parents[2] / "benchmarks" / "measured"


def lease(device: str) -> measured.Lease:
    return next(lease for lease in measured.LEASES if lease.device == device)


def load(of: measured.Lease, name: str) -> dict[str, Any]:
    return json.loads((MEASURED / of.folder / name).read_text())


def batch_1_hbm_share(of: measured.Lease) -> tuple[int, float]:
    """(batch, share of the catalog device's HBM bandwidth) of the first decode step: its bytes over
    its time less the graph's replay, as rlsim's step adds it (the rule that sets hbm_efficiency)."""
    row = load(of, "decode_graphs.json")["rows"][0]
    rate = row["bytes"] / (row["graph_s"] - InferenceParams().cuda_graph_replay_s)
    return row["batch"], rate / get_device(of.device).hbm_bw_Bps


def assert_cases_carry_the_files(of: measured.Lease) -> list[dict[str, Any]]:
    """The lease's M1 / M2 figures are its files' compiled micro-batches and graph-replayed decode
    steps at measured.KV_LEN; returns the micro-batch files for the caller's own checks."""
    docs = []
    for row, seconds in of.train_steps:
        doc = load(of, f"train_step_{row}_compiled.json")
        assert doc["compiled"] and doc["micro_batch_s"] == seconds
        docs.append(doc)
    rows = load(of, "decode_graphs.json")["rows"]
    assert tuple((r["batch"], r["graph_s"]) for r in rows) == of.decode_steps
    assert {r["kv_len"] for r in rows} == {measured.KV_LEN}
    return docs
