#!/usr/bin/env bash
# SPELL: one policy as questioner, responder and verifier over document clusters, one GRPO
# update over the three roles' samples (Yang et al., "SPELL: Self-Play Reinforcement Learning
# for Evolving Long-Context Language Models", Tongyi-Zhiwen 2025, arXiv:2509.23863).
# Qwen2.5-7B-Instruct on one node of 8 GPUs with the full (not compact) prompts. The
# responder's 8 samples, the 0.1 grounding threshold, the [0.51, 0.99] verifier band and the
# memory of 3 follow SPELL; batch sizes, lengths and the learning rate are our choices.
#
#   bash scripts/train/train_spell.sh          (or: zsh scripts/train/train_spell.sh)
#   CORPUS=path/to/my_docs bash scripts/train/train_spell.sh           # any text or JSONL folder
#   RAY_ADDRESS=http://127.0.0.1:8265 bash scripts/train/train_spell.sh   # via `ray job submit`
set -eu

PRETRAIN="${PRETRAIN:-Qwen/Qwen2.5-7B-Instruct}"
CORPUS="${CORPUS:-dataset/docs_train.jsonl}"
SAVE_PATH="${SAVE_PATH:-runs/spell_qwen25_7b}"
CKPT_PATH="${CKPT_PATH:-$SAVE_PATH/ckpt}"
STEPS="${STEPS:-100}"
USE_WANDB="${USE_WANDB:-false}"  # true logs to W&B (key from WANDB_API_KEY)
WANDB_RUN_NAME="${WANDB_RUN_NAME:-spell_qwen25_7b}"

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
  --recipe spell \
  --pretrain "$PRETRAIN" \
  --corpus "$CORPUS" \
  --save_path "$SAVE_PATH" \
  --ckpt_path "$CKPT_PATH" \
  --steps "$STEPS" \
  --ray \
  --learner deepspeed \
  --actor_num_nodes 1 \
  --actor_num_gpus_per_node 8 \
  --vllm_num_engines 8 \
  --vllm_tensor_parallel_size 1 \
  --vllm_gpu_memory_utilization 0.6 \
  --colocate_all_models \
  --vllm_enable_sleep \
  --generator vllm \
  --zero_stage 3 \
  --bf16 \
  --gradient_checkpointing \
  --advantage_estimator group_norm \
  --init_kl_coef 0 \
  --compact_prompts false \
  --cluster_size 12 \
  --paragraphs_per_prompt 3 \
  --rollout_batch_size 32 \
  --n_samples_per_prompt 8 \
  --verifier_samples 8 \
  --grounding_samples 8 \
  --grounding_threshold 0.1 \
  --verifier_band 0.51 0.99 \
  --memory_capacity 3 \
  --max_refill_rounds 3 \
  --micro_rollout_batch_size 4 \
  --micro_train_batch_size 2 \
  --prompt_max_len 8192 \
  --generate_max_len 2048 \
  --questioner_max_len 1024 \
  --verifier_max_len 512 \
  --actor_learning_rate 1e-6 \
  --use_wandb "$USE_WANDB" \
  --wandb_run_name "$WANDB_RUN_NAME" \
  "${FIT[@]}" "$@"
