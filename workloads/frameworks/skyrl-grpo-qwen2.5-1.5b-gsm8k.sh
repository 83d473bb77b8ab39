#!/usr/bin/env bash
# An example written for rlsim in SkyRL's launch-script format (after SkyRL's colocated GSM8K
# example, examples/train/gsm8k/run_gsm8k.sh, cited from memory; not a file from its repository):
# GRPO on Qwen2.5-1.5B-Instruct, the vLLM engines and the policy / reference on the same 8 GPUs
# (trainer.placement.colocate_all, SkyRL's default), 1024 prompts x 5 samples a step.
#   rlsim run --from-skyrl workloads/frameworks/skyrl-grpo-qwen2.5-1.5b-gsm8k.sh --print-scenario
#   rlsim run --from-skyrl workloads/frameworks/skyrl-grpo-qwen2.5-1.5b-gsm8k.sh trainer.placement.colocate_all=false generator.inference_engine.num_engines=4 trainer.placement.policy_num_gpus_per_node=4 trainer.placement.ref_num_gpus_per_node=4
set -x

DATA_DIR="$HOME/data/gsm8k"
NUM_GPUS=8
LOGGER="wandb"
INFERENCE_BACKEND="vllm"

uv run --isolated --extra fsdp -m skyrl.train.entrypoints.main_base \
  data.train_data="['$DATA_DIR/train.parquet']" \
  data.val_data="['$DATA_DIR/validation.parquet']" \
  trainer.algorithm.advantage_estimator="grpo" \
  trainer.policy.model.path="Qwen/Qwen2.5-1.5B-Instruct" \
  trainer.placement.colocate_all=true \
  trainer.strategy=fsdp \
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \
  trainer.placement.ref_num_gpus_per_node=$NUM_GPUS \
  generator.inference_engine.num_engines=$NUM_GPUS \
  generator.inference_engine.tensor_parallel_size=1 \
  trainer.epochs=20 \
  trainer.eval_batch_size=1024 \
  trainer.eval_before_train=true \
  trainer.eval_interval=5 \
  trainer.update_epochs_per_batch=1 \
  trainer.train_batch_size=1024 \
  trainer.policy_mini_batch_size=256 \
  trainer.micro_forward_batch_size_per_gpu=40 \
  trainer.micro_train_batch_size_per_gpu=40 \
  trainer.ckpt_interval=10 \
  trainer.max_prompt_length=512 \
  generator.sampling_params.max_generate_length=1024 \
  trainer.policy.optimizer_config.lr=1.0e-6 \
  trainer.algorithm.use_kl_loss=true \
  generator.inference_engine.backend=$INFERENCE_BACKEND \
  generator.batched=true \
  environment.env_class=gsm8k \
  generator.n_samples_per_prompt=5 \
  generator.inference_engine.gpu_memory_utilization=0.8 \
  trainer.logger="$LOGGER" \
  trainer.project_name="gsm8k" \
  trainer.run_name="gsm8k_test" \
  trainer.resume_mode=null \
  trainer.ckpt_path="$HOME/ckpts/gsm8k_1.5B_ckpt" \
  "$@"
