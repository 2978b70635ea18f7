# Sourced by the scripts here (bash and zsh): the project's own environment without activating it.
# `scripts/install.sh` makes .venv beside this folder; when no `serl` is on PATH, its bin/ goes first,
# so `serl`, `python` and `ray` are the project's. A `serl` already on PATH (an activated environment)
# is kept. SERL_VENV names another environment.
_serl_root=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)
_serl_venv=${SERL_VENV:-$_serl_root/.venv}
if ! command -v serl >/dev/null 2>&1; then
  if [ -x "$_serl_venv/bin/serl" ]; then
    PATH="$_serl_venv/bin:$PATH"
    export PATH
  else
    echo "serl is not installed in $_serl_venv: run scripts/install.sh there first (or set SERL_VENV to an environment that has serl)" >&2
  fi
fi
