"""serl.recipes.spell.judge: verdict parsing, the majority of k, and the rewards built on it."""

import math

import pytest

from serl.recipes.spell.judge import (
    Majority,
    label_rewards,
    parse_judgment,
    responder_reward,
    verdict_metrics,
    verifier_majority,
    verifier_rewards,
    verifier_train_mask,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("They match. [[YES]]", 1),
        ("Different towns. [[ no ]]", 0),
        ("[[Yes]]", 1),
        ("Either [[YES]] or [[NO]].", -1),  # both: ambiguous
        ("yes", -1),
        ("", -1),
        ("<think>[[NO]]</think> [[YES]]", 1),
        ("<think>[[YES]] forever", -1),
    ],
)
def test_parse_judgment(text, expected):
    assert parse_judgment(text) == expected


@pytest.mark.parametrize(
    "judgments,label,share,n_valid",
    [
        ([1, 1, 0], 1, 2 / 3, 3),
        ([0, 0, 0, 1], 0, 0.75, 4),
        ([1, 1, -1], 1, 1.0, 2),  # share over the parseable judgments
        ([1, 0], -1, 0.0, 2),  # tie: no majority
        ([1, -1, -1, 1], -1, 0.0, 2),  # tie with bad format: no majority
        ([-1, -1, 1], -1, 0.0, 1),  # bad format is the most common
        ([], -1, 0.0, 0),
    ],
)
def test_verifier_majority(judgments, label, share, n_valid):
    m = verifier_majority(judgments)
    assert (m.label, m.n_valid, m.n) == (label, n_valid, len(judgments))
    assert m.share == pytest.approx(share)
    assert m.valid is (label >= 0)


def test_verifier_majority_rejects_other_values():
    with pytest.raises(ValueError, match="1, 0 or -1"):
        verifier_majority([1, 2])


YES, NO, NONE = Majority(1, 1.0, 3, 3), Majority(0, 1.0, 3, 3), Majority(-1, 0.0, 0, 3)


@pytest.mark.parametrize(
    "rule,maj,expected",
    [
        (0.0, YES, 1.0),
        (1.0, NO, 1.0),
        (0.0, NO, 0.0),
        (1.0, YES, 1.0),
        (0.0, NONE, 0.0),
        (1.0, NONE, 1.0),
    ],
)
def test_responder_reward(rule, maj, expected):
    assert responder_reward(rule, maj) == expected


def test_verifier_rewards():
    js = [1, 0, -1, 1]
    assert verifier_rewards(js, verifier_majority(js)) == [1.0, 0.0, -1.0, 1.0]
    assert verifier_rewards([0, 0, 1], verifier_majority([0, 0, 1])) == [1.0, 1.0, 0.0]
    assert verifier_rewards([1, 0, -1], verifier_majority([1, 0, -1])) == [0.0, 0.0, -1.0]


@pytest.mark.parametrize(
    "maj,rule,expected",
    [
        (Majority(1, 2 / 3, 3, 3), 1.0, True),
        (Majority(1, 2 / 3, 3, 3), 0.0, False),  # majority disagrees with the rule
        (Majority(0, 0.75, 4, 4), 0.0, True),
        (Majority(1, 1.0, 4, 4), 1.0, False),  # unanimous: above 0.99
        (Majority(1, 0.51, 100, 100), 1.0, True),  # bounds are inclusive
        (Majority(1, 0.99, 100, 100), 1.0, True),
        (Majority(1, 0.5, 4, 4), 1.0, False),
        (Majority(-1, 0.0, 0, 4), 0.0, False),
    ],
)
def test_verifier_train_mask(maj, rule, expected):
    assert verifier_train_mask(maj, rule) is expected


def test_empty_or_garbled_verdicts_never_win_the_majority():
    """Generated panels of k judgments, some empty or garbled, against a brute-force count:
    YES or NO wins only with strictly more votes than each other outcome, bad format
    included, and a judgment that does not parse never earns more than -1."""
    import random

    texts = {
        1: ["[[YES]]", "ok [[ yes ]]"],
        0: ["[[NO]]", "no. [[No]]"],
        -1: ["", " ", "[[]]", "[[ ]]", "\\boxed{\\text{}}", "[[YES]] or [[NO]]", "<think>[[YES]]"],
    }
    rng = random.Random(0)
    for _ in range(2000):
        k = rng.randint(1, 8)
        truth = [rng.choice([1, 0, -1, -1]) for _ in range(k)]
        judged = [parse_judgment(rng.choice(texts[t])) for t in truth]
        assert judged == truth
        m = verifier_majority(judged)
        counts = {v: truth.count(v) for v in (1, 0, -1)}
        want = next((v for v in (1, 0) if all(counts[v] > counts[u] for u in (1, 0, -1) if u != v)), -1)
        assert m.label == want
        assert all(r == -1.0 for r, t in zip(verifier_rewards(judged, m), truth) if t == -1)


def test_verdict_metrics_by_hand():
    """The warm-up's metrics. Two items (right, wrong), 4 verdicts each: right gets YES, YES, NO, bad;
    wrong gets YES, NO, NO, NO. Agreeing: 2 + 3 = 5 of 8; bad format 1 of 8; YES share 2/3 on right,
    1/4 on wrong; rewards [1, 1, 0, -1] + [0, 1, 1, 1]: mean 4/8."""
    m = verdict_metrics([1.0, 0.0], [[1, 1, 0, -1], [1, 0, 0, 0]])
    assert m == {
        "accuracy": 5 / 8,
        "bad_format": 1 / 8,
        "yes_if_right": pytest.approx(2 / 3),
        "yes_if_wrong": 1 / 4,
        "reward_mean": 0.5,
    }
    assert label_rewards([1, 0, -1], 1.0) == [1.0, 0.0, -1.0] and label_rewards([1, 0, -1], 0.0) == [0.0, 1.0, -1.0]
    assert math.isnan(verdict_metrics([1.0], [[-1]])["yes_if_right"])  # no valid verdict: nothing to measure
