"""The deciding run's report (experiments/serl_efficacy/results_decide.py) from kept items alone:
each evaluation is paired with arm d on its own kind of machine, and the targets are read off
numbers worked out by hand."""
import json
from pathlib import Path

import pytest


@pytest.fixture()
def results_decide(experiment):
    return experiment("results_decide")


def ev(tag, step, correct, machine, truncated=None, k=0):
    n = len(correct)
    r = {"tag": tag, "model": tag, "step": step, "n": n, "k": k, "tokens": [100] * n,
         "truncated": truncated or [0] * n, "boxed": [1] * n, "correct_boxed": correct,
         "correct_number": correct, "machine": machine, "times": {"greedy_s": 1.0}}
    if k:
        r["maj_number"] = r["maj_boxed"] = correct
    return r


def write(items: Path, evals: list[dict]) -> None:
    (items / "eval").mkdir(parents=True)
    for r in evals:
        (items / "eval" / f"{r['tag']}.json").write_text(json.dumps(r))
    m = {"cpu": "test cpu", "cores": 2, "mem_gib": 24, "date": "2026-11-29", "commit": "abc"}
    (items / "setup.json").write_text(json.dumps({"settings": {"model": "m", "task": "t", "smoke": False},
                                                  "machine": m, "sessions": [m]}))
    tr = {"c": [{"step": 20, "minutes_used": 30.0, "wall_s": 2000.0}],
          "a": [{"step": 20, "minutes_used": 31.0, "wall_s": 2100.0}]}
    (items / "timings.json").write_text(json.dumps({"train": tr, "eval": {}}))
    (items / "arm_a").mkdir()
    rows = [{"step": 4, "guard/agreement": 0.5}, {"step": 8, "guard/agreement": 0.3, "guard/action": 3,
                                                  "guard/best_step": 4}]
    (items / "arm_a" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_each_evaluation_is_paired_with_arm_d_of_its_machine(tmp_path, results_decide):
    d_intel = [1] * 4 + [0] * 16          # 4/20
    d_amd = [1] * 8 + [0] * 12            # 8/20: the same weights, other kernels
    c_end = [1] * 10 + [0] * 10           # 10/20 on intel: +30 points against d_intel
    a_end = [1] * 9 + [0] * 11            # 9/20 on amd: +5 points against d_amd (not +25 against d_intel)
    write(tmp_path, [ev("d_intel-amx", 0, d_intel, "intel-amx", k=8), ev("d_amd-noamx", 0, d_amd, "amd-noamx", k=8),
                     ev("d_intel-amx_svamp", 0, d_intel, "intel-amx"),
                     ev("c_010", 10, [1] * 6 + [0] * 14, "intel-amx"), ev("c_020", 20, c_end, "intel-amx", k=8),
                     ev("c_020_svamp", 20, c_end, "intel-amx"), ev("a_020", 20, a_end, "amd-noamx", k=8)])
    text = results_decide.report(tmp_path)
    assert "- (c) - (d) = +30.0 [" in text and "target >= +8 with the interval above 0: **met**" in text
    assert "- (a) - (d) = +5.0 [" in text
    # a and c ended on different machines: each gain is against d on its own machine, 1/20 over 6/20
    assert "- (a)'s share of (c)'s gain: 17% [" in text
    assert "| c | 10 | nan | intel-amx | 30.0 [" in text  # a curve point without a training record of its own
    assert "step 8: rolled back, kept step 4" in text
    assert (tmp_path / "results.md").read_text() == text and (tmp_path / "curves.png").stat().st_size > 0


def test_an_arm_evaluated_on_a_machine_without_arm_d_says_so(tmp_path, results_decide):
    write(tmp_path, [ev("d_intel-amx", 0, [1, 0], "intel-amx"), ev("c_020", 20, [1, 1], "amd-noamx", k=8)])
    text = results_decide.report(tmp_path)
    assert "no arm d on amd-noamx yet" in text
    assert "- no trained arm has ended on a machine where arm d was evaluated" in text


def test_a_running_arm_shows_its_newest_point_and_is_not_judged(tmp_path, results_decide):
    d = [1] * 4 + [0] * 16
    write(tmp_path, [ev("d_amd-noamx", 0, d, "amd-noamx"), ev("a_017", 17, [1] * 9 + [0] * 11, "amd-noamx")])
    text = results_decide.report(tmp_path)
    assert "| a | 17 (running) | +25.0 [" in text
    assert "- arm a: running, newest point step 17; not judged yet" in text
    assert "- (a) - (d)" not in text and "- no trained arm has ended" in text
