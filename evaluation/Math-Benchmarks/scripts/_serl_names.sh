# Sourced by SeRL's script names here (bash and zsh): SeRL's variables read as serl's, then each model
# evaluated by one of serl's evaluation/ scripts, which generate and score in one pass.
#   MODEL_PATH_LIST  models, space- or comma-separated (serl's MODEL: one)
#   DATA_NAME        comma-separated benchmark names (serl's MATH_SETS)
#   DATA_DIR         SeRL's evaluation/Math-Benchmarks/data layout: <name>/test.jsonl (serl's default:
#                    ../shared/data/serl_math_benchmarks beside the repository)
#   CUDA_VISIBLE_DEVICES is read by torch and vLLM as usual.
_serl_here=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
SERL_EVAL_DIR=$(cd "$_serl_here/../.." && pwd)
[ -n "${DATA_NAME:-}" ] && export MATH_SETS="$DATA_NAME"
[ -n "${DATA_DIR:-}" ] && export DATA_DIR
serl_each_model() {  # serl_each_model SCRIPT [serl eval args]: SCRIPT once per model of MODEL_PATH_LIST
  _script=$1; shift
  _models=$(printf '%s' "${MODEL_PATH_LIST:-${MODEL:-smollm2}}" | tr ',' ' ')
  for _m in $(printf '%s' "$_models"); do
    # the whole path names the folder: runs/a/model and runs/b/model must not share one
    _name=$(printf '%s' "$_m" | sed -e 's#^\./##' -e 's#/*$##' -e 's#^/##' -e 's#/#_#g')
    MODEL="$_m" OUT_ROOT="${OUT_ROOT:-$SERL_EVAL_DIR/eval_outputs}/$_name" \
      bash "$SERL_EVAL_DIR/$_script" "$@" || return $?
  done
}
serl_scored_already() {  # SeRL's scoring steps: serl scored while generating; show what is there
  echo "$1: serl eval scores while it generates (pass@1, maj@K, pass@K in one pass); the results are" \
       "results.json and table.txt in each output folder" >&2
  for _d in $(printf '%s' "${OUTPUT_DIRS:-}" | tr ',' ' '); do
    find "$_d" -name table.txt -exec sh -c 'echo "== $1"; cat "$1"' _ {} \;
  done
}
