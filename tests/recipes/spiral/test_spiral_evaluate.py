"""Game evaluation on scripted policies: intervals, forfeits, seats, Kuhn exploitability, and
`serl eval --games` (bad input exits 2; a run against a snapshot on a stand-in generator)."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from serl.engines.base import Completion
from serl.eval.cli import cli_main
from serl.recipes.spiral.evaluate import evaluate_games, format_table, mean_ci, play_match, wilson
from serl.recipes.spiral.games.exploit import exploitability
from serl.recipes.spiral.games.lockstep import RandomPolicy
from serl.recipes.spiral.snapshots import save_snapshot

ROOT = Path(__file__).resolve().parents[3]

CARD = re.compile(r"Your card: (J|Q|K)")


def test_wilson_and_mean_interval_by_hand():
    lo, hi = wilson(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    assert wilson(0, 10)[0] == 0.0 and wilson(0, 10)[1] == pytest.approx(1.959964**2 / (10 + 1.959964**2))
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


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--games", "chess"], "unknown game 'chess'; known games"),
        (["--games", "kuhn_poker", "--opponents", "random,no/such/dir"], "snapshot path 'no/such/dir' does not exist"),
        ([], "nothing to evaluate"),
    ],
)
def test_serl_eval_games_refuses_with_exit_2(tmp_path, flags, message):
    r = subprocess.run(
        [sys.executable, "-m", "serl.cli", "eval", "--output_dir", str(tmp_path / "out"), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and not (tmp_path / "out").exists()


class WeightTok:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        return messages[0]["content"]

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        return {"input_ids": [ord(ch) for ch in text]}  # characters as ids: prompts decode exactly


class WeightPlayer:
    """Plays by the weights it serves: w = 0 checks or folds, w = 1 bets or calls (Kuhn Poker)."""

    def __init__(self):
        self.w, self.loads = 0.0, []

    def generate(self, prompts, n, sampling):
        aggressive = self.w == 1.0
        out = []
        for p in prompts:
            p = "".join(map(chr, p))  # prompts arrive as ids
            facing = "[call]" in p
            move = ("call" if aggressive else "fold") if facing else ("bet" if aggressive else "check")
            out.append([Completion(f"\\boxed{{{move}}}", [1], [2], "stop")])
        return out

    def load_weights(self, named):
        self.w = float(dict(named)["w"][0])
        self.loads.append(self.w)

    def close(self):
        pass


def test_serl_eval_games_against_a_snapshot(tmp_path, monkeypatch, capsys):
    import serl.eval.shared
    import serl.models.resolve

    model = tmp_path / "model"
    save_snapshot([("w", torch.zeros(1))], model / "model.safetensors")  # the evaluated policy: passive
    snap = save_snapshot([("w", torch.ones(1))], tmp_path / "snap.safetensors")  # the opponent: aggressive
    gen = WeightPlayer()
    monkeypatch.setattr(serl.models.resolve, "resolve_model", lambda spec: str(model))
    monkeypatch.setattr(serl.models.resolve, "load_tokenizer", lambda path: WeightTok())
    monkeypatch.setattr(serl.eval.shared, "make_generator", lambda kind, path, tok, args: ("stand-in", gen))
    out = tmp_path / "out"
    code = cli_main(
        [
            "--model",
            "m",
            "--games",
            "kuhn_poker",
            "--n_games",
            "6",
            "--opponents",
            f"random,{snap}",
            "--exploit_samples",
            "2",
            "--output_dir",
            str(out),
        ]
    )
    assert code == 0
    m = json.loads((out / "games.json").read_text())["metrics"]
    # check/fold against bet/call loses the ante in every hand, from either seat
    p = "eval/kuhn_poker/vs_fixed/"
    assert (m[p + "n"], m[p + "payoff"], m[p + "win_rate"], m[p + "invalid_rate"]) == (6, -1.0, 0.0, 0.0)
    assert m[p + "payoff_seat0"] == m[p + "payoff_seat1"] == -1.0
    assert m["eval/kuhn_poker/vs_random/n"] == 6
    passive = {
        (c, h): ({"fold": 1.0, "call": 0.0} if h.endswith("b") else {"check": 1.0, "bet": 0.0})
        for c in "JQK"
        for h in ("", "c", "b", "cb")
    }
    assert m["eval/kuhn_poker/exploitability"] == pytest.approx(exploitability(passive))
    assert 1.0 in gen.loads and gen.w == 0.0  # the snapshot was served, then the policy again
    assert "kuhn_poker/vs_fixed" in capsys.readouterr().out and (out / "games.txt").is_file()


@pytest.mark.parametrize(
    "say,parser,invalid,strict",
    [
        ("\\boxed{%s}", "strict", 0.0, 0.0),
        ("\\boxed{%s}", "mention", 0.0, 0.0),
        ("I have thought about this hand for a long while and I will %s", "mention", 0.0, 1.0),
        ("I have thought about this hand for a long while and I will %s", "strict", 1.0, 1.0),
    ],
)
def test_strict_invalid_rate_rereads_the_same_moves(say, parser, invalid, strict):
    from serl.recipes.spiral.games.actions import parser_options

    def passive(requests):  # check, or fold facing a bet: always legal when parsed
        return [say % r.legal_actions[0].strip("[]") for r in requests]

    m = play_match(passive, RandomPolicy(1), "kuhn_poker", 20, parse_options=parser_options(parser))
    assert (m["invalid_rate"], m["invalid_rate_strict"]) == (invalid, strict)
