#!/usr/bin/env bash
# The SmolLM2-135M-Instruct numbers recorded in evaluation/README.md (vLLM on a CPU).
# The three greedy passes first, then the maj@8 passes; each writes its own folder,
# so a pass that finishes keeps its results when a later one is cut short.
# PASSES="maj8" runs only the maj@8 passes; PASSES="greedy" only the greedy ones.
set -eu
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)/_common.sh"
# serl binds the engine to every core of the process unless VLLM_CPU_OMP_THREADS_BIND says otherwise;
# 4 GiB of KV cache rather than 2 leaves room for the long sampled chunks of the maj@8 passes.
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-4}
GENERATOR=vllm
MAX_NEW_TOKENS=384
PASSES=${PASSES:-greedy maj8}
run() {
  tag=$1; shift
  case " $PASSES " in *" ${tag##*_} "*) ;; *) return 0 ;; esac
  serl_eval --chunk 50 --output_dir "$OUT_ROOT/smollm2/$tag" "$@"
}
run math_500_greedy --benchmarks math_500 --data_dir "$DATA_DIR" --limit 100 --k 0
run gsm8k_greedy --benchmarks gsm8k --data_dir "$DATA_DIR" --limit 200 --k 0
run mmlu_pro_greedy --benchmarks mmlu_pro --mmlu_dir "$MMLU_DIR" --stratified 280 --k 0
run math_500_maj8 --benchmarks math_500 --data_dir "$DATA_DIR" --limit 100 --k 8 --no_greedy
run gsm8k_maj8 --benchmarks gsm8k --data_dir "$DATA_DIR" --limit 200 --k 8 --no_greedy
run mmlu_pro_maj8 --benchmarks mmlu_pro --mmlu_dir "$MMLU_DIR" --stratified 280 --k 8 --no_greedy
