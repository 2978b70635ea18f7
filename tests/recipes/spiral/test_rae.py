import json

import pytest

from serl.recipes.spiral.games.lockstep import Episode, Turn
from serl.recipes.spiral.rae import RoleBaselines, turn_advantages


def test_ema_against_hand_numbers():
    rae = RoleBaselines(alpha=0.95)
    # step 1: role 0 returns 1, -1, 1 (mean 1/3); role 1 the opposite; baselines start at 0
    step1 = [
        ("kuhn_poker", 0, 1.0),
        ("kuhn_poker", 1, -1.0),
        ("kuhn_poker", 0, -1.0),
        ("kuhn_poker", 1, 1.0),
        ("kuhn_poker", 0, 1.0),
        ("kuhn_poker", 1, -1.0),
    ]
    assert rae.advantages(step1) == [1.0, -1.0, -1.0, 1.0, 1.0, -1.0]
    assert rae.baseline("kuhn_poker", 0) == pytest.approx(0.05 / 3)  # 0.95 * 0 + 0.05 * 1/3
    assert rae.baseline("kuhn_poker", 1) == pytest.approx(-0.05 / 3)
    # step 2: A uses the baseline from before this step's update
    adv = rae.advantages([("kuhn_poker", 0, 2.0), ("kuhn_poker", 1, -2.0)])
    assert adv == pytest.approx([2 - 0.05 / 3, -2 + 0.05 / 3])  # 1.983333
    assert rae.baseline("kuhn_poker", 0) == pytest.approx(0.95 * 0.05 / 3 + 0.05 * 2)  # 0.115833
    assert rae.baseline("tictactoe", 0) == 0.0  # other games keep their own baselines


def test_update_false_and_initial():
    rae = RoleBaselines(alpha=0.5, initial=0.25)
    assert rae.advantages([("g", 1, 1.0)], update=False) == [0.75]
    assert rae.baseline("g", 1) == 0.25
    rae.update([("g", 1, 1.0), ("g", 1, 0.0)])
    assert rae.baseline("g", 1) == pytest.approx(0.5 * 0.25 + 0.5 * 0.5)


def test_state_dict_round_trip():
    rae = RoleBaselines(alpha=0.9)
    rae.update([("kuhn_poker", 0, 1.0), ("liars_dice", 1, -1.0)])
    state = json.loads(json.dumps(rae.state_dict()))
    assert state["values"] == {"kuhn_poker/0": pytest.approx(0.1), "liars_dice/1": pytest.approx(-0.1)}
    other = RoleBaselines()
    other.load_state_dict(state)
    assert other.alpha == 0.9 and other.values == rae.values


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"alpha": 0.9, "initial": 0, "values": {"no_role": 1}},
        {"alpha": 0.9, "initial": 0, "values": {"g/x": 1}},
        None,
    ],
)
def test_malformed_state_refused(state):
    with pytest.raises(ValueError, match="RAE state"):
        RoleBaselines().load_state_dict(state)


@pytest.mark.parametrize("alpha", [-0.1, 1.5])
def test_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        RoleBaselines(alpha)


def turn(ep, player, policy):
    return Turn(ep, "kuhn_poker", player, policy, "p", "r", "r", "[bet]", "[bet]", "ok")


def episode(index, seats, rewards):
    return Episode(index, "kuhn_poker", seats, rewards, rewards, 0 if rewards[0] > 0 else 1, None, False, 2)


def test_turn_advantages():
    eps = [
        episode(0, ("current", "current"), (1.0, -1.0)),  # self-play: both roles
        episode(1, ("snap", "current"), (2.0, -2.0)),
    ]  # learner in seat 1 only
    turns = [
        turn(0, 0, "current"),
        turn(0, 1, "current"),
        turn(0, 0, "current"),
        turn(1, 0, "snap"),
        turn(1, 1, "current"),
    ]
    rae = RoleBaselines()
    got = turn_advantages(turns, eps, "current", rae)
    assert [(t.episode, t.player, a) for t, a in got] == [(0, 0, 1.0), (0, 1, -1.0), (0, 0, 1.0), (1, 1, -2.0)]
    assert rae.baseline("kuhn_poker", 1) == pytest.approx(0.05 * -1.5)
    # the no-RAE control: batch mean of the learner's returns (1 - 1 - 2) / 3 = -2/3
    got = turn_advantages(turns, eps, "current", None)
    assert [a for _, a in got] == pytest.approx([5 / 3, -1 / 3, 5 / 3, -4 / 3])
