import random

import pytest

from serl.recipes.spiral.games import (
    GAMES,
    KuhnPoker,
    LiarsDice,
    SimpleNegotiation,
    TicTacToe,
    check_game_names,
    make_game,
)
from serl.recipes.spiral.games.actions import action_key
from serl.recipes.spiral.games.kuhn import terminal_payoffs


def play(game, actions):
    for a in actions:
        assert game.step(a), f"{a} refused; legal: {game.legal_actions()}"
    return game


# --- registry ---------------------------------------------------------------------------------------
def test_registry_names():
    assert list(GAMES) == ["tictactoe", "kuhn_poker", "simple_negotiation", "liars_dice", "nim"]
    assert check_game_names("kuhn_poker, tictactoe") == ["kuhn_poker", "tictactoe"]


@pytest.mark.parametrize("bad", ["chess", "kuhn_poker,chess", "", " , "])
def test_unknown_game_lists_known_ones(bad):
    with pytest.raises(ValueError) as e:
        check_game_names(bad)
    assert "tictactoe, kuhn_poker, simple_negotiation, liars_dice, nim" in str(e.value)


def test_make_game_options():
    assert isinstance(make_game("tictactoe"), TicTacToe)
    assert make_game("kuhn_poker", kuhn_rules="spiral").rules == "spiral"
    assert make_game("liars_dice", dice_per_player=3).dice_per_player == 3
    with pytest.raises(ValueError, match="known games"):
        make_game("go")


# --- common protocol --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(GAMES))
def test_random_playouts_finish_zero_sum(name):
    for seed in range(40):
        game = make_game(name).reset(seed)
        rng = random.Random(seed)
        while not game.done:
            legal = game.legal_actions()
            keys = [action_key(a) for a in legal]
            assert len(set(keys)) == len(keys), "legal actions must stay distinct after normalisation"
            obs = game.observation(game.current_player)
            assert not game.step("[not a move]") and game.observation(game.current_player) == obs
            assert game.step(rng.choice(legal))
            assert game.turn <= game.max_turns
        p0, p1 = game.payoffs()
        assert p0 == -p1
        assert game.winner() in (0, 1, None)
        assert game.legal_actions() == [] and not game.step("[0]")


@pytest.mark.parametrize("name", list(GAMES))
def test_outcome_before_the_end_and_bad_player_refused(name):
    game = make_game(name).reset(0)
    with pytest.raises(RuntimeError, match="not over"):
        game.winner()
    with pytest.raises(ValueError, match="player must be 0 or 1"):
        game.observation(2)


def test_same_seed_same_game():
    a, b = LiarsDice().reset(7), LiarsDice().reset(7)
    assert a.dice == b.dice and a.observation(0) == b.observation(0)


# --- TicTacToe --------------------------------------------------------------------------------------
def test_tictactoe_row_win():
    g = play(TicTacToe().reset(0), ["[0]", "[3]", "[1]", "[4]", "[2]"])
    assert g.done and g.winner() == 0 and g.payoffs() == (1.0, -1.0) and g.turn == 5


def test_tictactoe_column_win_for_o():
    g = play(TicTacToe().reset(0), ["[0]", "[1]", "[3]", "[4]", "[8]", "[7]"])
    assert g.winner() == 1 and g.payoffs() == (-1.0, 1.0)


def test_tictactoe_draw():
    g = play(TicTacToe().reset(0), ["[0]", "[1]", "[2]", "[4]", "[3]", "[5]", "[7]", "[6]"])
    assert not g.done
    play(g, ["[8]"])
    assert g.done and g.winner() is None and g.payoffs() == (0.0, 0.0)


@pytest.mark.parametrize("move", ["[0]", "[9]", "4", "[-1]", ""])
def test_tictactoe_illegal(move):
    g = play(TicTacToe().reset(0), ["[0]"])
    assert not g.step(move) and g.turn == 1 and g.current_player == 1


def test_tictactoe_observation():
    g = play(TicTacToe().reset(0), ["[4]"])
    assert "0 | 1 | 2\n---------\n3 | X | 5" in g.observation(1)
    assert g.legal_actions() == ["[0]", "[1]", "[2]", "[3]", "[5]", "[6]", "[7]", "[8]"]


# --- Kuhn Poker -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cards,history,standard,spiral",
    [
        (("K", "J"), "cc", (1, -1), (1, -1)),
        (("K", "J"), "bk", (2, -2), (1, -1)),
        (("K", "J"), "bf", (1, -1), (1, -1)),
        (("K", "J"), "cbk", (2, -2), (1, -1)),
        (("K", "J"), "cbf", (-1, 1), (-1, 1)),
        (("J", "Q"), "cc", (-1, 1), (-1, 1)),
        (("J", "Q"), "bk", (-2, 2), (-1, 1)),
        (("J", "Q"), "bf", (1, -1), (1, -1)),
        (("Q", "K"), "cbk", (-2, 2), (-1, 1)),
        (("K", "Q"), "cbf", (-1, 1), (-1, 1)),
    ],
)
def test_kuhn_terminal_payoffs(cards, history, standard, spiral):
    assert terminal_payoffs(cards, history, "standard") == standard
    assert terminal_payoffs(cards, history, "spiral") == spiral
    words = {"c": "[check]", "b": "[bet]", "k": "[call]", "f": "[fold]"}
    for rules, expected in (("standard", standard), ("spiral", spiral)):
        g = KuhnPoker(rules).reset(0)
        g.cards = cards
        play(g, [words[c] for c in history])
        assert g.done and g.payoffs() == expected and g.winner() == (0 if expected[0] > 0 else 1)


@pytest.mark.parametrize("history", ["", "c", "b", "cb", "x"])
def test_kuhn_non_terminal(history):
    assert terminal_payoffs(("K", "J"), history) is None


def test_kuhn_legal_actions_and_pot():
    g = KuhnPoker().reset(3)
    assert g.legal_actions() == ["[check]", "[bet]"] and not g.step("[call]")
    play(g, ["[check]"])
    assert g.current_player == 1 and g.legal_actions() == ["[check]", "[bet]"]
    play(g, ["[bet]"])
    assert g.current_player == 0 and g.legal_actions() == ["[fold]", "[call]"]
    assert g.contributions() == (1, 2) and "Pot: 3 chips" in g.observation(0)
    assert "Player 0 checks; Player 1 bets" in g.observation(0)
    s = play(KuhnPoker("spiral").reset(3), ["[bet]"])
    assert s.contributions() == (1, 1) and "Pot: 2 chips" in s.observation(1)


def test_kuhn_private_cards():
    g = KuhnPoker().reset(0)
    g.cards = ("K", "J")
    assert "Your card: K" in g.observation(0) and "Your card: J" not in g.observation(0)
    assert "Your card: J" in g.observation(1)


def test_kuhn_deals_are_uniform():
    deals = [KuhnPoker().reset(s).cards for s in range(600)]
    assert all(a != b for a, b in deals)
    counts = {d: deals.count(d) for d in set(deals)}
    assert len(counts) == 6 and all(70 <= c <= 130 for c in counts.values())


def test_kuhn_at_info_state():
    g = KuhnPoker.at_info_state("Q", "cb")
    assert g.current_player == 0 and g.info_state() == ("Q", "cb") and g.legal_actions() == ["[fold]", "[call]"]
    g = KuhnPoker.at_info_state("J", "c", opponent_card="K")
    assert g.current_player == 1 and g.cards == ("K", "J")
    for bad in [("A", ""), ("Q", "bb"), ("Q", "k")]:
        with pytest.raises(ValueError, match="no info state"):
            KuhnPoker.at_info_state(*bad)
    with pytest.raises(ValueError, match="impossible"):
        KuhnPoker.at_info_state("Q", "", opponent_card="Q")
    with pytest.raises(ValueError, match="rules must be one of standard, spiral"):
        KuhnPoker("poker")


# --- Simple Negotiation -----------------------------------------------------------------------------
def negotiation():
    g = SimpleNegotiation().reset(0)
    g.values = ((5, 15), (15, 5))  # player 0 prefers Gold, player 1 Wood
    return g


def test_negotiation_trade_decides_the_winner():
    g = play(negotiation(), ["[Offer: 2 Wood -> 1 Gold]"])
    assert g.legal_actions() == ["[Accept]", "[Deny]"]
    assert "Pending offer to you: you receive 2 Wood and give 1 Gold." in g.observation(1)
    play(g, ["[Accept]"])
    assert g.inventory == [[3, 6], [7, 4]] and g.worth(0) == 105 and g.worth(1) == 125
    play(g, ["[Pass]", "[Pass]", "[Pass]"])
    assert not g.done
    play(g, ["[Pass]"])  # 6th move: gains +5 and +25
    assert g.done and g.winner() == 1 and g.payoffs() == (-1.0, 1.0)


def test_negotiation_no_trade_is_a_draw_and_deny_keeps_stock():
    g = play(negotiation(), ["[Offer: 1 Gold -> 2 Wood]", "[Deny]", "[Pass]", "[Pass]", "[Pass]", "[Pass]"])
    assert g.done and g.winner() is None and g.inventory == [[5, 5], [5, 5]]


def test_negotiation_legal_actions():
    g = negotiation()
    legal = g.legal_actions()
    assert len(legal) == 2 * 2 * 2 + 1 and legal[-1] == "[Pass]"
    assert "[Offer: 1 Wood -> 2 Gold]" in legal and "[Offer: 2 Gold -> 1 Wood]" in legal
    for bad in ("[Accept]", "[Deny]", "[Offer: 3 Wood -> 1 Gold]"):
        assert not g.step(bad)
    small = SimpleNegotiation(start=1).reset(0)
    assert small.legal_actions() == ["[Offer: 1 Wood -> 1 Gold]", "[Offer: 1 Gold -> 1 Wood]", "[Pass]"]


def test_negotiation_valuations_opposite_and_drawn():
    seen = set()
    for seed in range(20):
        g = SimpleNegotiation().reset(seed)
        assert g.values[1] == tuple(reversed(g.values[0]))
        seen.add(g.values[0])
    assert seen == {(5, 15), (15, 5)}


def test_negotiation_bad_options():
    with pytest.raises(ValueError, match="simple_negotiation"):
        SimpleNegotiation(num_turns=0)


# --- Liar's Dice ------------------------------------------------------------------------------------
def test_liars_dice_rounds_and_game_end():
    g = LiarsDice().reset(0)
    g.dice = [[2, 5], [5, 5]]
    assert len(g.legal_actions()) == 4 * 6 and "[Call]" not in g.legal_actions()
    play(g, ["[Bid: 2 x 5]"])
    legal = g.legal_actions()
    assert legal[0] == "[Bid: 2 x 6]" and legal[-1] == "[Call]" and len(legal) == 1 + 6 + 6 + 1
    assert not g.step("[Bid: 2 x 4]") and not g.step("[Bid: 2 x 5]") and not g.step("[Bid: 5 x 1]")
    play(g, ["[Bid: 3 x 5]", "[Call]"])  # three fives: the bid holds, the caller (0) loses a die
    assert not g.done and g.counts == [1, 2] and g.current_player == 0 and g.bid is None
    assert "(3 showing 5); Player 0 lost a die" in g.observation(1)
    g.dice = [[1], [3, 4]]
    play(g, ["[Bid: 1 x 6]", "[Call]"])  # no six: the bidder (0) loses its last die
    assert g.done and g.winner() == 1 and g.payoffs() == (-1.0, 1.0) and g.counts == [0, 2]


def test_liars_dice_observation_hides_opponent_dice():
    g = LiarsDice().reset(0)
    g.dice = [[2, 5], [1, 1]]
    assert "Your dice: 2, 5" in g.observation(0) and "1, 1" not in g.observation(0)
    assert "Dice left: you 2, opponent 2" in g.observation(1)
    with pytest.raises(ValueError, match="dice_per_player"):
        LiarsDice(dice_per_player=0)
