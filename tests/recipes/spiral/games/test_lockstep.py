import pytest

from serl.recipes.spiral.games import GAMES, KuhnPoker, TicTacToe, make_game
from serl.recipes.spiral.games.lockstep import (
    MoveRequest,
    RandomPolicy,
    RewardRule,
    pair_seats,
    play_lockstep,
    replay_draws,
    text_policy,
)


class Recorder:
    """Wraps a policy and records the requests of every call."""

    def __init__(self, policy):
        self.policy, self.calls = policy, []

    def __call__(self, requests):
        self.calls.append([(r.episode, r.player) for r in requests])
        return self.policy(requests)


def scripted(moves):
    """Answers with moves[(episode, turn index of that player)] in a box."""
    seen = {}

    def policy(requests):
        out = []
        for r in requests:
            k = seen.get((r.episode, r.player), 0)
            seen[(r.episode, r.player)] = k + 1
            out.append(moves[r.episode][r.player][k])
        return out

    return policy


def test_random_games_of_every_kind():
    games = [make_game(name).reset(seed) for seed in range(3) for name in GAMES]
    seats = pair_seats(["random"] * len(games))
    turns, episodes = play_lockstep(games, seats, {"current": RandomPolicy(0), "random": RandomPolicy(1)})
    assert [ep.index for ep in episodes] == list(range(3 * len(GAMES))) and all(g.done for g in games)
    for ep in episodes:
        mine = [t for t in turns if t.episode == ep.index]
        assert len(mine) == ep.turns and all(t.status == "ok" and t.action for t in mine)
        assert [t.policy for t in mine] == [ep.seats[t.player] for t in mine]
        assert ep.rewards[0] == -ep.rewards[1] and ep.invalid_player is None and not ep.truncated
        assert ep.rewards == {0: (1.0, -1.0), 1: (-1.0, 1.0), None: (0.0, 0.0)}[ep.winner]


def test_self_play_moves_go_into_one_call_per_round():
    learner = Recorder(RandomPolicy(3))
    games = [TicTacToe().reset(s) for s in range(4)]
    turns, episodes = play_lockstep(games, [("current", "current")] * 4, {"current": learner})
    assert len(learner.calls) == max(ep.turns for ep in episodes)  # one call per round
    assert learner.calls[0] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    assert learner.calls[1] == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert sum(map(len, learner.calls)) == len(turns)


def test_opponents_batched_per_id_and_seats_alternate():
    seats = pair_seats(["a", "b", "a", "b"])
    assert seats == [("current", "a"), ("b", "current"), ("current", "a"), ("b", "current")]
    pols = {k: Recorder(RandomPolicy(i)) for i, k in enumerate(["current", "a", "b"])}
    games = [TicTacToe().reset(s) for s in range(4)]
    play_lockstep(games, seats, pols)
    # round 0: seat 0 moves everywhere; round 1: seat 1
    assert pols["current"].calls[:2] == [[(0, 0), (2, 0)], [(1, 1), (3, 1)]]
    assert pols["b"].calls[0] == [(1, 0), (3, 0)] and pols["a"].calls[0] == [(0, 1), (2, 1)]


@pytest.mark.parametrize(
    "rule,expected", [(RewardRule(), (0.5, -1.5)), (RewardRule(invalid=-1, invalid_opponent=1), (1, -1))]
)
def test_illegal_move_ends_the_game(rule, expected):
    game = KuhnPoker().reset(0)
    policy = scripted({0: {0: ["\\boxed{bet}"], 1: ["Thinking... \\boxed{raise}"]}})
    turns, (ep,) = play_lockstep([game], [("x", "x")], {"x": policy}, rule=rule)
    assert ep.rewards == expected and ep.invalid_player == 1 and ep.winner == 0 and ep.turns == 2
    assert ep.outcome(0) == "win" and ep.outcome(1) == "loss" and ep.payoffs == (0.0, 0.0)
    assert (turns[1].action, turns[1].raw, turns[1].status) == (None, "[raise]", "illegal")
    assert turns[0].action == "[bet]" and not game.done


def test_missing_move():
    policy = scripted({0: {0: [""]}})
    turns, (ep,) = play_lockstep([KuhnPoker().reset(0)], [("x", "x")], {"x": policy})
    assert turns[0].status == "missing" and ep.rewards == (-1.5, 0.5) and ep.turns == 1


def test_turn_limit_is_a_draw():
    turns, (ep,) = play_lockstep([TicTacToe().reset(0)], [("x", "x")], {"x": RandomPolicy(0)}, max_turns=3)
    assert ep.truncated and ep.winner is None and ep.rewards == (0.0, 0.0) and ep.turns == 3 == len(turns)
    assert ep.outcome(0) == ep.outcome(1) == "draw"


@pytest.mark.parametrize("use_payoffs,expected", [(False, (1.0, -1.0)), (True, (2.0, -2.0))])
def test_payoff_rewards(use_payoffs, expected):
    game = KuhnPoker().reset(0)
    game.cards = ("K", "Q")
    policy = scripted({0: {0: ["\\boxed{bet}"], 1: ["\\boxed{call}"]}})
    _, (ep,) = play_lockstep([game], [("x", "x")], {"x": policy}, rule=RewardRule(use_payoffs=use_payoffs))
    assert ep.rewards == expected and ep.payoffs == (2.0, -2.0)


def test_outputs_with_text_are_kept():
    class Out:
        def __init__(self, text):
            self.text, self.token_ids = text, [1, 2]

    policy = text_policy(lambda prompts: [Out("\\boxed{check}") for _ in prompts])
    game = KuhnPoker().reset(0)
    turns, (ep,) = play_lockstep([game], [("x", "x")], {"x": policy})
    assert [t.action for t in turns] == ["[check]", "[check]"] and turns[0].output.token_ids == [1, 2]
    assert turns[0].prompt.startswith("You are Player 0") and turns[1].prompt.startswith("You are Player 1")
    assert turns[0].legal_actions == turns[1].legal_actions == ("[check]", "[bet]")


def test_prompt_and_parse_options():
    seen = []

    def policy(requests):
        seen.extend(r.prompt for r in requests)
        return ["\\boxed{I check}"] * len(requests)

    turns, _ = play_lockstep(
        [KuhnPoker().reset(0)],
        [("x", "x")],
        {"x": policy},
        prompt=lambda g: f"P{g.current_player}",
        parse_options={"lenient": True},
    )
    assert seen == ["P0", "P1"] and all(t.action == "[check]" for t in turns)


def test_bad_input():
    g = TicTacToe().reset(0)
    with pytest.raises(ValueError, match="1 games but 2 seat pairs"):
        play_lockstep([g], [("x", "x")] * 2, {"x": RandomPolicy()})
    with pytest.raises(ValueError, match="unknown policy 'y'"):
        play_lockstep([g], [("x", "y")], {"x": RandomPolicy()})
    with pytest.raises(ValueError, match="returned 0 responses for 1 requests"):
        play_lockstep([g], [("x", "x")], {"x": lambda reqs: []})
    with pytest.raises(TypeError, match="must return str"):
        play_lockstep([g], [("x", "x")], {"x": lambda reqs: [3] * len(reqs)})
    done = TicTacToe().reset(0)
    for a in ["[0]", "[3]", "[1]", "[4]", "[2]"]:
        done.step(a)
    with pytest.raises(ValueError, match="already over"):
        play_lockstep([done], [("x", "x")], {"x": RandomPolicy()})


def test_random_policy_answers_legal_boxed_moves():
    req = MoveRequest(0, "kuhn_poker", 0, "p", ("[check]", "[bet]"))
    answers = set(RandomPolicy(0)([req] * 50))
    assert answers == {"\\boxed{check}", "\\boxed{bet}"}


def lowest_cell(requests):
    """TicTacToe's lowest free cell: X takes 0, 2, 4, 6 and wins on the 7th move (diagonal 2-4-6)."""
    return [f"\\boxed{{{r.legal_actions[0].strip('[]')}}}" for r in requests]


def capped(limit):
    game = TicTacToe().reset(0)
    game.max_turns = limit  # cut after `limit` moves: a draw by the turn limit
    return game


@pytest.mark.parametrize("retries,replays,winner1,turns1", [(0, 0, None, 2), (3, 1, 0, 7)])
def test_a_drawn_game_is_replayed_on_a_new_deal(retries, replays, winner1, turns1):
    games, seats, pols = [TicTacToe().reset(0), capped(2)], [("x", "x")] * 2, {"x": lowest_cell}
    turns, eps = play_lockstep(games, seats, pols)
    assert [e.winner for e in eps] == [0, None] and eps[1].truncated
    dealt = []
    redeal = lambda i: dealt.append(i) or TicTacToe().reset(1)  # noqa: E731
    turns, eps, n = replay_draws(turns, eps, redeal, retries, seats, pols)
    assert n == replays and dealt == [1] * replays
    assert [e.index for e in eps] == [0, 1] and eps[0].winner == 0 and eps[1].winner == winner1
    assert [sum(t.episode == i for t in turns) for i in (0, 1)] == [7, turns1] == [eps[0].turns, eps[1].turns]
    mine = [t.action for t in turns if t.episode == 1 and t.player == 0]
    assert mine == (["[0]"] if turns1 == 2 else ["[0]", "[2]", "[4]", "[6]"])  # the replay's own moves, in order


def test_draws_that_stay_draws_are_accepted_after_the_retries():
    games, seats = [capped(2), capped(2)], [("x", "y"), ("y", "x")]
    turns, eps = play_lockstep(games, seats, {"x": lowest_cell, "y": lowest_cell})
    turns, eps, n = replay_draws(turns, eps, lambda i: capped(2), 2, seats, {"x": lowest_cell, "y": lowest_cell})
    assert n == 4 and all(e.winner is None and e.rewards == (0.0, 0.0) for e in eps)
    assert len(turns) == 4 and [e.seats for e in eps] == seats  # seats (and opponents) kept
