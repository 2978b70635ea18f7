import pytest

from serl.recipes.spiral.games.lockstep import Episode, Turn
from serl.recipes.spiral.games.stats import summarize


def turn(ep, player, policy, response, action):
    return Turn(ep, "kuhn_poker", player, policy, "p", response, response, action, None, "ok" if action else "illegal")


def test_summarize_by_game_and_role():
    eps = [
        # self-play: counts for role 0 (win) and role 1 (loss)
        Episode(0, "kuhn_poker", ("current", "current"), (1.0, -1.0), (1.0, -1.0), 0, None, False, 2),
        # learner in seat 1 against a snapshot, loses by an invalid move
        Episode(1, "kuhn_poker", ("snap", "current"), (0.5, -1.5), (0.0, 0.0), 0, 1, False, 2),
        # learner in seat 0 against random, a draw by the turn limit
        Episode(2, "kuhn_poker", ("current", "random"), (0.0, 0.0), (0.0, 0.0), None, None, True, 3),
    ]
    turns = [
        turn(0, 0, "current", "aaaa", "[bet]"),
        turn(0, 1, "current", "bb", "[fold]"),
        turn(1, 0, "snap", "zzzzzzzz", "[check]"),
        turn(1, 1, "current", "cccccc", None),
        turn(2, 0, "current", "dd", "[check]"),
        turn(2, 1, "random", "x", "[bet]"),
        turn(2, 0, "current", "eeeeee", "[call]"),
    ]
    m = summarize(turns, eps, "current")
    r0, r1 = "kuhn_poker/role0/", "kuhn_poker/role1/"
    assert (m[r0 + "win_rate"], m[r0 + "draw_rate"], m[r0 + "loss_rate"]) == (0.5, 0.5, 0.0)
    assert (m[r1 + "win_rate"], m[r1 + "loss_rate"]) == (0.0, 1.0)
    assert m[r0 + "invalid_rate"] == 0.0 and m[r1 + "invalid_rate"] == 0.5
    assert m[r0 + "response_chars"] == pytest.approx((4 + 2 + 6) / 3) and m[r1 + "response_chars"] == 4.0
    assert m[r0 + "mean_turns"] == 2.5 and m[r0 + "reward"] == 0.5 and m[r1 + "reward"] == -1.25
    assert m[r0 + "opponent/current"] == 0.5 and m[r0 + "opponent/random"] == 0.5
    assert m[r1 + "opponent/snap"] == 0.5 and m[r1 + "opponent/current"] == 0.5
    assert summarize(turns, eps, "nobody") == {}
