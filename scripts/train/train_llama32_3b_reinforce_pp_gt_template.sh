#!/usr/bin/env bash
# SeRL's name for train_llama32_3b_reinforce_pp_gt.sh (its README's openrlhf/scripts/train/...): the same run.
#   zsh scripts/train/train_llama32_3b_reinforce_pp_gt_template.sh [extra serl train arguments]
exec bash "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/train_llama32_3b_reinforce_pp_gt.sh" "$@"
