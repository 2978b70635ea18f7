#!/usr/bin/env bash
# SeRL's name for train_llama32_3b_grpo_maj.sh (its README's openrlhf/scripts/train/...): the same run.
#   zsh scripts/train/train_llama32_3b_grpo_maj_template.sh [extra serl train arguments]
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/train_llama32_3b_grpo_maj.sh" "$@"
