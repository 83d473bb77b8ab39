"""Engine constants the rollout's models or layout leave nothing to act on
(params.engine_constants_read_past, checked when a run starts and by rlsim plan) are refused when given; where they act they move the
prediction."""
import pytest

from simulator.api import simulate
from simulator.errors import RlsimError

SMALL = ["workload.prompts_per_step=16", "workload.samples_per_prompt=4", "workload.mini_batch_prompts=16"]
DGX = {"preset": "dgx-h100", "nodes": 2}


def step(*items: str, workload: str = "grpo-qwen2.5-7b") -> float:
    return simulate(workload=workload, topology=DGX, schedule="colocated", iterations=1,
                    overrides=[*SMALL, *items]).summary["step_time_s"]


@pytest.mark.parametrize("item", ["workload.inference.absorb_mla=false", "workload.inference.launches_per_moe_layer=50",
                                  "workload.inference.dispatch_bytes=1", "workload.inference.activation_bytes=1",
                                  "workload.inference.pipeline_send_tensors=3", "workload.inference.kv_block_size=32",
                                  "workload.inference.hybrid_kv_chunked_attention=true",
                                  "workload.inference.hybrid_kv_cache_manager=false"])
def test_on_a_dense_model_of_tp_1_engines_they_are_refused(item):
    # qwen2.5-7b: no MLA, no experts, full attention only (no page to size); its engines are tp 1, ep 1:
    # no collective for the bytes to size
    with pytest.raises(RlsimError) as exc:
        step(item)
    assert exc.value.field == item.split("=")[0] and "there is none here" in str(exc.value)


def test_where_the_engine_has_collectives_the_bytes_move_the_step():
    tp2 = "workload.rollout_layout={tp: 2, ep: 1, gpu_memory_utilization: 0.6, max_num_seqs: 256}"
    assert step(tp2, "workload.inference.activation_bytes=8") > step(tp2)


def test_with_pipeline_stages_the_sent_activations_move_the_step():
    staged = "workload.rollout_layout={tp: 1, pp: 2, gpu_memory_utilization: 0.6, max_num_seqs: 256}"
    assert step(staged, "workload.inference.pipeline_send_tensors=64") > step(staged)
    assert step(staged, "workload.inference.activation_bytes=64") > step(staged)   # the sends' element size


def test_on_a_windowed_model_the_page_size_is_taken():
    gemma = "workload.model=gemma-3-12b"
    assert step(gemma, "workload.inference.kv_block_size=32") > 0.0


def test_on_a_windowed_model_the_hybrid_managers_switch_is_taken():
    assert step("workload.model=gemma-3-12b", "workload.inference.hybrid_kv_cache_manager=false") > 0.0


def test_chunks_paged_by_a_manager_that_is_off_are_refused():
    from simulator.params import InferenceParams, engine_constants_read_past

    def found(**given):
        return [field for field, _, _ in engine_constants_read_past(
            InferenceParams(**given), mla=False, moe=True, paged=True, engine_tp=None, engine_ep=None,
            chunked=True, mixed_windows=True)]
    assert found(hybrid_kv_chunked_attention=True) == []
    assert found(hybrid_kv_chunked_attention=True, hybrid_kv_cache_manager=False) == [
        "workload.inference.hybrid_kv_chunked_attention"]
