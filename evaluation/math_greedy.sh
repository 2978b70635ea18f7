#!/usr/bin/env bash
# pass@1 (greedy) on the common math sets. Extra options go to `serl eval`.
#   MODEL=ckpt/ ./evaluation/math_greedy.sh --limit 100
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_common.sh"
serl_eval --benchmarks "$MATH_SETS" --data_dir "$DATA_DIR" --limit "$LIMIT" \
  --prompt_style "$PROMPT_STYLE" --k 0 --output_dir "$OUT_ROOT/math_greedy" "$@"
