#!/usr/bin/env bash
# MMLU-Pro, 5-shot chain of thought. STRATIFIED=280 for a quick even sample (0 = all 12,032).
#   STRATIFIED=0 K=0 ./evaluation/mmlu_pro.sh
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_common.sh"
serl_eval --benchmarks mmlu_pro --mmlu_dir "$MMLU_DIR" --stratified "${STRATIFIED:-280}" \
  --prompt_style "$PROMPT_STYLE" --k "${K:-0}" --output_dir "$OUT_ROOT/mmlu_pro" "$@"
