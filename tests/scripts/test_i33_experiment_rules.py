"""The rules issue 33's experiment drivers apply before any run (no model is loaded):
SPIRAL's probe decision (token limit, parser), its paired per-hand statistics, and SPELL's
verifier calibration check."""
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(rel: str, name: str):
    path = ROOT / rel
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(path.parent))


def rates(strict, cut):
    return {"strict": strict, "cut": cut}


def test_probe_decision_takes_the_smallest_limit_that_fits_and_strict_only_above_half():
    decide = load("experiments/spiral/probe_legal.py", "probe_legal_t").decide
    probe = {"kuhn_poker": {"192": rates(0.7, 0.10), "384": rates(0.8, 0.02)},
             "tictactoe": {"192": rates(0.6, 0.20), "384": rates(0.55, 0.05)}}
    d = decide(probe)
    assert d["generate_max_len"] == 384 and d["action_parser"] == "strict"  # 192 cuts 20% of TicTacToe
    probe["tictactoe"]["384"] = rates(0.45, 0.05)
    assert decide(probe)["action_parser"] == "lenient"  # one game under 50%: lenient, both reported
    probe["tictactoe"] = {"192": rates(0.9, 0.3), "384": rates(0.9, 0.3)}
    assert decide(probe)["generate_max_len"] == 384  # none fits: the largest


def test_second_plan_keeps_the_instruction_that_fits_with_the_higher_lowest_strict_rate():
    decide_prompt = load("experiments/spiral/probe_legal.py", "probe_legal_t2").decide_prompt
    upstream = {"per_game": {"kuhn_poker": {"192": rates(0.5, 0.4), "384": rates(0.4, 0.3)},
                             "tictactoe": {"192": rates(0.3, 0.5), "384": rates(0.3, 0.4)}}}
    brief = {"per_game": {"kuhn_poker": {"192": rates(0.8, 0.10), "384": rates(0.8, 0.0)},
                          "tictactoe": {"192": rates(0.45, 0.12), "384": rates(0.6, 0.0)}}}
    d = decide_prompt({"upstream": upstream, "brief": brief})
    assert (d["system_prompt_name"], d["generate_max_len"], d["action_parser"]) == ("brief", 192, "lenient")
    assert decide_prompt({"upstream": upstream, "u2": upstream})["system_prompt_name"] == "upstream"  # none fits
    tie = decide_prompt({"upstream": brief, "brief": brief})
    assert tie["system_prompt_name"] == "upstream"  # a tie keeps the first: upstream's bare instruction
    upstream["per_game"]["kuhn_poker"]["384"] = rates(0.9, 0.0)
    upstream["per_game"]["tictactoe"]["384"] = rates(0.7, 0.1)
    d = decide_prompt({"upstream": upstream, "brief": brief})
    assert (d["system_prompt_name"], d["generate_max_len"], d["action_parser"]) == ("upstream", 384, "strict")


def test_paired_change_needs_the_same_deals_and_reports_the_difference():
    pe = load("experiments/spiral/paired_eval.py", "paired_eval_t")
    before = {"n": 4, "seat": [0, 1, 0, 1], "payoff": [-1, -1, 1, -2], "result": [-1, -1, 1, -1],
              "moves": [1, 1, 1, 1], "invalid": [1, 0, 0, 0], "invalid_strict": [1, 1, 0, 0]}
    after = dict(before, payoff=[1, -1, 1, 2], result=[1, -1, 1, 1])
    c = pe.change(before, after)
    assert c["payoff"] == pytest.approx(1.5) and c["win"] == pytest.approx(0.5)
    assert pe.rates(after)["win"] == 0.75 and pe.rates(before)["invalid_strict"] == 0.5
    with pytest.raises(ValueError):
        pe.change(before, dict(after, seat=[1, 0, 1, 0]))



def test_kinds_of_gain_split_format_stopping_and_play_on_clean_hands():
    pe = load("experiments/spiral/paired_eval.py", "paired_eval_k")
    before = {"n": 4, "seat": [0, 1, 0, 1], "payoff": [-1, -2, 1, -1], "result": [-1, -1, 1, -1],
              "moves": [2, 2, 1, 2], "invalid": [1, 0, 0, 0], "invalid_strict": [1, 0, 0, 0], "cut": [0, 1, 0, 0]}
    after = dict(before, payoff=[1, 2, 2, 1], invalid=[0, 0, 0, 0], cut=[0, 0, 0, 0])
    k = pe.kinds(before, after)
    # hands 0 (invalid) and 1 (cut) were not clean for theta0: play is judged on hands 2 and 3 only
    assert k["invalid_hands"] == [0.25, 0.0] and k["cut_moves"] == [pytest.approx(1 / 7), 0.0]
    assert k["clean_n"] == 2 and k["clean_before"] == 0.0 and k["clean_change"] == pytest.approx(1.5)
    with pytest.raises(ValueError):
        pe.kinds({k: v for k, v in before.items() if k != "cut"}, after)


def test_math_transfer_table_reports_the_change_among_problems_both_finished():
    tr = load("experiments/spiral/transfer.py", "transfer_t")
    base = {"n": 4, "correct_number": [0, 0, 1, 0], "truncated": [1, 0, 0, 0], "boxed": [0, 1, 1, 1]}
    arm = {"n": 4, "correct_number": [1, 1, 1, 0], "truncated": [0, 0, 0, 1], "boxed": [1, 1, 1, 1]}
    row = [line for line in tr.table({"gsm8k": {"theta0": base, "arm": arm}}).splitlines() if "| arm |" in line][0]
    # all four: +50 points; finished by both (items 1 and 2): item 1 gained, so +50 on 2 items
    assert "+50.0 [" in row.split("|")[4] and row.rstrip().endswith("(2) |")

def test_an_always_yes_verifier_is_not_calibrated():
    cal = load("experiments/spell/probe_verifier.py", "probe_verifier_t").calibration
    rule = [1.0, 1.0, 0.0, 0.0, 0.0]
    assert not cal([1, 1, 1, 1, 1], rule)["calibrated"]             # YES to everything: gap 0
    good = cal([1, 1, 0, 0, 1], rule)
    assert good["calibrated"] and good["gap"] == pytest.approx(1 - 1 / 3)
    assert not cal([1, -1, 0, -1, 0], rule)["calibrated"]           # 40% malformed
