"""Game evaluation on scripted policies: intervals, forfeits, seats, Kuhn exploitability."""
import math
import re

import pytest

from serl.recipes.spiral.evaluate import evaluate_games, format_table, mean_ci, play_match, wilson
from serl.recipes.spiral.exploit import exploitability
from serl.recipes.spiral.lockstep import RandomPolicy

CARD = re.compile(r"Your card: (J|Q|K)")


def test_wilson_and_mean_interval_by_hand():
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson(0, 10)[0] == 0.0 and wilson(0, 10)[1] == pytest.approx(1.959964 ** 2 / (10 + 1.959964 ** 2))
    m, lo, hi = mean_ci([1, -1, 1, -1])  # sd = sqrt(4/3), half width 1.96 * sd / 2
    assert m == 0 and hi == pytest.approx(1.959964 * math.sqrt(4 / 3) / 2)


def test_a_policy_that_never_moves_legally_forfeits_every_game():
    res = play_match(lambda reqs: ["I pass"] * len(reqs), RandomPolicy(0), "tictactoe", 10)
    assert res["invalid_rate"] == 1.0 and res["win_rate"] == 0.0 and res["loss_rate"] == 1.0
    assert res["payoff"] == -1.0 and res["payoff_lo"] == res["payoff_hi"] == -1.0
    assert res["payoff_seat0"] == res["payoff_seat1"] == -1.0  # seats alternated: both seen


def kuhn_text_policy(prompts):
    """Bet or call with the King, check or fold otherwise (a pure policy, read off the prompt)."""
    out = []
    for p in prompts:
        card = CARD.search(p).group(1)
        facing_bet = "[call]" in p
        strong = card == "K"
        out.append("\\boxed{%s}" % (("call" if strong else "fold") if facing_bet else ("bet" if strong else "check")))
    return out


def test_kuhn_exploitability_of_a_scripted_policy_is_exact():
    pure = {}
    for card in "JQK":
        for h in ("", "c", "b", "cb"):
            acts = ("fold", "call") if h.endswith("b") else ("check", "bet")
            pure[(card, h)] = {acts[0]: float(card != "K"), acts[1]: float(card == "K")}
    m = evaluate_games(kuhn_text_policy, ["kuhn_poker"], 0, exploit_samples=3)
    assert m["eval/kuhn_poker/exploitability"] == pytest.approx(exploitability(pure))
    assert m["eval/kuhn_poker/invalid_rate"] == 0.0


def test_match_against_random_with_seats_alternated():
    m = evaluate_games(kuhn_text_policy, ["kuhn_poker"], 200, seed=3)
    p = "eval/kuhn_poker/vs_random/"
    assert m[p + "n"] == 200 and m[p + "invalid_rate"] == 0.0
    assert m[p + "payoff_lo"] < m[p + "payoff"] < m[p + "payoff_hi"]
    assert m[p + "win_lo"] <= m[p + "win_rate"] <= m[p + "win_hi"]
    assert m[p + "payoff"] > 0  # betting only with the King beats random play
    assert "kuhn_poker/vs_random" in format_table(m)
