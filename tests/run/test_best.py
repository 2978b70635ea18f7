"""serl.run.best: --save_best keeps the policy of the best evaluated step (a stand-in learner)."""

import json

import pytest

from serl import ConfigError
from serl.run.best import BestKeeper, best_line, read_best


class Learner:
    def __init__(self):
        self.version = 0

    def save(self, path, state=True):
        from pathlib import Path

        Path(path).mkdir(parents=True)
        (Path(path) / "weights").write_text(str(self.version))


def test_keeps_the_best_and_compares_with_a_resumed_one(tmp_path):
    learner, keeper = Learner(), BestKeeper("eval/gsm8k/pass@1", tmp_path)
    kept = []
    for step, value in [(1, 0.2), (2, 0.5), (3, 0.4), (4, 0.5)]:
        learner.version = step
        kept.append(keeper.offer(step, {"eval/gsm8k/pass@1": value}, learner))
    assert kept == [True, True, False, False]  # a tie keeps the earlier step
    assert read_best(tmp_path) == {"metric": "eval/gsm8k/pass@1", "value": 0.5, "step": 2}
    assert (tmp_path / "best" / "weights").read_text() == "2" and not list(tmp_path.glob(".*best"))
    assert best_line(tmp_path) == f"best eval/gsm8k/pass@1: 0.5 at step 2, kept in {tmp_path / 'best'}"
    again = BestKeeper("eval/gsm8k/pass@1", tmp_path)  # a resume reads best.json
    assert not again.offer(5, {"eval/gsm8k/pass@1": 0.45}, learner) and again.offer(
        6, {"eval/gsm8k/pass@1": 0.6}, learner
    )
    assert json.loads((tmp_path / "best" / "best.json").read_text())["step"] == 6


def test_lower_is_better_where_the_name_says_so(tmp_path):
    from serl.report.summary import direction

    keeper = BestKeeper("eval/kuhn_poker/exploitability", tmp_path, direction("eval/kuhn_poker/exploitability"))
    assert keeper.offer(1, {"eval/kuhn_poker/exploitability": 0.3}, Learner())
    assert keeper.offer(2, {"eval/kuhn_poker/exploitability": 0.1}, Learner())
    assert not keeper.offer(3, {"eval/kuhn_poker/exploitability": 0.2}, Learner())


def test_a_metric_the_evaluation_lacks_is_refused_naming_those_it_has(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"save_best: the evaluation has no metric 'eval/gsm8k/pass@2'; it has: "
        r"eval/gsm8k/maj@2, eval/gsm8k/pass@1$",
    ):
        BestKeeper("eval/gsm8k/pass@2", tmp_path).check({"eval/gsm8k/pass@1": 0.1, "eval/gsm8k/maj@2": 0.2})


def test_save_best_without_an_evaluation_is_refused_before_the_run(train_here, tmp_path):
    rc, err = train_here("--save_best", "eval/gsm8k/pass@1", "--run_dir", tmp_path / "run", "--generator", "hf")
    assert rc == 2 and "save_best: eval/gsm8k/pass@1 needs an evaluation during training" in err
    assert not (tmp_path / "run").exists()


def test_a_metric_the_evaluation_lacks_is_refused_before_the_model_loads(train_here, tiny_train_args, tmp_path):
    rc, err = train_here(
        "--run_dir",
        str(tmp_path / "run"),
        *tiny_train_args,
        "--eval_data",
        "dataset/arith_heldout.jsonl",
        "--save_best",
        "eval/heldout/maj@8",
    )
    assert rc == 2, err[-2000:]
    assert (
        "save_best: the evaluation has no metric 'eval/heldout/maj@8'; it has: eval/heldout/pass@1, time/eval"
    ) in err
    assert "recipe serl, model" not in err and not (tmp_path / "run").exists()  # nothing loaded, nothing written
