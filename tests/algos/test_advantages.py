"""Advantage estimators against numbers worked out by hand.

The shared batch: four sequences, two prompt groups (group 1 has a single member),
one row with a masked hole in the middle and rows with right padding.
"""

import math

import pytest
import torch

from serl.algos import ADVANTAGE_ESTIMATORS, canonical_estimator, compute_advantages, masked_whiten

REWARDS = torch.tensor([1.0, 0.0, 1.0, 0.5])
GROUPS = torch.tensor([0, 0, 0, 1])
MASK = torch.tensor(
    [
        [1, 1, 0],
        [1, 0, 1],  # hole in the middle
        [1, 0, 0],
        [1, 1, 0],
    ]
)
S3 = 1 / math.sqrt(3)  # group 0: mean 2/3, unbiased std sqrt(1/3) = 0.57735

# Expected [B, T] by hand. Group 1 (one member) is always zero.
EXPECTED = {
    # (r - mean)/std: 1/3/0.57735 = 0.57735, -2/3/0.57735 = -1.1547
    "group_norm": [[S3, S3, 0], [-2 * S3, 0, -2 * S3], [S3, 0, 0], [0, 0, 0]],
    # r - mean: 1/3, -2/3
    "dr_grpo": [[1 / 3, 1 / 3, 0], [-2 / 3, 0, -2 / 3], [1 / 3, 0, 0], [0, 0, 0]],
    # leave-one-out: 1 - (0+1)/2 = 0.5, 0 - (1+1)/2 = -1; not whitened by default
    "rloo": [[0.5, 0.5, 0], [-1, 0, -1], [0.5, 0, 0], [0, 0, 0]],
    # centred scores on tokens [1/3,1/3,-2/3,-2/3,1/3] (group 1 left out): mean -1/15,
    # deviations 0.4 (x3) and -0.6 (x2), var 0.24, std 0.489898 -> 0.816497, -1.224745
    "reinforce_baseline": [[0.816497, 0.816497, 0], [-1.224745, 0, -1.224745], [0.816497, 0, 0], [0, 0, 0]],
    # no groups: tokens [1,1,0,0,1,.5,.5], mean 4/7, var 0.5-16/49, std 0.416497
    # -> 1: 1.028992, 0: -1.371989, 0.5: -0.171499
    "reinforce": [[1.028992, 1.028992, 0], [-1.371989, 0, -1.371989], [1.028992, 0, 0], [-0.171499, -0.171499, 0]],
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_estimator_by_hand(name):
    adv = compute_advantages(name, REWARDS, GROUPS, MASK)
    assert torch.allclose(adv, torch.tensor(EXPECTED[name]), atol=1e-5), adv


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_masked_tokens_are_zero_and_finite(name):
    adv = compute_advantages(name, REWARDS, GROUPS, MASK)
    assert torch.isfinite(adv).all()
    assert (adv[MASK == 0] == 0).all()


@pytest.mark.parametrize("name", ["group_norm", "dr_grpo", "rloo", "reinforce_baseline"])
@pytest.mark.parametrize("whiten", [None, True, False])
def test_degenerate_groups_give_zero(name, whiten):
    # group 0 all equal, group 1 has one member; the KL term must not leak in either
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([5, 5, 5, 9])
    mask = torch.ones(4, 3)
    kl = torch.full((4, 3), 0.3)
    coef = 0.1 if ADVANTAGE_ESTIMATORS[canonical_estimator(name)].token_return else 0.0
    adv = compute_advantages(name, rewards, groups, mask, kl=kl, kl_coef=coef, whiten=whiten)
    assert torch.equal(adv, torch.zeros(4, 3))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_uneven_groups(name):
    # groups of 3 and 2; both informative. dr_grpo by hand: [1/3,-2/3,1/3,0.5,-0.5]
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 1, 1])
    mask = torch.ones(5, 1)
    adv = compute_advantages(name, rewards, groups, mask, whiten=False)[:, 0]
    expected = {
        "dr_grpo": [1 / 3, -2 / 3, 1 / 3, 0.5, -0.5],
        "reinforce_baseline": [1 / 3, -2 / 3, 1 / 3, 0.5, -0.5],
        "group_norm": [S3, -2 * S3, S3, 0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)],
        "rloo": [0.5, -1.0, 0.5, 1.0, -1.0],
        "reinforce": [1.0, 0.0, 1.0, 1.0, 0.0],
    }[name]
    assert torch.allclose(adv, torch.tensor(expected), atol=1e-5)


def test_reinforce_token_return_with_kl_and_gamma():
    # R = -β·kl + r at the last token; β=0.5, γ=0.5, r=1
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.1, 9.0, 0.3], [0.1, 0.2, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 1], [1, 1, 0]])
    adv = compute_advantages(
        "reinforce", torch.ones(3), torch.arange(3), mask, kl=kl, kl_coef=0.5, gamma=0.5, whiten=False
    )
    expected = torch.tensor(
        [
            # R=[-.05,-.1,.85]: G2=.85, G1=-.1+.425=.325, G0=-.05+.1625=.1125
            [0.1125, 0.325, 0.85],
            # hole carries no reward but counts as a step: G1=.425, G0=-.05+.2125
            [0.1625, 0.0, 0.85],
            # padding at the end: R=[-.05,.9,0]: G1=.9, G0=-.05+.45
            [0.4, 0.9, 0.0],
        ]
    )
    assert torch.allclose(adv, expected, atol=1e-6), adv


def test_reinforce_baseline_kl_on_informative_group():
    # group [1, 0], one token each: scores ±0.5, minus β·kl = 0.1·1.0
    adv = compute_advantages(
        "reinforce_baseline",
        torch.tensor([1.0, 0.0]),
        torch.tensor([0, 0]),
        torch.ones(2, 1),
        kl=torch.ones(2, 1),
        kl_coef=0.1,
        whiten=False,
    )
    assert torch.allclose(adv[:, 0], torch.tensor([0.4, -0.6]))


@pytest.mark.parametrize(
    "alias,name",
    [
        ("reinforce++", "reinforce"),
        ("reinforce_plus_plus", "reinforce"),
        ("REINFORCE++", "reinforce"),
        ("reinforce++_baseline", "reinforce_baseline"),
        ("reinforce_plus_plus_baseline", "reinforce_baseline"),
        ("grpo", "group_norm"),
        ("group_norm", "group_norm"),
        ("dr_grpo", "dr_grpo"),
        ("dr-grpo", "dr_grpo"),
        ("rloo", "rloo"),
    ],
)
def test_aliases(alias, name):
    assert canonical_estimator(alias) == name


def test_unknown_estimator_names_known_ones():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*grpo"):
        compute_advantages("ppo", REWARDS, GROUPS, MASK)


def test_rloo_whiten_flag():
    plain = compute_advantages("rloo", REWARDS, GROUPS, MASK)
    white = compute_advantages("rloo", REWARDS, GROUPS, MASK, whiten=True)
    keep = MASK.clone()
    keep[3] = 0  # the group of one stays out of the statistics
    assert torch.allclose(white, masked_whiten(plain, keep, 1e-6))
    assert not torch.allclose(white, plain)


def test_all_equal_batch_whitened_is_zero_not_nan():
    adv = compute_advantages("reinforce", torch.ones(3), torch.arange(3), torch.ones(3, 2))
    assert torch.equal(adv, torch.zeros(3, 2))


def test_row_without_response_tokens():
    mask = torch.tensor([[0, 0], [1, 1]])
    adv = compute_advantages("reinforce", torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), mask, whiten=False)
    assert torch.equal(adv, torch.zeros(2, 2))


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(rewards=torch.ones(2, 1)), "rewards must be 1-D"),
        (dict(group_ids=torch.zeros(4)), "group_ids must be an integer"),
        (dict(mask=torch.ones(3, 2)), "mask must be"),
        (dict(rewards=torch.tensor([1.0, float("nan"), 0.0, 0.0])), "NaN"),
    ],
)
def test_bad_input(bad, match):
    args = dict(rewards=REWARDS, group_ids=GROUPS, mask=MASK)
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        compute_advantages("grpo", **args)


def test_group_norm_rejects_kl_in_reward():
    with pytest.raises(ValueError, match="use_kl_loss"):
        compute_advantages("grpo", REWARDS, GROUPS, MASK, kl=torch.ones(4, 3), kl_coef=0.1)


def test_reinforce_baseline_leaves_all_equal_groups_out_of_whitening():
    # docs/algorithms.md: rewards [1,1,1,0], groups [0,0,1,1]. Centred: [0, 0, 0.5, -0.5].
    # serl whitens over group 1 only: mean 0, std 0.5 -> [0, 0, 1, -1]. OpenRLHF 0.11.2 keeps
    # group 0 in the statistics: mean 0, std sqrt(0.5/4) = 0.353553 -> [0, 0, 1.414214, -1.414214].
    adv = compute_advantages(
        "reinforce_baseline", torch.tensor([1.0, 1.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]), torch.ones(4, 1)
    )
    assert adv[:, 0].tolist() == pytest.approx([0.0, 0.0, 1.0, -1.0], abs=1e-5)
