import math

import pytest

from serl.recipes.spell.rewards import (
    Majority, cover_em, extract_final_answer, is_bad_ground, lenient_score, looks_like_math,
    normalize_answer, parse_judgment, questioner_reward, responder_reward, rule_score,
    verifier_majority, verifier_rewards, verifier_train_mask,
)


@pytest.mark.parametrize("text,expected", [
    ("The Varn River.", "varn river"),
    ("1,200 people", "1200 people"),
    ("3.5", "3.5"),
    ("An apple, a day!", "apple day"),
    ("U.S.A.", "usa"),
    ("  Mira   TOLVANE ", "mira tolvane"),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("pred,gold,expected", [
    ("It is Mira Tolvane.", "Mira Tolvane", 1.0),
    ("mira tolvane", "Mira Tolvane", 1.0),
    ("Tolvane, Mira", "Mira Tolvane", 0.0),       # order matters: a run of tokens
    ("12 people", "12", 1.0),
    ("120", "12", 0.0),                           # whole tokens, not characters
    ("44,250", "44250", 1.0),
    ("3.5", "35", 0.0),
    ("", "Varn", 0.0),
    ("Varn", "", 0.0),
    ("the", "the", 0.0),                          # both normalise to nothing
])
def test_cover_em(pred, gold, expected):
    assert cover_em(pred, gold) == expected


def test_cover_em_asks_equivalence_only_for_math_gold_after_text_fails():
    calls = []

    def eq(a, b):
        calls.append((a, b))
        return a == "0.5" and b == "1/2"

    assert cover_em("0.5", "1/2", eq) == 1.0
    assert cover_em("0.25", "1/2", eq) == 0.0
    assert cover_em("1/2", "1/2", eq) == 1.0      # text rule decides, no call
    assert cover_em("Mira", "Varn", eq) == 0.0    # gold is not math, no call
    assert calls == [("0.5", "1/2"), ("0.25", "1/2")]


@pytest.mark.parametrize("s,expected", [("12", True), ("-3.5", True), ("1,200", True), ("3/4", True),
                                         ("45%", True), ("\\frac{1}{2}", True), ("x^2", True),
                                         ("Varn", False), ("12 people", False), ("", False)])
def test_looks_like_math(s, expected):
    assert looks_like_math(s) is expected


@pytest.mark.parametrize("response,expected", [
    ("Tobin lives in Brelby. The answer is Mira Tolvane.", "Mira Tolvane"),
    ("the answer is: **1887**.", "1887"),
    ("The answer is 3. Wait, no. The answer is 4.", "4"),
    ("The correct answer is Varn", "Varn"),
    ("The answer is Varn\nand some more text", "Varn"),
    ("The answer is \\boxed{42}.", "42"),
    ("The answer is (insert answer here).", None),
    ("The answer is .", None),
    ("Mira Tolvane founded it.", None),
    ("<think>the answer is 5</think> So the answer is 6", "6"),
    ("<think>the answer is 5, still thinking", None),
])
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


@pytest.mark.parametrize("text,expected", [
    ("They match. [[YES]]", 1),
    ("Different towns. [[ no ]]", 0),
    ("[[Yes]]", 1),
    ("Either [[YES]] or [[NO]].", -1),            # both: ambiguous
    ("yes", -1),
    ("", -1),
    ("<think>[[NO]]</think> [[YES]]", 1),
    ("<think>[[YES]] forever", -1),
])
def test_parse_judgment(text, expected):
    assert parse_judgment(text) == expected


@pytest.mark.parametrize("judgments,label,share,n_valid", [
    ([1, 1, 0], 1, 2 / 3, 3),
    ([0, 0, 0, 1], 0, 0.75, 4),
    ([1, 1, -1], 1, 1.0, 2),                      # share over the parseable judgments
    ([1, 0], -1, 0.0, 2),                         # tie: no majority
    ([1, -1, -1, 1], -1, 0.0, 2),                 # tie with bad format: no majority
    ([-1, -1, 1], -1, 0.0, 1),                    # bad format is the most common
    ([], -1, 0.0, 0),
])
def test_verifier_majority(judgments, label, share, n_valid):
    m = verifier_majority(judgments)
    assert (m.label, m.n_valid, m.n) == (label, n_valid, len(judgments))
    assert m.share == pytest.approx(share)
    assert m.valid is (label >= 0)


def test_verifier_majority_rejects_other_values():
    with pytest.raises(ValueError, match="1, 0 or -1"):
        verifier_majority([1, 2])


YES, NO, NONE = Majority(1, 1.0, 3, 3), Majority(0, 1.0, 3, 3), Majority(-1, 0.0, 0, 3)


@pytest.mark.parametrize("rule,maj,expected", [
    (0.0, YES, 1.0), (1.0, NO, 1.0), (0.0, NO, 0.0), (1.0, YES, 1.0), (0.0, NONE, 0.0), (1.0, NONE, 1.0),
])
def test_responder_reward(rule, maj, expected):
    assert responder_reward(rule, maj) == expected


def test_verifier_rewards():
    js = [1, 0, -1, 1]
    assert verifier_rewards(js, verifier_majority(js)) == [1.0, 0.0, -1.0, 1.0]
    assert verifier_rewards([0, 0, 1], verifier_majority([0, 0, 1])) == [1.0, 1.0, 0.0]
    assert verifier_rewards([1, 0, -1], verifier_majority([1, 0, -1])) == [0.0, 0.0, -1.0]


@pytest.mark.parametrize("maj,rule,expected", [
    (Majority(1, 2 / 3, 3, 3), 1.0, True),
    (Majority(1, 2 / 3, 3, 3), 0.0, False),       # majority disagrees with the rule
    (Majority(0, 0.75, 4, 4), 0.0, True),
    (Majority(1, 1.0, 4, 4), 1.0, False),         # unanimous: above 0.99
    (Majority(1, 0.51, 100, 100), 1.0, True),     # bounds are inclusive
    (Majority(1, 0.99, 100, 100), 1.0, True),
    (Majority(1, 0.5, 4, 4), 1.0, False),
    (Majority(-1, 0.0, 0, 4), 0.0, False),
])
def test_verifier_train_mask(maj, rule, expected):
    assert verifier_train_mask(maj, rule) is expected


@pytest.mark.parametrize("score,expected", [(0.1, True), (0.099, False), (0.0, False), (1.0, True)])
def test_is_bad_ground(score, expected):
    assert is_bad_ground(score) is expected


@pytest.mark.parametrize("status,mean,expected", [
    ("bad_format", None, -1.0),
    ("bad_ground", 0.5, -0.5),
    ("ok", 0.0, 0.0),                             # all wrong
    ("ok", 1.0, 0.0),                             # all right
    ("ok", 0.5, 1.0),
    ("ok", 0.25, math.exp(-1.125)),               # (0.25)^2 / (2/36) = 1.125
    ("ok", 0.75, math.exp(-1.125)),
    ("ok", 1 / 3, math.exp(-0.5)),                # (1/6)^2 / (2/36) = 0.5
    ("ok", 0.125, math.exp(-2.53125)),            # (0.375)^2 * 18
])
def test_questioner_reward(status, mean, expected):
    assert questioner_reward(status, mean) == pytest.approx(expected, abs=1e-12)


def test_questioner_reward_values_by_hand():
    assert questioner_reward("ok", 0.25) == pytest.approx(0.32465246735834974)


@pytest.mark.parametrize("status,mean,msg", [("weird", 0.5, "unknown questioner status"),
                                             ("ok", None, "needs the responder's mean"),
                                             ("ok", 1.5, r"\[0, 1\]")])
def test_questioner_reward_errors(status, mean, msg):
    with pytest.raises(ValueError, match=msg):
        questioner_reward(status, mean)


@pytest.mark.parametrize("preds,golds,equal,want,asked", [
    (["Ann", None, "Bob"], ["ann", "Ann", "Ann"], None, [1.0, 0.0, 0.0], []),
    (["0.5", "1/2", "about 12"], ["1/2", "1/2", "12"], {("1/2", "0.5"): True}, [1.0, 1.0, 1.0], [("1/2", "0.5")]),
    (["3", "x"], ["4", "Paris"], {("4", "3"): False}, [0.0, 0.0], [("4", "3")]),  # only math golds are asked
    ([None, "  "], ["4", "4"], {}, [0.0, 0.0], []),                                 # nothing to compare
])
def test_cover_em_many_asks_the_checker_once_for_math(preds, golds, equal, want, asked):
    from serl.recipes.spell.rewards import cover_em_many

    calls = []

    def equal_many(pairs):
        calls.append(list(pairs))
        return [equal[p] for p in pairs]

    assert cover_em_many(preds, golds, equal_many if equal is not None else None) == want
    assert calls == ([asked] if asked else [])


def test_cover_em_many_lengths_must_match():
    from serl.recipes.spell.rewards import cover_em_many

    with pytest.raises(ValueError, match="2 predictions for 1 golds"):
        cover_em_many(["a", "b"], ["a"])
