#!/usr/bin/env bash
# GRPO x majority-vote reward on a fixed prompt set, without self-instruction.
# LLaMA-3.2-3B-Instruct on one node of 8 GPUs, models colocated (SeRL's published setup).
# Flags and numbers follow SeRL's README and templates (arXiv:2505.20347,
# github.com/wantbook-book/SeRL, openrlhf/scripts/train/); see docs/distributed.md.
#
#   bash scripts/train/train_llama32_3b_grpo_maj.sh          (or: zsh scripts/train/train_llama32_3b_grpo_maj.sh)
#   RAY_ADDRESS=http://127.0.0.1:8265 RAY_AUTH_MODE=token bash scripts/train/train_llama32_3b_grpo_maj.sh   # via `ray job submit`
#
# Paths come from the environment; the defaults are SeRL-like.
set -eu

PRETRAIN="${PRETRAIN:-meta-llama/Llama-3.2-3B-Instruct}"
# README.md's data: ../shared/data beside the clone (run from the clone's root)
DATA_DIR="${DATA_DIR:-../shared/data}"
PROMPT_DATA="${PROMPT_DATA:-$DATA_DIR/math/train.jsonl}"
SAVE_PATH="${SAVE_PATH:-runs/llama32_3b_grpo_maj}"
CKPT_PATH="${CKPT_PATH:-$SAVE_PATH/ckpt}"
STEPS="${STEPS:-100}"  # our choice: SeRL runs until stopped (--num_episodes 1000000)
USE_WANDB="${USE_WANDB:-false}"  # true logs to W&B (key from WANDB_API_KEY)
WANDB_RUN_NAME="${WANDB_RUN_NAME:-llama32_3b_grpo_maj}"

# Run locally, or submit to a Ray cluster when RAY_ADDRESS is set.
launch() {
  if [ -n "${RAY_ADDRESS:-}" ]; then
    serl_submit "$@"  # scripts/train/_fit.sh: the job runs this environment's serl, or one line says why not
  else
    "$@"
  fi
}

# Fit the layout to this machine (scripts/train/_fit.sh); extra arguments go to serl train and win.
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_fit.sh"
serl_fit "$0" 8 1 || exit $?

launch serl train \
  --pretrain "$PRETRAIN" \
  --prompt_data "$PROMPT_DATA" \
  --input_key problem \
  --label_key answer \
  --save_path "$SAVE_PATH" \
  --ckpt_path "$CKPT_PATH" \
  --steps "$STEPS" \
  --ray \
  --learner deepspeed \
  --actor_num_nodes 1 \
  --actor_num_gpus_per_node 8 \
  --ref_num_nodes 1 \
  --ref_num_gpus_per_node 8 \
  --vllm_num_engines 8 \
  --vllm_tensor_parallel_size 1 \
  --vllm_gpu_memory_utilization 0.6 \
  --colocate_all_models \
  --vllm_enable_sleep \
  --generator vllm \
  --zero_stage 3 \
  --bf16 \
  --adam_offload \
  --gradient_checkpointing \
  --advantage_estimator group_norm \
  --use_kl_loss \
  --kl_estimator k3 \
  --n_samples_per_prompt 16 \
  --rollout_batch_size 16 \
  --micro_rollout_batch_size 4 \
  --train_batch_size 16 \
  --micro_train_batch_size 2 \
  --prompt_max_len 1024 \
  --generate_max_len 1024 \
  --actor_learning_rate 5e-7 \
  --init_kl_coef 1e-4 \
  --reward_mode majority \
  --enable_self_evolution false \
  --reward_difficulty_bounds 0.2 0.8 \
  --use_wandb "$USE_WANDB" \
  --wandb_run_name "$WANDB_RUN_NAME" \
  "${FIT[@]}" "$@"
