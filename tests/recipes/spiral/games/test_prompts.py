import pytest

from serl.recipes.spiral.games import GAMES, KuhnPoker, make_game
from serl.recipes.spiral.games.actions import parse_action
from serl.recipes.spiral.games.prompts import render_prompt, strip_brackets


def test_kuhn_prompt_layout():
    g = KuhnPoker.at_info_state("K", "")
    text = render_prompt(g)
    obs, legal, instruction = text.split("\n\n")[-3:]
    assert obs.startswith("Your card: K")
    assert legal == "Legal actions: [check], [bet]"
    assert instruction.endswith("inside \\boxed{}, for example \\boxed{bet}.")
    assert text.startswith("You are Player 0 in one hand of Kuhn Poker.")


def test_prompt_options():
    g = KuhnPoker.at_info_state("J", "b")
    assert "You are Player 1" in render_prompt(g)
    plain = render_prompt(g, example=False, show_legal_actions=False)
    assert "Legal actions" not in plain and "for example" not in plain and plain.endswith("\\boxed{}.")
    assert render_prompt(g, player=0).startswith("You are Player 0")


@pytest.mark.parametrize("name", list(GAMES))
def test_example_in_prompt_parses_to_a_legal_move(name):
    g = make_game(name).reset(0)
    text = render_prompt(g)
    example = text[text.rindex("\\boxed{") : -1]
    assert parse_action(example, g.legal_actions()).action == g.legal_actions()[-1]


def test_strip_brackets():
    assert strip_brackets("[Bid: 2 x 5]") == "Bid: 2 x 5" and strip_brackets("bet") == "bet"
