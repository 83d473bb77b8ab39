#!/usr/bin/env bash
# The project's prepared check on one lent GPU (about eight minutes): every figure rlsim wants from a
# real device, in one run, written to OUTDIR.
#
#   bash benchmarks/device_check.sh OUTDIR
#
# 1. benchmarks/device_gemm_plateau.py: the sustained bf16 GEMM rate at the V7 / V6 trainers' shapes
#    after 30 s of load (gemm_plateau.json) and the H100 device profile of that plateau
#    (h100_plateau.yaml: an H200 has the H100's SMs, clocks and power limit; `measured_on` says so).
# 2. benchmarks/device_decode_graphs.py: a Llama-3.1-8B-shaped decode step, eager against a replayed
#    CUDA graph, beside rlsim's engine step (decode_graphs.json).
# 3. `rlsim calibrate --backend torch --device cuda` on a GPU-sized grid (no collectives: one GPU):
#    the device profile of the GPU itself (gpu_calibrated.yaml, calibrate.json).
# 4. benchmarks/device_train_step.py: the V7 1.7B row's model, forward and backward of one
#    micro-batch, its GPU time by kernel kind, in plain torch and with its layers compiled
#    (train_step.json, train_step_compiled.json).
# 5. benchmarks/device_fused_moe.py: vLLM's fused-MoE decode kernel at the V6 engines' expert slices,
#    vLLM's default tiles and the best of a small search, against the copy rate (fused_moe.json).
# 6. benchmarks/host_pageable_copy.py --device cuda: a GPU tensor's copies through pageable and pinned
#    host memory (the defaults of schedule.host_copies / train_params.offload), to stdout.
# 7. benchmarks/device_moe_layer.py: a Qwen3-30B-A3B layer as one GPU of an EP 8 trainer runs it,
#    grouped and per-expert GEMMs, beside rlsim's layer, to stdout.
# 8. benchmarks/device_hf_layer.py: Qwen2.5-7B layers as transformers writes them, plain and compiled,
#    GPU time by kernel kind beside rlsim's hf-transformers and megatron-core stacks, to stdout.
# 9. benchmarks/device_logits.py: the entropy over a 152k vocabulary and the log-prob paths as the RL
#    frameworks run them, as bytes a logit against a copy, beside rlsim's counts, to stdout (last:
#    about two minutes, past the eight above, so a run cut at the command's limit loses only it).
# Each step has its own time limit, so one that fails or hangs leaves the others' files. The device
# tool returns at most 8 files: the log stays outside OUTDIR (its tail is printed).
set -u
out=${1:?usage: bash benchmarks/device_check.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="${TMPDIR:-/tmp}/device_check.$$.log"
# rlsim's side of each figure on the catalog entry of the GPU lent (an unknown one: the H100's)
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
    *H200*) catalog=h200 ;;
    *H800*) catalog=h800 ;;
    *) catalog=h100 ;;
esac

{ nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm,clocks.sm,memory.total --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|MHz'; }    # to stdout: the device tool returns at most 8 files

timeout 240 python3 benchmarks/device_gemm_plateau.py --device cuda --catalog h100 --sustain-s 30 --json \
    --out "$out/h100_plateau.yaml" > "$out/gemm_plateau.json" 2>> "$log"
echo "gemm plateau: exit $?"

timeout 150 python3 benchmarks/device_decode_graphs.py --device cuda --catalog $catalog --json > "$out/decode_graphs.json" 2>> "$log"
echo "decode graphs: exit $?"

timeout 150 python3 benchmarks/device_train_step.py --device cuda --row 1.7b --json > "$out/train_step.json" 2>> "$log"
echo "train step: exit $?"
timeout 150 python3 benchmarks/device_train_step.py --device cuda --row 1.7b --compile --sustain-s 20 --json \
    > "$out/train_step_compiled.json" 2>> "$log"
echo "train step, compiled: exit $?"

timeout 300 python3 benchmarks/device_fused_moe.py --device cuda --catalog $catalog --search --json > "$out/fused_moe.json" 2>> "$log"
echo "fused moe: exit $?"

timeout 60 python3 benchmarks/host_pageable_copy.py --device cuda --gib 1 --repeats 3 2>> "$log"
echo "host copies: exit $?"

timeout 120 python3 benchmarks/device_moe_layer.py --device cuda --catalog $catalog 2>> "$log"
echo "moe layer: exit $?"

timeout 150 python3 benchmarks/device_hf_layer.py --device cuda --catalog $catalog 2>> "$log"
echo "hf layer: exit $?"

timeout 200 python3 -m simulator calibrate --backend torch --device cuda --out "$out/gpu_calibrated.yaml" --json \
    --set microbench.collectives=false --set 'microbench.dtypes=[bf16]' \
    --set 'microbench.gemm_shapes=[[1024,1024,1024],[2048,2048,2048],[4096,4096,4096],[8192,8192,8192],[1,4096,4096],[8,4096,4096],[32,4096,4096],[128,4096,4096],[512,4096,4096],[4096,4096,64],[4096,4096,256],[4096,14336,4096],[4096,4096,14336],[16,14336,4096],[256,14336,4096]]' \
    --set microbench.gemm_cold_bytes=536870912 \
    --set 'microbench.copy_sizes_bytes=[1048576,16777216,268435456,1073741824]' \
    --set 'microbench.host_copy_sizes_bytes=[1048576,16777216,134217728]' \
    --set microbench.decode_hidden=4096 --set microbench.decode_ffn_hidden=14336 \
    --set microbench.decode_num_heads=32 --set microbench.decode_vocab=32768 \
    --set 'microbench.decode_layers=[1,2,4]' --set 'microbench.decode_batches=[1,16,64]' \
    --set 'microbench.decode_kv_lens=[256,1024]' --set microbench.decode_dtype=bf16 \
    > "$out/calibrate.json" 2>> "$log"
echo "calibrate: exit $?"

timeout 180 python3 benchmarks/device_logits.py --device cuda 2>> "$log"
echo "logits: exit $?"
tail -c 3000 "$log"
