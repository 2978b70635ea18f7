"""Bad input to `serl train --recipe spin`: one clear message, exit code 2, no run directory.
Each case runs the command in this process (conftest's train_here): all are refused before a
model loads, where a subprocess each cost about 2 s of interpreter start and imports."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]  # run from the repo root: this checkout's serl

GOOD = {"problem": "What is 1 + 1?", "answer": "2", "solution": "1 + 1 = 2.\nThe answer is \\boxed{2}"}


def run_train(train_here, monkeypatch, tmp_path, rows, *args):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_dir = tmp_path / "run"
    monkeypatch.chdir(ROOT)
    rc, err = train_here(
        "--recipe", "spin", "--run_dir", str(run_dir), "--generator", "hf", "--prompt_data", str(data), *args
    )
    return rc, err, run_dir, data


@pytest.mark.parametrize(
    "rows,args,needles",
    [
        ([GOOD], ["--output_key", ""], ["output_key", "spin mode trains on human answers"]),
        ([GOOD, {"problem": "What is 2 + 2?", "answer": "4"}], [], ["sft.jsonl:2", "missing key 'solution'"]),
        ([GOOD, GOOD | {"solution": "  "}], [], ["sft.jsonl:2", "key 'solution' is empty"]),
        ([GOOD], ["--beta", "0"], ["beta: must be > 0"]),
        ([GOOD], ["--beta", "-0.1"], ["beta: must be > 0"]),
        ([GOOD], ["--ref_update", "steps:0"], ["ref_update", "steps:0"]),
        ([GOOD], ["--ref_update", "sometimes"], ["ref_update", "'sometimes'"]),
        ([GOOD], ["--spin_mode", "online", "--ref_update", "iteration"], ["ref_update: online mode has no iterations"]),
        ([GOOD], ["--spin_mode", "online", "--n_samples_per_prompt", "1"], ["n_samples_per_prompt", ">= 2"]),
        ([GOOD], ["--dpo_loss", "hinge", "--label_smoothing", "0.1"], ["label_smoothing", "sigmoid"]),
        (
            [GOOD, {"problem": "What is 2 + 2?", "solution": "4"}],
            ["--spin_mode", "online", "--reward_mode", "rule"],
            ["sft.jsonl", "problem 2 has no 'answer'"],
        ),
    ],
)
def test_bad_input_exits_2_without_a_run_dir(tmp_path, train_here, monkeypatch, rows, args, needles):
    rc, err, run_dir, data = run_train(train_here, monkeypatch, tmp_path, rows, *args)
    assert rc == 2, err[-2000:]
    for needle in needles:
        assert needle in err, (needle, err[-2000:])
    assert "Traceback" not in err
    assert not run_dir.exists()
