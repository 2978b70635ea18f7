"""The evaluation/ scripts parse in bash and zsh and reach `serl eval`."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "evaluation").glob("*.sh"))


@pytest.mark.parametrize("shell", ["bash", "zsh"])
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_syntax(shell, script):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    subprocess.run([shell, "-n", str(script)], check=True)


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_script_reaches_cli(shell, tmp_path):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    script = next(p for p in SCRIPTS if p.name == "math_greedy.sh")
    # a bad option value: the CLI answers with exit 2 before loading anything
    r = subprocess.run([shell, str(script), "--k", "-3"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)})
    assert r.returncode == 2 and "--k must be >= 0" in r.stderr
