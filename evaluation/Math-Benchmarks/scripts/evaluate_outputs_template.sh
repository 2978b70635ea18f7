#!/usr/bin/env bash
# A SeRL scoring step: serl's generation scripts already scored; this shows the tables under OUTPUT_DIRS.
#   OUTPUT_DIRS=eval_outputs bash evaluation/Math-Benchmarks/scripts/evaluate_outputs_template.sh
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_serl_names.sh"
serl_scored_already "$(basename "$0")"
