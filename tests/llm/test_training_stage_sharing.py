"""Pipeline stages whose groups have equal collective signatures share their per-layer costs
(llm/training.py _stage_arrays): the result equals what a network model without signatures gives
(every stage costed on its own ranks)."""
import numpy as np
import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.training import (
    CommParams,
    TrainLayout,
    TrainParams,
    forward_cost,
    train_step_cost,
    uniform_sequences,
)
from simulator.network.collectives import CollectiveModel


class _NoSignatures:
    """The network model's costs without its signature method: no stage shares another's costs."""

    def __init__(self, model: CollectiveModel) -> None:
        self._model = model

    def cost(self, *args, **kwargs):
        return self._model.cost(*args, **kwargs)


@pytest.mark.parametrize("layout", [
    TrainLayout(tp=4, pp=4, ep=4, etp=1, zero=1, micro_batch=1),
    TrainLayout(tp=2, pp=4, vpp=2, cp=2, ep=2, zero=3, micro_batch=2, recompute="full"),
    TrainLayout(tp=4, pp=2, ep=8, etp=1, zero=0, micro_batch=1, sequence_parallel=False),
])
def test_stages_sharing_signatures_cost_what_each_stage_costs_alone(layout):
    topology = load_topology("dgx-h100", {"nodes": 4})
    model = load_model("qwen3-30b-a3b")
    seqs = uniform_sequences(64, 1024)
    seqs[::3] = 700
    shared = CollectiveModel(topology)
    for params in (TrainParams(), TrainParams(comm=CommParams(pp_scatter_gather=False))):   # both p2p kinds
        kwargs = {"packing": "packed", "params": params}
        for query in (train_step_cost, forward_cost):
            got = query(model, layout, topology, None, seqs, collectives=shared, **kwargs)
            alone = query(model, layout, topology, None, seqs, collectives=_NoSignatures(CollectiveModel(topology)),
                          **kwargs)
            assert got == alone


@pytest.mark.parametrize("layout", [
    TrainLayout(tp=4, pp=4, ep=4, etp=1, zero=1, micro_batch=1, recompute="full"),
    TrainLayout(tp=2, pp=4, vpp=2, cp=2, ep=2, zero=3, micro_batch=2, recompute="selective"),
    TrainLayout(tp=2, pp=2, cp=2, ulysses_sp=True, micro_batch=1),
])
def test_a_forward_only_pass_has_the_full_passes_forward_arrays(layout):
    """forward_cost's stage arrays (the forward rows alone) are the full pass's, float for float."""
    from simulator.llm import training

    topology = load_topology("dgx-h100", {"nodes": 4})
    model = load_model("qwen3-30b-a3b")
    seqs = uniform_sequences(64, 1024)
    seqs[::3] = 700
    lay = training._resolved(layout, topology.num_devices, model, None)
    ranks = tuple(range(topology.num_devices))
    collectives = CollectiveModel(topology)
    replicas = training._micro_batches(seqs, lay, "packed")
    tokens = np.concatenate([t for t, _ in replicas])
    sq = np.concatenate([q for _, q in replicas])
    args = (model, lay, tokens, sq, training._groups(lay, ranks), training._Comm(collectives),
            training.rates_for(topology.device_spec(0), training.TrainParams()), training.TrainParams())
    full = training._stage_arrays(*args)
    fwd = training._stage_arrays(*args, forward_only=True)
    assert fwd.fwd.tobytes() == full.fwd.tobytes() and fwd.fwd_comm.tobytes() == full.fwd_comm.tobytes()
    assert fwd.bwd is None and fwd.comm is None
