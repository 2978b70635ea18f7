#!/usr/bin/env bash
# The benchmark environment: serl's venv plus TRL, without touching serl's venv.
# A second venv sees the first one's packages through a .pth file and gets only
# bench/requirements.txt installed into itself.
# Usage: bench/install.sh [SERL_VENV] [BENCH_VENV]     (defaults .venv, .venv-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
SERL_VENV="${1:-.venv}"
BENCH_VENV="${2:-.venv-bench}"
[ -x "$SERL_VENV/bin/python" ] || { echo "bench/install.sh: $SERL_VENV has no python; run make install first" >&2; exit 2; }
base=$("$SERL_VENV/bin/python" -c "import sys; print(sys._base_executable)")
site=$("$SERL_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
[ -x "$BENCH_VENV/bin/python" ] || "$base" -m venv "$BENCH_VENV"
bsite=$("$BENCH_VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$site" > "$bsite/serl_env.pth"
echo "[bench install] pip install -r bench/requirements.txt into $BENCH_VENV (on top of $SERL_VENV)"
rc=0; out=$("$BENCH_VENV/bin/python" -m pip install -q -r bench/requirements.txt 2>&1) || rc=$?
printf '%s\n' "$out" \
  | grep -vE "^WARNING: Location|is ignored|dependency conflicts|requires .* which is not installed|requires .* but you have|^$" >&2 || true
[ "$rc" = 0 ] || { echo "[bench install] ERROR: pip install -r bench/requirements.txt failed (exit $rc); stopping." >&2; exit 1; }
"$BENCH_VENV/bin/python" -c "import trl, serl, torch; print('[bench install] ok: trl', trl.__version__, 'torch', torch.__version__)"
