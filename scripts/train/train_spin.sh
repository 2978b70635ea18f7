#!/usr/bin/env bash
# SPIN: self-play fine-tuning on GSM8K's human solutions (chosen) against the model's own
# answers (rejected), or online DPO on the best and worst of its own answers (SPIN_MODE=online).
# Qwen2.5-1.5B-Instruct on one node of 8 GPUs, models colocated.
# SPIN numbers follow the paper's code (Chen et al. 2024, arXiv:2401.01335, github.com/uclaml/SPIN:
# beta 0.1, learning rate 5e-7, 10% warm-up, sampling at temperature 1.0 and top-p 1.0, the
# previous iteration's pairs trained again); online DPO follows verl's recipe/spin (two answers
# per prompt, reference refreshed every step). See docs/spin.md.
#
#   bash scripts/train/train_spin.sh          (or: zsh scripts/train/train_spin.sh)
#   SPIN_MODE=online bash scripts/train/train_spin.sh
#   RAY_ADDRESS=http://127.0.0.1:8265 RAY_AUTH_MODE=token bash scripts/train/train_spin.sh   # via `ray job submit`
#
# Paths come from the environment; GSM8K is read from the hub (or a save_to_disk copy).
set -eu

PRETRAIN="${PRETRAIN:-Qwen/Qwen2.5-1.5B-Instruct}"
PROMPT_DATA="${PROMPT_DATA:-openai/gsm8k:main}"
SPIN_MODE="${SPIN_MODE:-spin}"  # spin | online
SAVE_PATH="${SAVE_PATH:-runs/qwen25_1p5b_spin_gsm8k}"
CKPT_PATH="${CKPT_PATH:-$SAVE_PATH/ckpt}"
# spin mode, 7473 problems, 64 pairs per step, 2 epochs: 234 + 468 + 468 steps = three iterations
STEPS="${STEPS:-1170}"
USE_WANDB="${USE_WANDB:-false}"  # true logs to W&B (key from WANDB_API_KEY)
WANDB_RUN_NAME="${WANDB_RUN_NAME:-qwen25_1p5b_spin_gsm8k}"

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
  --recipe spin \
  --spin_mode "$SPIN_MODE" \
  --pretrain "$PRETRAIN" \
  --prompt_data "$PROMPT_DATA" \
  --prompt_split train \
  --input_key question \
  --output_key answer \
  --label_key answer \
  --save_path "$SAVE_PATH" \
  --ckpt_path "$CKPT_PATH" \
  --steps "$STEPS" \
  --ray \
  --learner deepspeed \
  --actor_num_nodes 1 \
  --actor_num_gpus_per_node 8 \
  --ref_num_nodes 1 \
  --ref_num_gpus_per_node 0 \
  --vllm_num_engines 8 \
  --vllm_tensor_parallel_size 1 \
  --vllm_gpu_memory_utilization 0.6 \
  --colocate_all_models \
  --vllm_enable_sleep \
  --generator vllm \
  --zero_stage 3 \
  --bf16 \
  --gradient_checkpointing \
  --beta 0.1 \
  --dpo_loss sigmoid \
  --ref_update auto \
  --iteration_size 0 \
  --epochs_per_iteration 2 \
  --mix_previous 1.0 \
  --reward_mode rule \
  --rollout_batch_size 64 \
  --micro_rollout_batch_size 8 \
  --micro_train_batch_size 4 \
  --temperature 1.0 \
  --top_p 1.0 \
  --prompt_max_len 512 \
  --generate_max_len 512 \
  --actor_learning_rate 5e-7 \
  --lr_warmup_ratio 0.1 \
  --save_steps 50 \
  --use_wandb "$USE_WANDB" \
  --wandb_run_name "$WANDB_RUN_NAME" \
  "${FIT[@]}" "$@"
