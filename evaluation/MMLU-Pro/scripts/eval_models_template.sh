#!/usr/bin/env bash
# SeRL's MMLU-Pro script name: evaluation/mmlu_pro.sh once per model of `models` (SeRL's variable) or
# MODEL_PATH_LIST. serl's result has the STEM / Humanities / Social / Other groups already.
#   models="runs/x/model" STRATIFIED=0 bash evaluation/MMLU-Pro/scripts/eval_models_template.sh
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/../../Math-Benchmarks/scripts/_serl_names.sh"
MODEL_PATH_LIST="${models:-${MODEL_PATH_LIST:-}}" serl_each_model mmlu_pro.sh "$@"
