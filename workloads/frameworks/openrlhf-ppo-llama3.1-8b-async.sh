#!/bin/bash
# OpenRLHF 0.11.2 asynchronous PPO (train.async_enable): vLLM engines, actor, reference, critic and a
# reward model each on GPUs of their own (OpenRLHF's default placement, no colocation flags), 4 nodes of 8.
# rlsim: rlsim run --from-openrlhf workloads/frameworks/openrlhf-ppo-llama3.1-8b-async.sh
python3 -m openrlhf.cli.train_ppo_ray \
   --ref.num_nodes 1 --ref.num_gpus_per_node 4 \
   --reward.num_nodes 1 --reward.num_gpus_per_node 4 \
   --critic.num_nodes 1 --critic.num_gpus_per_node 8 \
   --actor.num_nodes 1 --actor.num_gpus_per_node 8 \
   --vllm.num_engines 8 --vllm.tensor_parallel_size 1 \
   --train.async_enable --train.async_queue_size 1 \
   --actor.model_name_or_path meta-llama/Llama-3.1-8B-Instruct \
   --reward.model_name_or_path meta-llama/Llama-3.1-8B-Instruct \
   --train.batch_size 256 --train.micro_batch_size 4 \
   --rollout.batch_size 1024 --rollout.micro_batch_size 8 --rollout.n_samples_per_prompt 1 \
   --rollout.max_new_tokens 2048 --data.max_len 3072 \
   --ds.zero_stage 3 --ds.param_dtype bf16 \
   --algo.advantage.estimator gae --algo.kl.init_coef 0.01 \
   --actor.gradient_checkpointing_enable --ds.packing_samples \
   --data.prompt_dataset OpenRLHF/prompt-collection-v0.1 --data.input_key context_messages --data.apply_chat_template
