"""The scripts work from a clone without activating anything: they find the project's .venv
themselves (scripts/_venv.sh, evaluation/_common.sh); `ray job submit` goes through in one line or
says why not (scripts/train/_fit.sh's serl_submit)."""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BARE = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "PYTHONPATH": str(ROOT)}


@pytest.fixture(autouse=True)
def _venv():
    if not (ROOT / ".venv" / "bin" / "serl").exists():
        pytest.skip("no .venv here (scripts/install.sh makes it)")


def test_an_evaluation_script_finds_the_venv_s_python(tmp_path):
    r = subprocess.run(
        ["bash", str(ROOT / "evaluation/math_greedy.sh"), "--k", "-3"],
        cwd=tmp_path,
        env=BARE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "--k must be >= 0" in r.stderr, r.stderr[-2000:]
    assert "No module named" not in r.stderr


def test_a_training_template_finds_the_venv_s_serl(tmp_path):
    env = dict(BARE, GPUS="8", PRETRAIN="smollm2", SAVE_PATH=str(tmp_path / "run"))
    r = subprocess.run(
        ["bash", str(ROOT / "scripts/train/train_spin.sh"), "--no_such_flag", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "--no_such_flag 1: not an option of serl train" in r.stderr, r.stderr[-2000:]
    assert "command not found" not in r.stderr


def test_the_data_defaults_are_the_documented_files():
    for path in (ROOT / "scripts/train").glob("train_*.sh"):
        text = path.read_text()
        assert "DATA_DIR:-data}" not in text and "train_with_idx.jsonl}" not in text, path.name


def test_a_ray_address_nobody_answers_is_one_line(tmp_path):
    fake = tmp_path / "bin" / "ray"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Traceback (most recent call last): ...' >&2\nexit 1\n")  # as ray does
    fake.chmod(0o755)
    env = dict(
        BARE,
        PATH=f"{fake.parent}:/usr/bin:/bin",
        GPUS="8",
        PRETRAIN="smollm2",
        RAY_ADDRESS="http://127.0.0.1:9",
        SAVE_PATH=str(tmp_path / "run"),
    )
    r = subprocess.run(
        ["bash", str(ROOT / "scripts/train/train_spin.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("no Ray cluster answers at RAY_ADDRESS=http://127.0.0.1:9")


def test_a_submitted_job_runs_this_environment_s_serl(tmp_path):
    """The job's shell has no venv on its PATH: the command goes by its full path."""
    out, venv = tmp_path / "argv", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "ray").write_text(f'#!/bin/sh\n[ "$1 $2" = "job list" ] && exit 0\nprintf "%s\\n" "$@" > {out}\n')
    (venv / "bin" / "serl").write_text("#!/bin/sh\nexit 0\n")
    for f in ("ray", "serl"):
        (venv / "bin" / f).chmod(0o755)
    env = dict(
        BARE,
        SERL_VENV=str(venv),
        GPUS="8",
        PRETRAIN="smollm2",
        RAY_ADDRESS="http://127.0.0.1:8265",
        SAVE_PATH=str(tmp_path / "run"),
    )
    r = subprocess.run(
        ["bash", str(ROOT / "scripts/train/train_spin.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    words = out.read_text().splitlines()
    assert words[:2] == ["job", "submit"] and words[words.index("--") + 1] == str(venv / "bin" / "serl")
