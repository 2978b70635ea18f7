"""serl.recipes.spell.qa: normalisation, cover-EM, the answer phrase, strict and lenient scores."""

import pytest

from serl.recipes.spell.qa import (
    cover_em,
    cover_em_many,
    extract_final_answer,
    lenient_score,
    looks_like_math,
    normalize_answer,
    rule_score,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The Varn River.", "varn river"),
        ("1,200 people", "1200 people"),
        ("3.5", "3.5"),
        ("An apple, a day!", "apple day"),
        ("U.S.A.", "usa"),
        ("  Mira   TOLVANE ", "mira tolvane"),
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize(
    "pred,gold,expected",
    [
        ("It is Mira Tolvane.", "Mira Tolvane", 1.0),
        ("mira tolvane", "Mira Tolvane", 1.0),
        ("Tolvane, Mira", "Mira Tolvane", 0.0),  # order matters: a run of tokens
        ("12 people", "12", 1.0),
        ("120", "12", 0.0),  # whole tokens, not characters
        ("44,250", "44250", 1.0),
        ("3.5", "35", 0.0),
        ("", "Varn", 0.0),
        ("Varn", "", 0.0),
        ("the", "the", 0.0),  # both normalise to nothing
    ],
)
def test_cover_em(pred, gold, expected):
    assert cover_em(pred, gold) == expected


def test_cover_em_asks_equivalence_only_for_math_gold_after_text_fails():
    calls = []

    def eq(a, b):
        calls.append((a, b))
        return a == "0.5" and b == "1/2"

    assert cover_em("0.5", "1/2", eq) == 1.0
    assert cover_em("0.25", "1/2", eq) == 0.0
    assert cover_em("1/2", "1/2", eq) == 1.0  # text rule decides, no call
    assert cover_em("Mira", "Varn", eq) == 0.0  # gold is not math, no call
    assert calls == [("0.5", "1/2"), ("0.25", "1/2")]


@pytest.mark.parametrize(
    "s,expected",
    [
        ("12", True),
        ("-3.5", True),
        ("1,200", True),
        ("3/4", True),
        ("45%", True),
        ("\\frac{1}{2}", True),
        ("x^2", True),
        ("Varn", False),
        ("12 people", False),
        ("", False),
    ],
)
def test_looks_like_math(s, expected):
    assert looks_like_math(s) is expected


@pytest.mark.parametrize(
    "response,expected",
    [
        ("Tobin lives in Brelby. The answer is Mira Tolvane.", "Mira Tolvane"),
        ("the answer is: **1887**.", "1887"),
        ("The answer is 3. Wait, no. The answer is 4.", "4"),
        ("The correct answer is Varn", "Varn"),
        ("The answer is Varn\nand some more text", "Varn"),
        ("The answer is \\boxed{42}.", "42"),
        ("The answer is (insert answer here).", None),
        ("The answer is .", None),
        # empty forms are no answer, so no judge is asked about them (serl.rewards.normalize.is_empty)
        ("The answer is \\boxed{\\text{}}.", None),
        ("The answer is $$", None),
        ("The answer is \\boxed{.}", None),
        ("The answer is {}", None),
        ("The answer is \\{\\}", "\\{\\}"),  # the empty set is an answer
        ("Mira Tolvane founded it.", None),
        ("<think>the answer is 5</think> So the answer is 6", "6"),
        ("<think>the answer is 5, still thinking", None),
    ],
)
def test_extract_final_answer(response, expected):
    assert extract_final_answer(response) == expected


def test_extract_looks_only_at_the_tail():
    assert extract_final_answer("The answer is 7." + " filler" * 2000) is None
    assert extract_final_answer("x" * 1_000_000 + " The answer is 7.") == "7"


def test_rule_needs_the_phrase_lenient_does_not():
    r = "Mira Tolvane founded it."
    assert rule_score(r, "Mira Tolvane") == 0.0 and lenient_score(r, "Mira Tolvane") == 1.0
    r = "So the answer is Mira Tolvane."
    assert rule_score(r, "Mira Tolvane") == 1.0 and lenient_score(r, "Mira Tolvane") == 1.0
    assert rule_score("The answer is 0.5", "1/2", lambda a, b: True) == 1.0
    assert lenient_score("<think>never closed", "x") == 0.0


@pytest.mark.parametrize(
    "preds,golds,equal,want,asked",
    [
        (["Ann", None, "Bob"], ["ann", "Ann", "Ann"], None, [1.0, 0.0, 0.0], []),
        (["0.5", "1/2", "about 12"], ["1/2", "1/2", "12"], {("1/2", "0.5"): True}, [1.0, 1.0, 1.0], [("1/2", "0.5")]),
        (["3", "x"], ["4", "Paris"], {("4", "3"): False}, [0.0, 0.0], [("4", "3")]),  # only math golds are asked
        ([None, "  "], ["4", "4"], {}, [0.0, 0.0], []),  # nothing to compare
    ],
)
def test_cover_em_many_asks_the_checker_once_for_math(preds, golds, equal, want, asked):
    calls = []

    def equal_many(pairs):
        calls.append(list(pairs))
        return [equal[p] for p in pairs]

    assert cover_em_many(preds, golds, equal_many if equal is not None else None) == want
    assert calls == ([asked] if asked else [])


def test_cover_em_many_lengths_must_match():
    with pytest.raises(ValueError, match="2 predictions for 1 golds"):
        cover_em_many(["a", "b"], ["a"])
