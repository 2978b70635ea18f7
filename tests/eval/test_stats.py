import math

import pytest

from serl.eval.stats import mcnemar_p, paired_bootstrap, paired_ratio_bootstrap, wilson


# Worked by hand with z = 1.96, z^2 = 3.8416:
#  5/10: centre (0.5 + 0.19208) / 1.38416, half-width 1.96 * sqrt(0.025 + 0.009604) / 1.38416
#  0/10: centre = half-width = 0.19208 -> [0, 0.38416 / 1.38416]
# 10/10: mirror image of 0/10
@pytest.mark.parametrize("k,n,lo,hi", [(5, 10, 0.236590, 0.763410), (0, 10, 0.0, 0.277540), (10, 10, 0.722460, 1.0)])
def test_wilson_by_hand(k, n, lo, hi):
    got = wilson(k, n)
    assert got == pytest.approx((lo, hi), abs=1e-6)


def test_wilson_empty_is_nan():
    assert all(math.isnan(x) for x in wilson(0, 0))


# Discordant pairs up/down; exact two-sided p = 2 * P(Binomial(up+down, 1/2) <= min), capped at 1:
#  3/0: 2 * 1/8;  5/1: 2 * (1 + 6)/64;  2/2: 2 * 11/16 -> 1;  none: 1
@pytest.mark.parametrize(
    "a,b,p",
    [
        ([0, 0, 0, 1], [1, 1, 1, 1], 0.25),
        ([0, 0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 1, 0, 1], 14 / 64),
        ([0, 0, 1, 1], [1, 1, 0, 0], 1.0),
        ([1, 0, 1], [1, 0, 1], 1.0),
    ],
)
def test_mcnemar_by_hand(a, b, p):
    assert mcnemar_p(a, b) == pytest.approx(p)


def test_bootstrap_constant_difference_has_no_width():
    assert paired_bootstrap([0, 0, 1, 0], [1, 1, 2, 1]) == (1.0, 1.0, 1.0)


def test_bootstrap_two_opposite_pairs():
    # d = [+1, -1]: resampled means are -1, 0, +1 with probabilities 1/4, 1/2, 1/4, so the
    # 2.5% and 97.5% points of 10,000 draws are -1 and +1; the observed mean is 0
    assert paired_bootstrap([0, 1], [1, 0]) == (0.0, -1.0, 1.0)


def test_bootstrap_is_paired_and_seeded():
    a = [0, 1, 0, 1, 1, 0, 0, 1, 0, 0] * 5
    b = [1, 1, 0, 1, 1, 1, 0, 1, 0, 1] * 5
    mean, lo, hi = paired_bootstrap(a, b)
    assert mean == pytest.approx(0.3) and lo <= mean <= hi
    assert paired_bootstrap(a, b) == (mean, lo, hi)  # same seed, same interval
    # pairing matters: a never beats b, so no resample can have a negative mean
    assert lo >= 0


@pytest.mark.parametrize("fn", [paired_bootstrap, mcnemar_p])
def test_unpaired_lengths_refused(fn):
    with pytest.raises(ValueError, match="paired"):
        fn([0, 1], [1])


def test_ratio_bootstrap_point_by_hand():
    # a: finished 4 of 5, right 2 of those (0.5); b: finished 5, right 4 (0.8): +0.3
    fin_a, ok_a = [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]
    fin_b, ok_b = [1, 1, 1, 1, 1], [1, 1, 1, 1, 0]
    d, lo, hi = paired_ratio_bootstrap(ok_a, fin_a, ok_b, fin_b, reps=2000)
    assert d == pytest.approx(0.3)
    assert lo <= d <= hi and lo < hi


def test_ratio_bootstrap_same_model_has_no_width():
    fin, ok = [1, 0, 1, 1, 0, 1], [1, 0, 0, 1, 0, 1]
    assert paired_ratio_bootstrap(ok, fin, ok, fin, reps=500) == (0.0, 0.0, 0.0)


def test_ratio_bootstrap_refuses_empty_denominator():
    with pytest.raises(ValueError, match="empty denominator"):
        paired_ratio_bootstrap([0, 0], [0, 0], [1, 0], [1, 1])
