"""Small-sample statistics for comparing models on the same problems.

- ``wilson``: the Wilson score interval of a proportion (Wilson, 1927), which keeps
  sensible bounds at 0/n and n/n where the normal approximation does not.
- ``paired_bootstrap``: the mean per-problem difference between two models with a
  percentile interval from resampling problems, both models' outcomes together
  (Efron & Tibshirani, 1993, ch. 13), so the interval uses the pairing.
- ``mcnemar_p``: McNemar's exact test (binomial on the discordant pairs) for two
  models' 0/1 outcomes on the same problems.
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


def paired_bootstrap(a: list[float], b: list[float], reps: int = 10000, seed: int = 0
                     ) -> tuple[float, float, float]:
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
    tail = sum(math.comb(n, k) for k in range(min(up, down) + 1)) / 2 ** n
    return min(1.0, 2 * tail)
