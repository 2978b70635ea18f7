"""Bad input to `serl train`: one clear message, exit code 2, no run directory left behind."""
import subprocess
import sys

import pytest


def run_train(tmp_path, *args):
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "serl.cli", "train", "--run_dir", str(run_dir),
                        "--generator", "hf", *args], capture_output=True, text=True, cwd=tmp_path,
                       timeout=300)
    return r, run_dir


@pytest.mark.parametrize("content,needle", [
    (None, "seed file not found"),
    ('{"problem": "a b c d"}\n{broken\n', "seeds.jsonl:2: not valid JSON"),
    ('{"question": "a b c d"}\n', "seeds.jsonl:1: missing key 'problem'"),
    ("", "no seed problems"),
])
def test_bad_seed_file(tmp_path, content, needle):
    seeds = tmp_path / "seeds.jsonl"
    if content is not None:
        seeds.write_text(content)
    r, run_dir = run_train(tmp_path, "--prompt_data", str(seeds))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and str(seeds) in r.stderr
    assert "Traceback" not in r.stderr
    assert not run_dir.exists()


def test_missing_model_path(tmp_path):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    r, run_dir = run_train(tmp_path, "--prompt_data", str(seeds), "--model", str(tmp_path / "no-model"))
    assert r.returncode == 2 and "model path does not exist" in r.stderr
    assert not run_dir.exists()


def test_existing_run_dir_is_refused(tmp_path):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("x")
    r, _ = run_train(tmp_path, "--prompt_data", str(seeds), "--model", str(tmp_path / "nope.gguf"))
    assert r.returncode == 2
