#!/bin/bash
# OpenRLHF 0.11.2 hybrid engine (train.colocate_all): REINFORCE++-baseline on Qwen2.5-7B-Instruct with a
# rule reward served over HTTP, 8 GPUs of one node, written after the README's PPO example
# (examples/scripts/train_ppo_ray_hybrid_engine.sh) in 0.11.2's flag names.
# rlsim: rlsim run --from-openrlhf workloads/frameworks/openrlhf-reinforce-qwen2.5-7b-hybrid.sh
set -x
MODEL=Qwen/Qwen2.5-7B-Instruct

ray job submit --address="http://127.0.0.1:8265" \
   --runtime-env-json='{"working_dir": "/openrlhf"}' \
   -- python3 -m openrlhf.cli.train_ppo_ray \
   --ref.num_nodes 1 \
   --ref.num_gpus_per_node 8 \
   --actor.num_nodes 1 \
   --actor.num_gpus_per_node 8 \
   --vllm.num_engines 4 \
   --vllm.tensor_parallel_size 2 \
   --train.colocate_all \
   --vllm.gpu_memory_utilization 0.6 \
   --vllm.enable_sleep \
   --ds.enable_sleep \
   --actor.model_name_or_path ${MODEL} \
   --reward.remote_url http://localhost:5000/get_reward \
   --ckpt.output_dir /openrlhf/checkpoint/qwen2.5-7b-reinforce \
   --train.batch_size 128 \
   --train.micro_batch_size 4 \
   --rollout.batch_size 128 \
   --rollout.micro_batch_size 8 \
   --rollout.n_samples_per_prompt 8 \
   --rollout.max_new_tokens 4096 \
   --data.max_len 5120 \
   --train.max_epochs 1 \
   --ds.zero_stage 3 \
   --ds.param_dtype bf16 \
   --actor.adam.lr 5e-7 \
   --algo.advantage.estimator reinforce_baseline \
   --algo.kl.init_coef 1e-3 \
   --algo.kl.use_loss \
   --algo.kl.estimator k3 \
   --data.prompt_dataset OpenRLHF/prompt-collection-v0.1 \
   --data.input_key context_messages \
   --data.apply_chat_template \
   --actor.gradient_checkpointing_enable \
   --ds.packing_samples \
   --vllm.sync_backend nccl \
   --vllm.enforce_eager \
   --logger.wandb.key ${WANDB_TOKEN}
