# Shared settings for the evaluation scripts (sourced; works in bash and zsh).
# Override any of them from the environment, e.g. MODEL=/path/to/ckpt LIMIT=50 ./math_greedy.sh
_here=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
ROOT=$(cd "$_here/.." && pwd)
# the project's .venv (scripts/install.sh makes it) unless PYTHON names another: no activation needed
if [ -z "${PYTHON:-}" ] && [ -x "${SERL_VENV:-$ROOT/.venv}/bin/python" ]; then PYTHON=${SERL_VENV:-$ROOT/.venv}/bin/python; fi
PYTHON=${PYTHON:-python}
MODEL=${MODEL:-smollm2}
DATA_DIR=${DATA_DIR:-$ROOT/../shared/data/serl_math_benchmarks}
MMLU_DIR=${MMLU_DIR:-$ROOT/../shared/data/mmlu_pro}
GENERATOR=${GENERATOR:-auto}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-1024}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-2048}
PROMPT_STYLE=${PROMPT_STYLE:-chat_boxed}
LIMIT=${LIMIT:-0}
# The math sets SeRL reports on; any directory under DATA_DIR works.
MATH_SETS=${MATH_SETS:-math_500,gsm8k,svamp,asdiv,mawps,college_math,minerva_math,olympiadbench,aime24,amc23}
OUT_ROOT=${OUT_ROOT:-$ROOT/eval_outputs}
# vLLM on a CPU pins its threads to core 0 unless told otherwise.
export TOKENIZERS_PARALLELISM=false
serl_eval() {
  (cd "$ROOT" && "$PYTHON" -m serl.cli eval --model "$MODEL" --generator "$GENERATOR" \
    --max_new_tokens "$MAX_NEW_TOKENS" --max_model_len "$MAX_MODEL_LEN" "$@")
}
