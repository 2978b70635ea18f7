"""Bad input to `serl train --recipe spell`: one message naming the file, exit 2, no run dir.
Each case runs the command in this process (conftest's train_here): all are refused before a
model loads, and a subprocess each cost 2 to 7 s of interpreter start and imports."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _from_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # where a user of the repository runs it (and the subprocess ran)


def run_spell(train_here, tmp_path, *args):
    run_dir = tmp_path / "run"
    rc, err = train_here("--recipe", "spell", "--run_dir", run_dir, "--generator", "hf", *args)
    return rc, err, run_dir


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
def test_bad_corpus(tmp_path, train_here, kind):
    path, needle = _write(tmp_path, kind)
    rc, err, run_dir = run_spell(train_here, tmp_path, "--corpus", path)
    assert rc == 2, err
    assert needle in err and str(path) in err
    assert "Traceback" not in err
    assert not run_dir.exists()


def test_bad_heldout_file(tmp_path, train_here):
    bad = tmp_path / "qa.jsonl"
    bad.write_text('{"cluster": "heldout-000", "question": "Q?"}\n')
    rc, err, run_dir = run_spell(train_here, tmp_path, "--eval_qa_data", bad)
    assert rc == 2 and f"{bad}:1: key 'answer'" in err, err
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--verifier_band", "0.9", "0.5"], "verifier_band"),
        (["--questioner_max_len", "512", "--generate_max_len", "128"], "questioner_max_len"),
        (["--rouge_threshold", "0.5"], "belongs to recipe 'serl'"),
    ],
)
def test_bad_options(tmp_path, train_here, flags, needle):
    rc, err, run_dir = run_spell(train_here, tmp_path, *flags)
    assert rc == 2 and needle in err, err
    assert not run_dir.exists()


@pytest.mark.parametrize("kind", ["missing_key", "held_out", "one_label"])
def test_bad_warmup_pairs(tmp_path, train_here, kind):
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
    rc, err, run_dir = run_spell(train_here, tmp_path, "--verifier_warmup_steps", 1, "--verifier_warmup_data", pairs)
    assert rc == 2 and needle in err, err
    assert "Traceback" not in err and not run_dir.exists()
