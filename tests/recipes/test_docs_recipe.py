"""docs/recipes.md runs as written: its toy recipe package, registered from a plain
script, trains, resumes, and shows its own option in --help."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "recipes.md"


def _blocks(kind: str) -> list[tuple[str, str]]:
    text = DOC.read_text()
    return re.findall(rf"```{kind}(?: file=(\S+))?\n(.*?)```", text, re.S)


def _write_files(where: Path) -> None:
    for name, body in _blocks("python"):
        if name:
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            (where / name).write_text(body)


def _commands() -> list[str]:
    (_, body), = _blocks("bash")
    body = body.replace("\\\n", " ")
    return [line.split("#")[0].strip() for line in body.splitlines() if line.strip()]


def test_toy_recipe_help_and_foreign_flag(tmp_path):
    _write_files(tmp_path)
    (tmp_path / "toy_boxed" / "__init__.py").touch()
    r = subprocess.run([sys.executable, "train_boxed.py", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "--boxed_reward" in r.stdout and "options of the 'boxed' recipe" in r.stdout
    assert "--enable_self_evolution" not in r.stdout
    r = subprocess.run([sys.executable, "train_boxed.py", "--enable_self_evolution", "false"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2 and "belongs to recipe 'serl'" in r.stderr


@pytest.mark.slow
def test_toy_recipe_trains_and_resumes_as_written(tmp_path, smol_path):
    _write_files(tmp_path)
    for cmd in _commands():
        cmd = cmd.replace("python ", f"{sys.executable} ", 1).replace("dataset/", f"{ROOT}/dataset/")
        r = subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (cmd, r.stderr[-3000:])
    rows = [json.loads(x) for x in (tmp_path / "runs/boxed/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(0.0 <= r["reward/mean"] <= 1.0 and "time/generate" in r for r in rows)
    assert any(r.get("actor/updates", 0) >= 1 for r in rows)
    changes = (tmp_path / "runs/boxed/config_changes.jsonl").read_text()
    assert '"steps": {"was": 2, "now": 3}' in changes
