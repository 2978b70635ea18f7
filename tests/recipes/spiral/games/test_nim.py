"""Nim (serl/recipes/spiral/games/nim.py): rules, hand-worked positions, the \\boxed{} parser on its moves, and play."""

import pytest

from serl.recipes.spiral.games import Nim, make_game
from serl.recipes.spiral.games.actions import parse_action, parser_options
from serl.recipes.spiral.games.lockstep import RandomPolicy, play_lockstep
from serl.recipes.spiral.games.prompts import render_prompt


def nim(piles, max_take=5):
    game = Nim(piles=len(piles), max_take=max_take).reset(0)
    game.piles = list(piles)
    return game


def test_moves_winner_and_refusals():
    game = nim([1, 2])
    assert game.legal_actions() == ["[take 1 from pile 1]", "[take 1 from pile 2]", "[take 2 from pile 2]"]
    assert not game.step("[take 3 from pile 2]") and not game.step("take 1 from pile 1")  # too many; no brackets
    assert game.step("[take 1 from pile 1]") and game.piles == [0, 2] and game.current_player == 1
    assert "[take 1 from pile 1]" not in game.legal_actions()  # an empty pile offers no move
    assert game.step("[take 2 from pile 2]") and game.done and game.winner() == 1  # took the last stone
    assert game.payoffs() == (-1.0, 1.0) and game.legal_actions() == []


@pytest.mark.parametrize(
    "piles,max_take,winning",
    [
        ([1, 2, 3], 5, []),  # 1 ^ 2 ^ 3 = 0: lost for the player to move
        ([1, 2, 4], 5, ["[take 1 from pile 3]"]),  # 1 ^ 2 ^ 4 = 7; 4 -> 3 leaves 1 ^ 2 ^ 3 = 0
        ([3, 5], 5, ["[take 2 from pile 2]"]),  # 3 ^ 5 = 6; 5 -> 3 leaves 3 ^ 3 = 0
        ([3], 2, []),  # take at most 2: Grundy value 3 mod 3 = 0, lost
        ([4], 2, ["[take 1 from pile 1]"]),  # 4 mod 3 = 1: take 1, leaving 3
    ],
)
def test_winning_moves_by_hand(piles, max_take, winning):
    game = nim(piles, max_take)
    assert game.winning_moves() == winning and (game.nim_sum() == 0) == (not winning)


def test_deal_is_seeded_and_bounded():
    deals = {tuple(make_game("nim").reset(s).piles) for s in range(30)}
    assert all(len(d) == 3 and all(1 <= n <= 5 for n in d) for d in deals) and len(deals) > 5
    assert make_game("nim").reset(7).piles == make_game("nim").reset(7).piles
    with pytest.raises(ValueError, match="nim: need"):
        Nim(piles=0)


@pytest.mark.parametrize(
    "response,parser,action",
    [
        ("I leave a nim-sum of 0: \\boxed{take 1 from pile 3}", "strict", "[take 1 from pile 3]"),
        ("\\boxed{Take 1 from Pile 3.}", "strict", "[take 1 from pile 3]"),
        ("\\boxed{[take 1 from pile 3]}", "strict", "[take 1 from pile 3]"),
        ("\\boxed{1 from pile 3}", "strict", None),  # not a legal action's words
        ("\\boxed{take 6 from pile 3}", "strict", None),
        ("\\boxed{I take 1 from pile 3}", "strict", None),
        ("\\boxed{I take 1 from pile 3}", "lenient", "[take 1 from pile 3]"),
    ],
)
def test_boxed_moves(response, parser, action):
    legal = nim([1, 2, 4]).legal_actions()
    assert parse_action(response, legal, **parser_options(parser)).action == action


def test_prompt_shows_the_piles_and_the_format():
    text = render_prompt(nim([1, 2, 4]))
    assert "pile 1: 1, pile 2: 2, pile 3: 4" in text and "\\boxed{take 4 from pile 3}" in text


def test_best_play_beats_random_from_a_winning_deal():
    def best(requests):  # a winning move if there is one, else the first legal move
        out = []
        for r in requests:
            win = games[r.episode].winning_moves() or list(r.legal_actions)
            out.append("\\boxed{" + win[0].strip("[]") + "}")
        return out

    games = [g for g in (make_game("nim").reset(s) for s in range(40)) if g.nim_sum() != 0][:10]
    _, episodes = play_lockstep(games, [("best", "random")] * len(games), {"best": best, "random": RandomPolicy(0)})
    assert len(episodes) == 10 and all(ep.winner == 0 and ep.invalid_player is None for ep in episodes)
