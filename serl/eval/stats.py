"""Small-sample statistics for comparing models on the same problems.

- ``wilson``: the Wilson score interval of a proportion (Wilson, 1927), which keeps
  sensible bounds at 0/n and n/n where the normal approximation does not.
- ``paired_bootstrap``: the mean per-problem difference between two models with a
  percentile interval from resampling problems, both models' outcomes together
  (Efron & Tibshirani, 1993, ch. 13), so the interval uses the pairing.
- ``mcnemar_p``: McNemar's exact test (binomial on the discordant pairs) for two
  models' 0/1 outcomes on the same problems.
- ``paired_diff_ci``: the interval of a change in a 0/1 score on the same problems
  (Newcombe, 1998, "Improved confidence intervals for the difference between binomial
  proportions based on paired data", method 10): the two Wilson intervals combined with
  the pairs' correlation. Unlike the bootstrap it stays sound with a handful of
  discordant problems, which is the usual case for a small held-out set.
"""

from __future__ import annotations

import math
import random


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes out of ``n`` (z = 1.96: 95%); NaNs for n = 0."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    mid, half = (p + z * z / (2 * n)), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return ((mid - half) / (1 + z * z / n), (mid + half) / (1 + z * z / n))


def paired_bootstrap(a: list[float], b: list[float], reps: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``b - a`` with a 95% percentile interval over problems resampled in pairs."""
    if len(a) != len(b) or not a:
        raise ValueError(f"paired_bootstrap needs two equally long non-empty lists, got {len(a)} and {len(b)}")
    d = [y - x for x, y in zip(a, b)]
    rng, n = random.Random(seed), len(d)
    means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    return sum(d) / n, means[int(0.025 * reps)], means[int(0.975 * reps) - 1]


def mcnemar_p(a: list[int], b: list[int]) -> float:
    """Exact two-sided McNemar test on paired 0/1 outcomes (1.0 when no pair disagrees)."""
    if len(a) != len(b):
        raise ValueError(f"mcnemar_p needs paired outcomes, got {len(a)} and {len(b)}")
    up, down = sum(1 for x, y in zip(a, b) if y > x), sum(1 for x, y in zip(a, b) if x > y)
    n = up + down
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(up, down) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_diff_ci(before: list[int], after: list[int], z: float = 1.96) -> tuple[float, float, float]:
    """Change ``mean(after) - mean(before)`` of paired 0/1 outcomes with its Newcombe
    (method 10) interval (z = 1.96: 95%)."""
    if len(before) != len(after) or not before:
        raise ValueError(f"paired_diff_ci needs two equally long non-empty lists, got {len(before)} and {len(after)}")
    if any(x not in (0, 1) for x in (*before, *after)):
        raise ValueError("paired_diff_ci needs 0/1 outcomes")
    n = len(before)
    both = sum(1 for x, y in zip(before, after) if x and y)
    only_after = sum(1 for x, y in zip(before, after) if y and not x)
    only_before = sum(1 for x, y in zip(before, after) if x and not y)
    neither = n - both - only_after - only_before
    k1, k0 = both + only_after, both + only_before  # successes after, before
    p1, p0 = k1 / n, k0 / n
    l1, u1 = wilson(k1, n, z)
    l0, u0 = wilson(k0, n, z)
    # phi: correlation of the two outcomes, 0 when a margin is empty; a small positive
    # association (up to n/2 in the cross-product) counts as none, as in the method.
    margins = k1 * (n - k1) * k0 * (n - k0)
    cross = both * neither - only_after * only_before
    if margins == 0:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    elif cross >= 0:
        phi = 0.0
    else:
        phi = cross / math.sqrt(margins)
    d = p1 - p0
    lower = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u0 - p0) + (u0 - p0) ** 2))
    upper = d + math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p0 - l0) + (p0 - l0) ** 2))
    return d, max(-1.0, lower), min(1.0, upper)


def paired_ratio_bootstrap(
    num_a: list[int], den_a: list[int], num_b: list[int], den_b: list[int], reps: int = 10000, seed: int = 0
) -> tuple[float, float, float]:
    """Change in a ratio of sums, ``sum(num_b)/sum(den_b) - sum(num_a)/sum(den_a)``, with a 95%
    percentile interval over problems resampled together for both models. For accuracy among
    finished answers: ``den`` = finished, ``num`` = finished and right. A resample in which a
    model finished nothing is drawn again."""
    n = len(num_a)
    if not n or any(len(x) != n for x in (den_a, num_b, den_b)):
        raise ValueError("paired_ratio_bootstrap needs four equally long non-empty lists")
    if not sum(den_a) or not sum(den_b):
        raise ValueError("paired_ratio_bootstrap: a model has an empty denominator")
    stat = lambda idx: (
        sum(num_b[i] for i in idx) / sum(den_b[i] for i in idx)  # noqa: E731
        - sum(num_a[i] for i in idx) / sum(den_a[i] for i in idx)
    )
    rng, out = random.Random(seed), list[float]()
    while len(out) < reps:
        idx = [rng.randrange(n) for _ in range(n)]
        if sum(den_a[i] for i in idx) and sum(den_b[i] for i in idx):
            out.append(stat(idx))
    out.sort()
    return stat(range(n)), out[int(0.025 * reps)], out[int(0.975 * reps) - 1]
