"""The end-of-run summary (serl.report.summary): which direction is better, intervals worked out by
hand, and the quickstart's own numbers told honestly."""

from __future__ import annotations

import json

import pytest

from serl.eval.stats import paired_diff_ci, wilson
from serl.report.summary import (
    ITEMS_FILE,
    RECORDS_FILE,
    change_lines,
    direction,
    paired_change,
    print_summary,
    read_items,
    save_items,
    save_records,
    verdict,
)


@pytest.mark.parametrize(
    "key, want",
    [
        ("time/eval", -1),
        ("time/step", -1),
        ("time/generate", -1),
        ("eval/heldout/pass@1", +1),
        ("eval/gsm8k/maj@8", +1),
        ("eval/gsm8k/mean@8", +1),
        ("reward/mean", +1),
        ("reward/agreement", +1),
        ("dpo/accuracy", +1),
        ("train/reward_mean", +1),
        ("eval/responder/strict", +1),
        ("eval/kuhn_poker/vs_random/win_rate", +1),
        ("reward/no_answer_frac", -1),
        ("eval/verifier/bad_format", -1),
        ("spiral/invalid_rate", -1),
        ("eval/kuhn_poker/exploitability", -1),
        ("loss/dpo", -1),
        # counts, sizes, leashes: no better direction
        ("pool/size", 0),
        ("train/batch_prompts", 0),
        ("response/length_mean", 0),
        ("loss/policy", 0),
        ("kl/mean", 0),
        ("actor/entropy", 0),
        ("eval/kuhn_poker/vs_random/win_lo", 0),
        ("custom/thing", 0),
    ],
)
def test_direction_table(key, want):
    assert direction(key) == want


@pytest.mark.parametrize(
    "key, before, after, want",
    [
        ("time/eval", 7.572, 6.718, "improved (faster)"),  # the quickstart's line that said "got worse"
        ("time/eval", 6.0, 7.0, "got worse (slower)"),
        ("eval/heldout/pass@1", 0.281, 0.188, "got worse"),
        ("reward/no_answer_frac", 0.3, 0.1, "improved"),
        ("pool/size", 10, 12, "changed"),
        ("pool/size", 12, 10, "changed"),
        ("train/batch_prompts", 4, 4, "unchanged"),
    ],
)
def test_verdict_follows_direction(key, before, after, want):
    assert verdict(key, before, after) == want


Z = 1.96


@pytest.mark.parametrize(
    "k, n, lo, hi",
    [
        # (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), p = 9/32:
        # mid 0.28125 + 0.060025 = 0.341275, half 1.96·sqrt(0.0063171 + 0.00093789) = 0.166945,
        # divided by 1.12005
        (9, 32, 0.155650, 0.453748),
        # p = 6/32: mid 0.247525, half 1.96·sqrt(0.0047607 + 0.00093789) = 0.147959
        (6, 32, 0.088894, 0.353095),
        # 0/32: lower bound 0, upper z²/(n + z²) = 3.8416 / 35.8416
        (0, 32, 0.0, 0.107183),
    ],
)
def test_wilson_bounds_by_hand(k, n, lo, hi):
    got = wilson(k, n, Z)
    assert got[0] == pytest.approx(lo, abs=5e-5) and got[1] == pytest.approx(hi, abs=5e-5)  # hand rounding


def test_paired_interval_matches_published_example():
    # Cavo et al. (2012), paired 2x2 [[59, 6], [16, 80]] (rows: second outcome, columns:
    # first): Fagerland, Lydersen & Laake's Newcombe square-and-add interval,
    # -0.0621 (-0.1186 to -0.0046).
    after = [1] * 59 + [1] * 6 + [0] * 16 + [0] * 80
    before = [1] * 59 + [0] * 6 + [1] * 16 + [0] * 80
    d, lo, hi = paired_diff_ci(before, after)
    assert (round(d, 4), round(lo, 4), round(hi, 4)) == (-0.0621, -0.1186, -0.0046)


def test_three_items_lost_of_32_is_not_significant_by_hand():
    # 9/32 -> 6/32, three problems lost, none gained: both 6, neither 23, discordant 0 and 3.
    # phi = (6·23 - 0·3 - 32/2) / sqrt(6·26·9·23) = 122 / 179.700 = 0.67891;
    # lower = -0.09375 - sqrt(0.098606² - 2·phi·0.098606·0.172498 + 0.172498²) = -0.22175
    # upper = -0.09375 + sqrt(0.165595² - 2·phi·0.165595·0.125600 + 0.125600²) = +0.02855
    before = [1] * 9 + [0] * 23
    after = [1] * 6 + [0] * 26
    d, lo, hi = paired_diff_ci(before, after)
    assert d == pytest.approx(-3 / 32)
    assert lo == pytest.approx(-0.22175, abs=2e-5) and hi == pytest.approx(0.02855, abs=2e-5)
    assert lo < 0 < hi


def test_paired_interval_edges():
    # the same outcomes twice: no change, a symmetric interval. Wilson(1, 3) = (0.061491, 0.792348);
    # phi = (1·2 - 0 - 3/2) / sqrt(1·2·1·2) = 0.25; half-width
    # sqrt(0.271842² - 2·0.25·0.271842·0.459015 + 0.459015²) = 0.471384
    d, lo, hi = paired_diff_ci([0, 1, 0], [0, 1, 0])
    assert d == 0.0 and lo == pytest.approx(-0.471384, abs=2e-5) and hi == pytest.approx(0.471384, abs=2e-5)
    with pytest.raises(ValueError, match="equally long"):
        paired_diff_ci([1], [1, 0])
    with pytest.raises(ValueError, match="0/1"):
        paired_diff_ci([0.5], [1])


def _run(tmp_path, rows, items=None):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for step, it in (items or {}).items():
        save_items(tmp_path, step, it)
    return tmp_path


QUICKSTART = [  # the numbers the quickstart printed in issue 30
    {"step": 0, "eval/heldout/pass@1": 9 / 32, "time/eval": 7.572},
    {"step": 1, "reward/mean": 0.3, "train/batch_prompts": 4, "pool/size": 10},
    {
        "step": 3,
        "reward/mean": 0.4,
        "train/batch_prompts": 4,
        "pool/size": 12,
        "eval/heldout/pass@1": 6 / 32,
        "time/eval": 6.718,
    },
]


def _items(values):
    return {"eval/heldout/pass@1": {"ids": list(range(len(values))), "values": values}}


def test_quickstart_summary_tells_the_truth(tmp_path, capsys):
    run = _run(tmp_path, QUICKSTART, {0: _items([1.0] * 9 + [0.0] * 23), 3: _items([1.0] * 6 + [0.0] * 26)})
    print_summary(run, 190)
    out = capsys.readouterr().out
    assert "time/eval                step 0: 7.6 s  ->  step 3: 6.7 s  improved (faster)" in out
    assert "step 0: 0.281 [0.156, 0.454]  ->  step 3: 0.188 [0.089, 0.353]" in out
    assert "change -0.094 [-0.222, +0.029] on the same 32 problems (0 better, 3 worse)" in out
    assert "not significant: the interval contains 0" in out
    assert "pool/size                10  ->  12  changed" in out
    assert "train/batch_prompts      4  ->  4  unchanged" in out
    assert "reward/mean              0.300  ->  0.400  improved" in out


def test_a_large_gain_is_called_significant(tmp_path):
    run = _run(
        tmp_path, QUICKSTART, {0: _items([1.0] * 2 + [0.0] * 30), 3: _items([1.0] * 14 + [0.0] * 18)}
    )  # 12 gained, none lost
    text = "\n".join(change_lines(run))
    assert "(12 better, 0 worse)" in text and "improved (the interval excludes 0)" in text


def test_without_per_problem_results_it_says_so(tmp_path):
    text = "\n".join(change_lines(_run(tmp_path, QUICKSTART)))
    assert "0.281  ->  step 3: 0.188  got worse (no per-problem results kept: no interval" in text


def test_pairs_only_problems_both_evaluations_have():
    c = paired_change({"ids": [0, 1, 2], "values": [1, 0, 1]}, {"ids": [1, 2, 3], "values": [1, 1, 0]})
    assert (c["n"], c["before"], c["after"], c["better"], c["worse"]) == (2, [0, 1], [1, 1], 1, 0)
    # fractional scores (pass@K): a paired bootstrap instead
    c = paired_change({"ids": [0, 1], "values": [0.5, 0.25]}, {"ids": [0, 1], "values": [0.75, 0.25]})
    assert c["diff"] == pytest.approx(0.125) and c["lo"] <= c["diff"] <= c["hi"]


def test_items_file_later_line_wins_and_torn_lines_are_skipped(tmp_path):
    save_items(tmp_path, 0, _items([1.0]))
    save_items(tmp_path, 2, _items([0.0]))
    save_items(tmp_path, 2, _items([1.0]))  # a resume evaluated step 2 again
    with open(tmp_path / ITEMS_FILE, "a") as f:
        f.write('{"step": 3, "ite')
    got = read_items(tmp_path)
    assert sorted(got) == [0, 2] and got[2]["eval/heldout/pass@1"]["values"] == [1.0]
    save_items(tmp_path, 4, {})  # nothing to keep: nothing written
    assert read_items(tmp_path).keys() == {0, 2}


def test_records_file_keeps_each_generation_with_its_step(tmp_path):
    rec = {"idx": 7, "kind": "greedy", "response": "2 + 2 = \\boxed{4}", "answer": "4", "correct": True}
    save_records(tmp_path, 0, [rec])
    save_records(tmp_path, 5, [rec | {"correct": False}, rec | {"idx": 8}])
    save_records(tmp_path, 6, [])  # nothing to keep: nothing written
    lines = [json.loads(x) for x in (tmp_path / RECORDS_FILE).read_text().splitlines()]
    assert [(x["step"], x["idx"], x["correct"]) for x in lines] == [(0, 7, True), (5, 7, False), (5, 8, True)]
    assert lines[0]["response"] == "2 + 2 = \\boxed{4}"


def test_report_summary_has_the_same_lines(tmp_path):
    from serl.report.write import load_run, summary_markdown

    run = _run(tmp_path, QUICKSTART, {0: _items([1.0] * 9 + [0.0] * 23), 3: _items([1.0] * 6 + [0.0] * 26)})
    md = summary_markdown(load_run(run), [])
    assert "## What changed" in md and "not significant: the interval contains 0" in md
    assert "| eval/heldout/pass@1 | 0.1875 (step 3) | 0.2812 (step 0) | highest |" in md
