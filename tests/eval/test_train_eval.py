"""`serl train --eval_steps`: a real run evaluates on benchmark files on schedule and logs it."""

import json

import pytest


@pytest.mark.slow
def test_train_evaluates_every_n_steps_and_logs(math_dir, tiny_serl_run):
    # the shared TINY_TRAIN run of tests/conftest.py (its training rows are also the golden metrics'),
    # with --eval_benchmarks gsm8k,svamp --eval_limit 2 --eval_k 2 --eval_steps 2 on math_dir
    assert tiny_serl_run.evaluated  # math_dir is there (else skipped), so the run evaluated
    run, r = tiny_serl_run.dir, tiny_serl_run.result
    assert r.returncode == 0, r.stderr[-3000:]

    lines = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    evals = {ln["step"]: ln for ln in lines if "eval/gsm8k/pass@1" in ln}
    assert sorted(evals) == [0, 2, 3]  # before training, every 2 steps, and at the end
    for step, m in evals.items():
        for bench in ("gsm8k", "svamp"):
            for metric in ("pass@1", "maj@2", "pass@2", "mean@2"):
                v = m[f"eval/{bench}/{metric}"]
                # two problems (and two samples each): only these fractions are possible
                assert v in ((0.0, 0.5, 1.0) if metric != "mean@2" else (0.0, 0.25, 0.5, 0.75, 1.0)), (
                    step,
                    bench,
                    metric,
                    v,
                )
            assert m[f"eval/{bench}/pass@2"] >= m[f"eval/{bench}/maj@2"]
        assert m["time/eval"] > 0
    # per-problem results were kept, and the summary pairs the first and last evaluation on them
    items = [json.loads(ln) for ln in (run / "eval_items.jsonl").read_text().splitlines()]
    assert [i["step"] for i in items] == [0, 2, 3]
    assert items[0]["items"]["eval/gsm8k/pass@1"]["ids"] == [0, 1]
    assert "on the same 2 problems" in r.stdout
    # and every generation's text, answer and verdict: greedy and 2 samples of 2 problems x 2 benchmarks
    recs = [json.loads(ln) for ln in (run / "eval_records.jsonl").read_text().splitlines()]
    assert [sum(x["step"] == s for x in recs) for s in (0, 2, 3)] == [12, 12, 12]
    greedy = [x for x in recs if x["step"] == 3 and x["kind"] == "greedy" and x["benchmark"] == "gsm8k"]
    want = items[-1]["items"]["eval/gsm8k/pass@1"]
    assert [x["idx"] for x in greedy] == want["ids"] and [float(x["correct"]) for x in greedy] == want["values"]
    assert all(isinstance(x["response"], str) and x["finish_reason"] in ("stop", "length") for x in recs)
    # the training steps themselves were logged as usual
    assert {ln["step"] for ln in lines if "reward/mean" in ln} == {1, 2, 3}
    # TINY_TRAIN's --report false: no plots, and the summary says how to draw them
    assert not (run / "report").exists()
    assert f"report: not drawn (--report false); `serl report {run}` draws it" in r.stdout


@pytest.mark.slow
def test_save_best_keeps_the_best_evaluated_step(math_dir, tiny_serl_run):
    # the same run, with --save_best eval/gsm8k/mean@2: steps 2 and 3 compete (not the evaluation before training)
    run, r = tiny_serl_run.dir, tiny_serl_run.result
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    score = {ln["step"]: ln["eval/gsm8k/mean@2"] for ln in lines if "eval/gsm8k/mean@2" in ln}
    best = json.loads((run / "best" / "best.json").read_text())
    want = 2 if score[2] >= score[3] else 3  # ties keep the earlier one
    assert best == {"metric": "eval/gsm8k/mean@2", "value": score[want], "step": want}
    assert (run / "best" / "config.json").is_file()  # a Hugging Face model, as RUN_DIR/model
    assert f"best eval/gsm8k/mean@2: {score[want]:.4g} at step {want}, kept in {run / 'best'}" in r.stdout
