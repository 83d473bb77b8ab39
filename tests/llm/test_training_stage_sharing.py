"""Pipeline stages whose groups have equal collective signatures share their per-layer costs
(llm/training.py _stage_arrays): the result equals what a network model without signatures gives
(every stage costed on its own ranks)."""
import pytest

from simulator.hardware.topology import load_topology
from simulator.llm.architecture import load_model
from simulator.llm.training import TrainLayout, forward_cost, train_step_cost, uniform_sequences
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
    TrainLayout(tp=8, pp=2, ep=8, etp=1, zero=0, micro_batch=1, sequence_parallel=False),
])
def test_stages_sharing_signatures_cost_what_each_stage_costs_alone(layout):
    topology = load_topology("dgx-h100", {"nodes": 4})
    model = load_model("qwen3-30b-a3b")
    seqs = uniform_sequences(64, 1024)
    seqs[::3] = 700
    kwargs = {"packing": "packed"}
    shared = CollectiveModel(topology)
    for query in (train_step_cost, forward_cost):
        got = query(model, layout, topology, None, seqs, collectives=shared, **kwargs)
        alone = query(model, layout, topology, None, seqs, collectives=_NoSignatures(CollectiveModel(topology)),
                      **kwargs)
        assert got == alone
