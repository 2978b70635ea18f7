#!/usr/bin/env bash
# SeRL's pass@1 script name: evaluation/math_greedy.sh once per model of MODEL_PATH_LIST, on DATA_NAME.
#   MODEL_PATH_LIST=runs/x/model DATA_NAME=math_500,gsm8k bash evaluation/Math-Benchmarks/scripts/vllm_gen_outputs_greedy_template.sh
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_serl_names.sh"
serl_each_model math_greedy.sh "$@"
