# Sourced by the templates here (bash and zsh): flags that fit a template's published layout to this
# machine. They come after the template's own flags, so they win; the user's extra arguments ("$@")
# come last and win over both.
#
#   serl_fit NAME GPUS_WRITTEN REFS    NAME: the template (for messages); GPUS_WRITTEN: the GPUs its
#                                      layout assumes; REFS: 1 if it places reference workers, else 0
#
# Sets FIT (an array). GPUS (default: the GPUs nvidia-smi lists) decides (MEM_GIB: the memory to count on,
# default MemAvailable):
#   GPUS >= GPUS_WRITTEN  nothing to change (nor when RAY_ADDRESS submits the run to a cluster);
#   0 < GPUS < written    one learner rank, reference worker and vLLM engine per GPU;
#   GPUS = 0              one process on the CPU (no Ray, the torch learner, fp32), after a check that
#                         the model fits in memory: a model whose size PRETRAIN names (3B, 135M, ...)
#                         needs about 20 bytes a parameter (weights, gradients, Adam, the reference
#                         and the generator's copy); too little memory stops here, saying what to change.
. "$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)/_venv.sh"  # the project's .venv first on PATH

# `ray job submit` of COMMAND ARGS to RAY_ADDRESS. The job's shell has no venv on its PATH: the command
# goes by its full path here (a single machine's cluster shares this file system). A cluster that
# does not answer is one line, not Ray's traceback.
serl_submit() {
  if ! command -v ray >/dev/null 2>&1; then
    echo "RAY_ADDRESS=$RAY_ADDRESS is set but ray is not installed here: unset RAY_ADDRESS to run in this process" >&2
    return 2
  fi
  if ! ray job list --address "$RAY_ADDRESS" >/dev/null 2>&1; then
    echo "no Ray cluster answers at RAY_ADDRESS=$RAY_ADDRESS: start one with 'ray start --head' (its jobs address is http://127.0.0.1:8265), or unset RAY_ADDRESS to run here" >&2
    return 2
  fi
  _cmd=$(command -v "$1" || printf '%s' "$1"); shift
  ray job submit --address "$RAY_ADDRESS" --working-dir "$PWD" -- "$_cmd" "$@"
}

serl_fit() {
  _name=$1 _written=$2 _refs=$3
  FIT=()
  if [ -z "${GPUS:-}" ] && [ -n "${RAY_ADDRESS:-}" ]; then
    return 0  # submitted to a cluster: its resources decide, as written
  fi
  if [ -z "${GPUS:-}" ]; then
    GPUS=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
  fi
  case "$GPUS" in *[!0-9]*|'') echo "$_name: GPUS must be a whole number, got '$GPUS'" >&2; return 2 ;; esac
  if [ "$GPUS" -ge "$_written" ]; then
    return 0
  fi
  if [ "$GPUS" -gt 0 ]; then
    FIT=(--actor_num_gpus_per_node "$GPUS" --vllm_num_engines "$GPUS")
    [ "$_refs" = 1 ] && FIT+=(--ref_num_gpus_per_node "$GPUS")
    echo "$_name: $GPUS GPU(s) here, the template is written for $_written: one learner rank and vLLM engine per GPU" >&2
    return 0
  fi
  _need=$(serl_model_gib "${PRETRAIN:-}")
  _have=${MEM_GIB:-$(awk '/^MemAvailable:/ {printf "%d", $2 / 1048576}' /proc/meminfo 2>/dev/null || true)}
  if [ -n "$_need" ] && [ -n "$_have" ] && [ "$_need" -gt "$_have" ]; then
    echo "$_name: no GPU here, and training $PRETRAIN on the CPU needs about $_need GiB of memory; $_have GiB is available. Run it where there are GPUs, or set a smaller model (PRETRAIN=smollm2) and smaller sizes as extra arguments, e.g. PRETRAIN=smollm2 STEPS=1 bash $_name --rollout_batch_size 2 --n_samples_per_prompt 2 --generate_max_len 64" >&2
    return 2
  fi
  FIT=(--ray false --learner torch --device cpu --colocate_all_models false --vllm_enable_sleep false
       --adam_offload false --bf16 auto --generator auto)
  echo "$_name: no GPU here: one process on the CPU (pass smaller sizes as extra arguments)" >&2
}

# GiB to train a model whose size its name gives (Llama-3.2-3B, Qwen2.5-1.5B, SmolLM2-135M); empty if unknown
serl_model_gib() {
  case "$1" in smollm2) echo 4; return ;; esac
  printf '%s\n' "$1" | awk '{
    if (match($0, /[0-9]+(\.[0-9]+)?[BbMm]([^A-Za-z]|$)/)) {
      s = substr($0, RSTART, RLENGTH); u = s; gsub(/[^BbMm]/, "", u); n = s + 0
      p = (u ~ /[Bb]/) ? n * 1e9 : n * 1e6
      printf "%d\n", p * 20 / 1073741824 + 2
    }
  }'
}
