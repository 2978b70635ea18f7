#!/usr/bin/env bash
# SeRL's maj@K script name: evaluation/math_maj.sh with K=N_SAMPLING, once per model of MODEL_PATH_LIST.
#   N_SAMPLING=16 MODEL_PATH_LIST=runs/x/model DATA_NAME=math_500 bash evaluation/Math-Benchmarks/scripts/vllm_gen_outputs_n_sampling_template.sh
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_serl_names.sh"
export K="${N_SAMPLING:-${K:-8}}"
serl_each_model math_maj.sh "$@"
