#!/usr/bin/env bash
# SPIRAL: self-play on Kuhn Poker with role-conditioned advantages (Liu et al., 2025, arXiv:2506.24119).
# Qwen3-4B-Base on one node of 8 GPUs, models colocated. Numbers follow the public implementation's
# run.sh (github.com/spiral-rl/spiral): lr 1e-6 constant, 2 PPO epochs, no KL, 4096 new tokens,
# temperature 1, top_p 1, a checkpoint every 32 steps, 51200 training samples (400 steps of 128).
# Its --rollout_batch_size 128 is taken here as 128 games per step (our reading).
#
#   bash scripts/train/train_spiral.sh          (or: zsh scripts/train/train_spiral.sh)
#   RAY_ADDRESS=http://127.0.0.1:8265 RAY_AUTH_MODE=token bash scripts/train/train_spiral.sh   # via `ray job submit`
#
# Paths come from the environment.
set -eu

PRETRAIN="${PRETRAIN:-Qwen/Qwen3-4B-Base}"
SAVE_PATH="${SAVE_PATH:-runs/spiral_qwen3_4b_kuhn}"
GAMES="${GAMES:-kuhn_poker}"
STEPS="${STEPS:-400}"
USE_WANDB="${USE_WANDB:-false}"  # true logs to W&B (key from WANDB_API_KEY)
WANDB_RUN_NAME="${WANDB_RUN_NAME:-spiral_qwen3_4b_kuhn}"

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
serl_fit "$0" 8 0 || exit $?

launch serl train \
  --recipe spiral \
  --pretrain "$PRETRAIN" \
  --save_path "$SAVE_PATH" \
  --games "$GAMES" \
  --kuhn_rules standard \
  --opponent self \
  --games_per_step 128 \
  --rae \
  --rae_alpha 0.95 \
  --filter_zero_adv \
  --mask_truncated \
  --invalid_penalty -1.5 \
  --invalid_opponent_reward 0.5 \
  --ppo_epochs 2 \
  --init_kl_coef 0 \
  --actor_learning_rate 1e-6 \
  --lr_warmup_ratio 0 \
  --min_lr_ratio 1.0 \
  --temperature 1.0 \
  --top_p 1.0 \
  --generate_max_len 4096 \
  --prompt_max_len 8192 \
  --steps "$STEPS" \
  --save_steps 32 \
  --eval_steps 16 \
  --eval_games 16 \
  --exploit_samples 16 \
  --micro_train_batch_size 1 \
  --ray \
  --learner deepspeed \
  --zero_stage 2 \
  --actor_num_nodes 1 \
  --actor_num_gpus_per_node 8 \
  --vllm_num_engines 8 \
  --vllm_tensor_parallel_size 1 \
  --vllm_gpu_memory_utilization 0.45 \
  --colocate_all_models \
  --vllm_enable_sleep \
  --generator vllm \
  --bf16 \
  --gradient_checkpointing \
  --use_wandb "$USE_WANDB" \
  --wandb_run_name "$WANDB_RUN_NAME" \
  "${FIT[@]}" "$@"
