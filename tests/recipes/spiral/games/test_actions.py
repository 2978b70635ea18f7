import time

import pytest

from serl.recipes.spiral.games.actions import (
    ILLEGAL,
    MISSING,
    OK,
    PARSERS,
    action_key,
    last_boxed,
    parse_action,
    parser_options,
)

KUHN = ["[check]", "[bet]"]
FACING = ["[fold]", "[call]"]
TTT = ["[0]", "[4]", "[8]"]
DICE = ["[Bid: 2 x 5]", "[Bid: 2 x 6]", "[Call]"]
TRADE = ["[Offer: 2 Wood -> 1 Gold]", "[Offer: 1 Wood -> 2 Gold]", "[Pass]"]


@pytest.mark.parametrize(
    "text,legal,action,raw,status",
    [
        # boxed, with brackets, case and LaTeX normalised
        ("I hold K, so I bet.\n\\boxed{bet}", KUHN, "[bet]", "[bet]", OK),
        ("\\boxed{Bet}", KUHN, "[bet]", "[Bet]", OK),
        ("\\boxed{[bet]}", KUHN, "[bet]", "[bet]", OK),
        ("\\boxed{ \\text{check} }", KUHN, "[check]", "[\\text{check}]", OK),
        ("\\boxed {call}", FACING, "[call]", "[call]", OK),
        ("\\boxed{4}", TTT, "[4]", "[4]", OK),
        ("\\boxed{bid: 2 x 6}", DICE, "[Bid: 2 x 6]", "[bid: 2 x 6]", OK),
        ("\\boxed{Bid 2x5}", DICE, "[Bid: 2 x 5]", "[Bid 2x5]", OK),
        ("\\boxed{offer: 1 wood -> 2 gold}", TRADE, "[Offer: 1 Wood -> 2 Gold]", "[offer: 1 wood -> 2 gold]", OK),
        # unboxed short answers
        ("bet", KUHN, "[bet]", "[bet]", OK),
        ("  [Call] \n", FACING, "[call]", "[Call]", OK),
        ("I choose to fold", FACING, None, "[I choose to fold]", ILLEGAL),
        ("After thinking about the cards for a while I would rather bet", KUHN, None, None, MISSING),
        # illegal
        ("\\boxed{raise}", KUHN, None, "[raise]", ILLEGAL),
        ("\\boxed{call}", KUHN, None, "[call]", ILLEGAL),
        ("\\boxed{5}", TTT, None, "[5]", ILLEGAL),
        ("\\boxed{2 x 5}", DICE, None, "[2 x 5]", ILLEGAL),
        ("\\boxed{Offer: 1 Gold -> 2 Wood}", TRADE, None, "[Offer: 1 Gold -> 2 Wood]", ILLEGAL),
        # several boxes: the last one counts, even when it is illegal or empty
        ("\\boxed{check} no, better: \\boxed{bet}", KUHN, "[bet]", "[bet]", OK),
        ("\\boxed{bet} or maybe \\boxed{raise}", KUHN, None, "[raise]", ILLEGAL),
        ("\\boxed{bet} \\boxed{}", KUHN, None, "[]", ILLEGAL),
        ("\\boxed{4} \\boxed{\\frac{1}{2}}", TTT, None, "[\\frac{1}{2}]", ILLEGAL),
        # empty and missing
        ("", KUHN, None, None, MISSING),
        ("   ", KUHN, None, None, MISSING),
        ("I think about it a lot and then the answer is \\boxed{bet", KUHN, None, None, MISSING),
    ],
)
def test_parse_action(text, legal, action, raw, status):
    parsed = parse_action(text, legal)
    assert (parsed.action, parsed.raw, parsed.status) == (action, raw, status)
    assert parsed.valid == (action is not None)


@pytest.mark.parametrize(
    "text,action",
    [
        ("\\boxed{I bet}", "[bet]"),
        ("\\boxed{cell 4}", None),  # TTT is not the legal list here: no match at all
        ("\\boxed{check or bet}", None),  # two legal actions inside: ambiguous
        ("\\boxed{bet}", "[bet]"),
    ],
)
def test_lenient(text, action):
    assert parse_action(text, KUHN, lenient=True).action == action
    if action == "[bet]" and text != "\\boxed{bet}":
        assert parse_action(text, KUHN).action is None  # strict by default


def test_lenient_cell():
    assert parse_action("\\boxed{cell 4}", TTT, lenient=True).action == "[4]"


def test_unboxed_word_limit():
    assert parse_action("call it", FACING, max_unboxed_words=1).status == MISSING
    assert parse_action("call", FACING, max_unboxed_words=1).action == "[call]"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("a \\boxed{x} b \\boxed{y{z}} c", "y{z}"),
        ("\\boxed x \\boxed{ok}", "ok"),
        ("\\boxed{ok} \\boxed x", "ok"),
        ("\\boxed{never closed", None),
        ("no box", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_action_key():
    assert action_key("[Offer: 2 Wood -> 1 Gold]") == ("offer", "2", "wood", "1", "gold")
    assert action_key("\\textbf{Bid} 2x5") == ("bid", "2", "x", "5")


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 500_000,
        "{" * 3_000_000 + "\\boxed{bet",
        "\\boxed{" + "{" * 3_000_000,
        "x" * 5_000_000,
    ],
)
def test_bounded_work_on_hostile_text(text):
    start = time.perf_counter()
    parsed = parse_action(text, KUHN)
    assert time.perf_counter() - start < 0.5
    assert parsed.action is None


@pytest.mark.parametrize(
    "text,parser,action",
    [
        ("I think I should check here, or maybe bet. Final: bet it is", "strict", None),
        ("I think I should check here, or maybe bet. Final: bet it is", "lenient", None),
        ("I think I should check here, or maybe bet. Final: bet it is", "mention", "[bet]"),
        ("bet? no, that would be silly with a jack in my hand. I will check", "mention", "[check]"),
        ("nothing useful at all", "mention", None),
        ("\\boxed{raise} but then I bet", "mention", None),  # a box decides, even an illegal one
        ("\\boxed{I bet}", "strict", None),
        ("\\boxed{I bet}", "lenient", "[bet]"),
    ],
)
def test_named_parsers(text, parser, action):
    assert parse_action(text, KUHN, **parser_options(parser)).action == action


def test_unknown_parser_lists_the_known_ones():
    assert PARSERS == ("strict", "lenient", "mention")
    with pytest.raises(ValueError, match="unknown action parser 'loose'; known: strict, lenient, mention"):
        parser_options("loose")
