"""Bad input to `serl train --recipe spell`: one message naming the file, exit 2, no run dir."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def run_spell(tmp_path, *args):
    run_dir = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "serl.cli", "train", "--recipe", "spell", "--run_dir", str(run_dir),
                        "--generator", "hf", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    return r, run_dir


def _write(tmp_path, kind):
    if kind == "missing":
        return tmp_path / "nope", "corpus not found"
    if kind == "empty_file":
        (tmp_path / "docs.jsonl").write_text("\n\n")
        return tmp_path / "docs.jsonl", "empty corpus"
    if kind == "empty_dir":
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "data.json").write_text("{}")  # .json in a folder is not read
        return tmp_path / "docs", "empty corpus"
    if kind == "bad_jsonl":
        (tmp_path / "docs.jsonl").write_text('{"text": "fine paragraph of text"}\n{"body": "x"}\n')
        return tmp_path / "docs.jsonl", "docs.jsonl:2: missing key 'text'"
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["missing", "empty_file", "empty_dir", "bad_jsonl"])
def test_bad_corpus(tmp_path, kind):
    path, needle = _write(tmp_path, kind)
    r, run_dir = run_spell(tmp_path, "--corpus", path)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and str(path) in r.stderr
    assert "Traceback" not in r.stderr
    assert not run_dir.exists()


def test_bad_heldout_file(tmp_path):
    bad = tmp_path / "qa.jsonl"
    bad.write_text('{"cluster": "heldout-000", "question": "Q?"}\n')
    r, run_dir = run_spell(tmp_path, "--eval_qa_data", bad)
    assert r.returncode == 2 and f"{bad}:1: key 'answer'" in r.stderr, r.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("flags,needle", [
    (["--verifier_band", "0.9", "0.5"], "verifier_band"),
    (["--questioner_max_len", "512", "--generate_max_len", "128"], "questioner_max_len"),
    (["--rouge_threshold", "0.5"], "belongs to recipe 'serl'"),
])
def test_bad_options(tmp_path, flags, needle):
    r, run_dir = run_spell(tmp_path, *flags)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize("kind", ["missing_key", "held_out", "one_label"])
def test_bad_warmup_pairs(tmp_path, kind):
    """The warm-up's pairs are checked before anything is written: file, line and key; a held-out
    question; both labels present."""
    pairs = tmp_path / "pairs.jsonl"
    if kind == "missing_key":
        pairs.write_text('{"question": "Q?", "candidate": "a", "gold": "a"}\n{"question": "R?", "gold": "b"}\n')
        needle = f"{pairs}:2: key 'candidate' missing"
    elif kind == "held_out":
        first = (ROOT / "dataset/docs_heldout_verify.jsonl").read_text().splitlines()[0]
        pairs.write_text(first + "\n")
        needle = f"{pairs}:1: question"
    else:
        pairs.write_text('{"question": "Q?", "candidate": "It was 1881.", "gold": "1881"}\n')
        needle = "1 right and 0 wrong"
    r, run_dir = run_spell(tmp_path, "--verifier_warmup_steps", 1, "--verifier_warmup_data", pairs)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not run_dir.exists()
