#!/usr/bin/env bash
# maj@K and pass@K (K samples, temperature 1.0, top_p 0.95) plus pass@1 on the math sets.
#   K=16 ./evaluation/math_maj.sh
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_common.sh"
K=${K:-8}
serl_eval --benchmarks "$MATH_SETS" --data_dir "$DATA_DIR" --limit "$LIMIT" \
  --prompt_style "$PROMPT_STYLE" --k "$K" --temperature "${TEMPERATURE:-1.0}" --top_p "${TOP_P:-0.95}" \
  --output_dir "$OUT_ROOT/math_maj$K" "$@"
