import math

import pytest

from serl.recipes.spin.pairs import Pair, PairCounts, best_worst_pairs


@pytest.mark.parametrize(
    "group,expected",
    [
        ([1.0, 0.0], (0, 1)),  # n = 2 as upstream
        ([0.0, 1.0, 0.5, 0.25], (1, 0)),  # best 1.0 at 1, worst 0.0 at 0
        ([0.2, 1.0, 1.0, 0.0, 0.0], (1, 3)),  # duplicated best and worst: first of each
        ([-1.0, 2, -3.5], (1, 2)),  # ints and negatives
        ([0.0, None, 1.0], (2, 1)),  # a missing answer ranks below a wrong one
        ([1.0, 1.0, None], (0, 2)),  # equal scored rewards + a non-answer: not a tie
        ([None, 0.0], (1, 0)),
    ],
)
def test_best_against_worst(group, expected):
    pairs, counts = best_worst_pairs([group])
    assert [(p.chosen, p.rejected) for p in pairs] == [expected]
    assert counts.pairs == 1 and counts.dropped == 0
    p = pairs[0]
    assert p.chosen_reward == group[p.chosen] and p.rejected_reward == group[p.rejected]


@pytest.mark.parametrize(
    "group,field",
    [
        ([0.5, 0.5, 0.5, 0.5], "tied"),  # all-equal: dropped, not an arbitrary winner
        ([1.0, 1.0 + 1e-12], "tied"),  # equal within TIE_TOL
        ([None, None, None], "tied"),  # nobody answered
        ([0.7], "too_small"),
        ([], "too_small"),
    ],
)
def test_groups_that_give_no_pair(group, field):
    pairs, counts = best_worst_pairs([group])
    assert pairs == []
    assert getattr(counts, field) == 1 and counts.dropped == 1 and counts.groups == 1


def test_missing_skip_leaves_non_answers_out():
    rewards = [[0.0, None, 1.0], [1.0, 1.0, None], [None, 0.3], [None, None, 0.0, 1.0]]
    pairs, counts = best_worst_pairs(rewards, missing="skip")
    # group 0: 1.0 vs 0.0; group 1: only two equal scored -> tie; group 2: one scored left
    # -> too small; group 3: 1.0 at 3 vs 0.0 at 2
    assert pairs == [Pair(0, 2, 0, 1.0, 0.0), Pair(3, 3, 2, 1.0, 0.0)]
    # non-answers: 1 + 1 + 1 + 2 = 5
    assert (counts.tied, counts.too_small, counts.missing) == (1, 1, 5)
    # the default ranks them last instead: every group gives a pair
    pairs, counts = best_worst_pairs(rewards)
    assert [(p.group, p.chosen, p.rejected) for p in pairs] == [(0, 2, 1), (1, 0, 2), (2, 1, 0), (3, 3, 0)]
    assert counts.dropped == 0 and counts.missing == 5


def test_identical_texts_are_dropped():
    rewards = [[1.0, 0.0], [1.0, 0.0, 0.0]]
    texts = [["same", "same"], ["\\boxed{4}", "\\boxed{5}", "\\boxed{4}"]]
    pairs, counts = best_worst_pairs(rewards, texts)
    assert [(p.group, p.chosen, p.rejected) for p in pairs] == [(1, 0, 1)]
    assert counts.identical == 1 and counts.pairs == 1


def test_counts_over_a_batch_and_metrics():
    rewards = [[1.0, 0.0], [0.0, 0.0], [None, None], [1.0], [0.0, None], [1.0, 0.0, 1.0]]
    pairs, counts = best_worst_pairs(rewards)
    assert [p.group for p in pairs] == [0, 4, 5]
    assert counts == PairCounts(groups=6, pairs=3, tied=2, too_small=1, identical=0, missing=3)
    m = counts.as_metrics()
    assert m == {
        "pairs/groups": 6.0,
        "pairs/pairs": 3.0,
        "pairs/tied": 2.0,
        "pairs/too_small": 1.0,
        "pairs/identical": 0.0,
        "pairs/missing": 3.0,
        "pairs/dropped": 3.0,
        "pairs/tied_frac": pytest.approx(2 / 6),
    }
    assert PairCounts().as_metrics()["pairs/tied_frac"] == 0.0


@pytest.mark.parametrize(
    "rewards,kwargs,needle",
    [
        ([[1.0, math.nan]], {}, "group 0, response 1: reward must be finite, got nan"),
        ([[0.0], [1.0, math.inf]], {}, "group 1, response 1: reward must be finite, got inf"),
        ([[1.0, "1"]], {}, "group 0, response 1: reward must be a number or None, got str"),
        ([[True, 0.0]], {}, "group 0, response 0: reward must be a number or None, got bool"),
        ([[1.0, 0.0]], {"missing": "drop"}, "missing must be one of"),
        ([[1.0, 0.0]], {"texts": [["a"]]}, "same groups and group sizes"),
    ],
)
def test_bad_input(rewards, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        best_worst_pairs(rewards, **kwargs)
